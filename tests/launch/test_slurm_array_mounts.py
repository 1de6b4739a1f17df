"""Slurm arrays: each task its own checkpoint directory, durable prefix and seed; container mounts from the JobSpec
and a warning per path the container does not mount; integer fields refuse booleans and floats."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from fmstack.catalog import Catalog
from fmstack.cli.main import cli
from fmstack.errors import InputError
from fmstack.orchestration.jobspec import ResolvedJob, parse_jobspec, resolve
from fmstack.orchestration.launchers import get_launcher
from fmstack.orchestration.mount_checks import mount_warnings
from tests.launch.conftest import P5_SPEC


def _job(catalog: Catalog, **patch: Any) -> ResolvedJob:
    return resolve(parse_jobspec({**P5_SPEC, **patch}), catalog)


def _srun_line(script: str) -> str:
    (line,) = [x for x in script.splitlines() if x.startswith("srun --kill-on-bad-exit")]
    return line


def test_array_tasks_get_their_own_checkpoint_and_seed(catalog: Catalog) -> None:
    job = _job(catalog, array="0-3", workload={**P5_SPEC["workload"], "seed": 7})
    srun = _srun_line(get_launcher("slurm").render(job))
    assert '--ckpt-dir /fsx/ckpt/gpt-small/task-"$SLURM_ARRAY_TASK_ID"' in srun
    assert '--ckpt-durable s3://ckpts/gpt-small/task-"$SLURM_ARRAY_TASK_ID"' in srun
    assert '--seed "$((7 + SLURM_ARRAY_TASK_ID))"' in srun
    # the mount and its mkdir stay the base location: each task's directory is created inside it
    assert "--container-mounts=/fsx/logs:/fsx/logs,/fsx/ckpt/gpt-small:/fsx/ckpt/gpt-small bash -c" in srun


def test_without_array_the_paths_are_as_written(p5_job: ResolvedJob) -> None:
    srun = _srun_line(get_launcher("slurm").render(p5_job))
    assert "--ckpt-dir /fsx/ckpt/gpt-small --" in srun and "--seed 0 " in srun and "task-" not in srun


def test_extra_args_are_left_as_written(catalog: Catalog) -> None:
    job = _job(catalog, array="0-1", workload={**P5_SPEC["workload"], "extra_args": ["--seed", "3"]})
    # P5_SPEC requeues on exit code 75: srun's stderr goes through the copier that keeps the tasks' exit codes (fd 3)
    assert _srun_line(get_launcher("slurm").render(job)).endswith("--seed 3' 2>&3 &")


def test_array_task_runs_with_its_own_paths(tmp_path: Path, catalog: Catalog) -> None:
    """The rendered script, run with an srun stub: the task id expands inside each task's shell, and a requeued
    task (same SLURM_ARRAY_TASK_ID, SLURM_RESTART_COUNT 1) gets the same directory and seed again."""
    fake = tmp_path / "fakepython"
    fake.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        "with open(os.environ['DUMP'], 'a') as f:\n    f.write(json.dumps(sys.argv[1:]) + '\\n')\n"
    )
    fake.chmod(0o755)
    ckpt = tmp_path / "ckpt"
    spec = {"name": "arr", "workload": {"seed": 5}, "nodes": 1, "array": "0-3", "python": str(fake),
            "log_dir": str(tmp_path), "checkpoint": {"location": str(ckpt), "durable": "s3://b/run/"}}  # fmt: skip
    script = tmp_path / "job.sbatch"
    script.write_text(get_launcher("slurm").render(resolve(parse_jobspec(spec), catalog)))
    stubs = tmp_path / "bin"
    stubs.mkdir()
    (stubs / "srun").write_text('#!/bin/bash\nwhile [[ "$1" == --* ]]; do shift; done\nSLURM_NODEID=0 "$@"\n')
    (stubs / "scontrol").write_text('#!/bin/bash\n[ "$2" = hostnames ] && echo n1 || echo "NodeAddr=127.0.0.1"\n')
    for f in stubs.iterdir():
        f.chmod(0o755)
    for task, restart in ((2, "0"), (3, "0"), (2, "1")):
        env = {**os.environ, "DUMP": str(tmp_path / "dump.jsonl"), "PATH": f"{stubs}:{os.environ['PATH']}",
               "SLURM_JOB_ID": str(100 + task), "SLURM_JOB_NODELIST": "n1", "SLURM_ARRAY_TASK_ID": str(task),
               "SLURM_RESTART_COUNT": restart}  # fmt: skip
        subprocess.run(["bash", str(script)], check=True, cwd=tmp_path, env=env, timeout=60, capture_output=True)
    runs = [json.loads(x) for x in (tmp_path / "dump.jsonl").read_text().splitlines()]

    def flag(argv: list[str], name: str) -> str:
        return argv[argv.index(name) + 1]

    got = [(flag(a, "--ckpt-dir"), flag(a, "--ckpt-durable"), flag(a, "--seed")) for a in runs]
    assert got == [
        (f"{ckpt}/task-2", "s3://b/run/task-2", "7"),
        (f"{ckpt}/task-3", "s3://b/run/task-3", "8"),
        (f"{ckpt}/task-2", "s3://b/run/task-2", "7"),  # the requeued task 2 finds its own checkpoint
    ]


def test_container_mounts_are_rendered(catalog: Catalog) -> None:
    job = _job(catalog, container_mounts=["/fsx/hf", "/fsx/data:/data:ro", "/fsx/logs"])
    srun = _srun_line(get_launcher("slurm").render(job))
    # /fsx/logs is mounted once: one mount per destination
    assert (
        "--container-mounts=/fsx/logs:/fsx/logs,/fsx/ckpt/gpt-small:/fsx/ckpt/gpt-small,/fsx/hf:/fsx/hf,"
        "/fsx/data:/data:ro bash -c"
    ) in srun
    # user mounts are not created: a missing source is the user's typo, which enroot reports
    (mkdir,) = [x for x in get_launcher("slurm").render(job).splitlines() if " mkdir -p -- " in x]
    assert "/fsx/hf" not in mkdir


def test_unmounted_paths_are_warned_about_once_each(catalog: Catalog) -> None:
    wl = {**P5_SPEC["workload"], "extra_args": ["--metrics-file", "/fsx/m.jsonl", "--out=/fsx/hf/x", "/usr/x"]}
    job = _job(catalog, workload=wl, env={"HF_HOME": "/fsx/hf", "LD_LIBRARY_PATH": "/usr/lib:/fsx/lib"})
    lines = mount_warnings(job, "slurm")
    assert [line.split(" is not under")[0] for line in lines] == [
        "warning: env.HF_HOME '/fsx/hf'",
        "warning: env.LD_LIBRARY_PATH '/fsx/lib'",
        "warning: workload.extra_args '/fsx/m.jsonl'",
        "warning: workload.extra_args '/fsx/hf/x'",
    ]
    assert lines[0].endswith("lost when the container ends; add it (or a parent) to container_mounts")
    mounted = _job(catalog, workload=wl, env={"HF_HOME": "/fsx/hf"}, container_mounts=["/fsx/hf", "/fsx/m.jsonl"])
    assert mount_warnings(mounted, "slurm") == []
    # URLs are no paths (review, 2026-11-24: 'http://proxy.corp:3128' was read as the path '//proxy.corp')
    urls = {"HTTPS_PROXY": "http://proxy.corp:3128", "MLFLOW_TRACKING_URI": "s3://bkt/mlflow", "X": "//host/share"}
    assert mount_warnings(_job(catalog, env=urls), "slurm") == []
    assert mount_warnings(_job(catalog, env=urls), "kubernetes") == []
    # without image srun runs on the host: nothing to warn about, and container_mounts does nothing
    host = _job(catalog, image=None, container_mounts=["/fsx/hf"])
    assert mount_warnings(host, "slurm") == [
        "warning: container_mounts is for Slurm containers (image, pyxis); Slurm without image runs on the host"
    ]


def test_kubernetes_warns_of_paths_outside_its_volumes(catalog: Catalog) -> None:
    ck = {**P5_SPEC["checkpoint"], "pvc": "fsx-claim", "location": "/fsx"}
    lines = mount_warnings(_job(catalog, checkpoint=ck), "kubernetes")
    assert lines == []  # /fsx/hf is on the claim
    lines = mount_warnings(_job(catalog), "kubernetes")
    assert lines[0].startswith("warning: env.HF_HOME '/fsx/hf' is not under a container mount (/dev/shm)")
    assert lines[0].endswith(
        "the pods mount only /dev/shm and checkpoint.pvc at checkpoint.location: put it under one of them"
    )


def test_cli_prints_the_warnings_on_stderr(tmp_path: Path) -> None:
    spec = {**P5_SPEC, "array": "0-3"}
    (tmp_path / "job.json").write_text(json.dumps(spec))
    for on in ("slurm", "kubernetes"):
        res = CliRunner().invoke(cli, ["launch", str(tmp_path / "job.json"), "--on", on, "--dry-run"])
        assert res.exit_code == 0, res.output
        assert "warning: env.HF_HOME '/fsx/hf' is not under a container mount" in res.stderr
    assert "warning: array '0-3' is a Slurm job array; --on kubernetes runs one job and ignores it" in res.stderr
    # extra_args that set a per-task option override it in every task (argparse keeps the last value)
    wl = {**P5_SPEC["workload"], "extra_args": ["--seed=3", "--ckpt-dir", "/fsx/other"]}
    (tmp_path / "job2.json").write_text(json.dumps({**spec, "workload": wl}))
    res = CliRunner().invoke(cli, ["launch", str(tmp_path / "job2.json"), "--on", "slurm", "--dry-run"])
    assert res.exit_code == 0, res.output
    for flag in ("--seed", "--ckpt-dir"):
        assert (
            f"warning: workload.extra_args sets {flag}, which overrides the per-task value of array '0-3'" in res.stderr
        )


@pytest.mark.parametrize(
    ("patch", "expected"),
    [
        ({"nodes": True}, "field 'nodes': Input should be a valid integer (given True)"),
        ({"nodes": 2.0}, "field 'nodes': Input should be a valid integer (given 2.0)"),
        ({"time_limit_min": False}, "field 'time_limit_min'"),
        ({"workload": {"steps": True}}, "field 'workload.steps'"),
        ({"checkpoint": {"location": "/x", "keep_last": 1.5}}, "field 'checkpoint.keep_last'"),
        ({"retry": {"requeue_exit_codes": [True]}}, "field 'retry.requeue_exit_codes.0'"),
        ({"plan": {"tp": True, "dp": 32}}, "field 'plan.tp'"),
        ({"memory_gib": True}, "field 'memory_gib': Input should be a valid number"),
        ({"exclusive": 1}, "field 'exclusive': Input should be a valid boolean"),
        ({"container_mounts": ["fsx/hf"]}, "field 'container_mounts': Value error, 'fsx/hf': mount paths must be"),
        ({"container_mounts": ["/a:/b:/c"]}, "must be PATH, SRC:DST or SRC:DST:ro"),
        # YAML 1.1 reads 1e3 as text: say how to write it; an unquoted array range that YAML read as a number
        ({"memory_gib": "1e3"}, "(given '1e3'); write a number without quotes (YAML 1.1 reads 1e1 as text"),
        ({"array": 5}, "field 'array': Input should be a valid string (given 5); quote it as written in the file"),
        ({"nodes": "2"}, "field 'nodes': Input should be a valid integer (given '2'); write a whole number without"),
    ],
)
def test_typed_fields_refuse_other_types(patch: dict[str, object], expected: str) -> None:
    with pytest.raises(InputError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        parse_jobspec({**P5_SPEC, **patch}, "job.yaml")


def test_memory_as_a_whole_number_still_reads() -> None:
    assert parse_jobspec({**P5_SPEC, "memory_gib": 1536}).memory_gib == 1536


def test_a_user_mount_onto_an_fmstack_mount_is_refused(catalog: Catalog) -> None:
    """Review, 2026-11-24: '/lustre/x:<checkpoint location>' was dropped silently (fmstack's own mount won)."""
    job = _job(catalog)
    ckpt = job.spec.checkpoint
    assert ckpt is not None
    bad = _job(catalog, container_mounts=[f"/lustre/x:{ckpt.location}"])
    with pytest.raises(InputError, match=rf"^container_mounts: '/lustre/x:{ckpt.location}' mounts onto"):
        get_launcher("slurm").render(bad)
    parent = _job(catalog, container_mounts=["/lustre/x:/fsx"])  # would cover /fsx/logs and the checkpoint dir
    with pytest.raises(InputError, match=r"^container_mounts: '/lustre/x:/fsx' mounts onto /fsx, a parent of /fsx/"):
        get_launcher("slurm").render(parent)
    same = _job(catalog, container_mounts=[ckpt.location])  # the same source and destination: nothing to refuse
    assert ckpt.location in get_launcher("slurm").render(same)
