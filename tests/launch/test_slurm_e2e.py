"""Real Slurm: scripts/slurm/start.sh starts munged, slurmctld and four slurmd (virtual nodes with fake GPU GRES);
the reference workload goes through the Slurm launcher; one job is requeued mid-run and resumes from its checkpoint.
The daemons are stopped by PID (scripts/slurm/stop.sh) when the session ends."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fmstack.catalog import load_catalog
from fmstack.orchestration.jobspec import parse_jobspec, resolve
from fmstack.orchestration.launchers.base import JobStatus
from fmstack.orchestration.launchers.slurm import SlurmLauncher
from fmstack.workloads.metrics import read_loss_curve
from tests.workloads.conftest import prefix

pytestmark = [pytest.mark.slurm, pytest.mark.torch]
SCRIPTS = Path(__file__).resolve().parents[2] / "scripts" / "slurm"


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmLauncher]:
    pytest.importorskip("torch")
    if os.geteuid() != 0 and not shutil.which("slurmctld"):
        pytest.skip("Slurm is not installed and installing it needs root")
    subprocess.run(["bash", str(SCRIPTS / "stop.sh")], check=False, timeout=60)
    proc = subprocess.run(["bash", str(SCRIPTS / "start.sh")], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0 and not shutil.which("slurmctld"):
        pytest.skip(f"slurmctld cannot be installed here: {proc.stderr[-300:]}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    # four idle virtual nodes of 4 CPUs and 8 fake GPUs each (scripts/slurm/slurm.conf)
    assert proc.stdout.split() == [x for n in range(1, 5) for x in (f"n{n}", "idle", "4", "gpu:8")]
    try:
        yield SlurmLauncher()
    finally:
        subprocess.run(["bash", str(SCRIPTS / "stop.sh")], check=False, timeout=60)
        assert not list(Path("/run/fmstack-slurm").glob("*.pid"))


def _spec(tmp: Path, **over: object) -> dict[str, object]:
    spec: dict[str, object] = {
        "name": "gpt-e2e",
        "nodes": 2,
        "procs_per_node": 1,
        "gpus_per_node": 2,
        "python": sys.executable,
        "log_dir": str(tmp / "logs"),
        "env": {"OMP_NUM_THREADS": "1"},
        "time_limit_min": 10,
        "workload": {"steps": 6, "batch_size": 4, "extra_args": ["--metrics-file", str(tmp / "m.jsonl")]},
        "checkpoint": {"location": str(tmp / "ckpt"), "interval_steps": 3},
    }
    spec.update(over)
    return spec


def _wait(slurm: SlurmLauncher, native: str, states: set[str], timeout_s: float) -> JobStatus:
    deadline = time.monotonic() + timeout_s
    while True:
        st = slurm.status(native)
        if st.state in states or time.monotonic() > deadline:
            return st
        time.sleep(0.5)


def test_reference_workload_completes_on_two_nodes(slurm: SlurmLauncher, tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    job = resolve(parse_jobspec(_spec(tmp_path)), load_catalog())
    sub = slurm.submit(job)
    native = sub.job_id.split(":")[1]
    st = _wait(slurm, native, {"COMPLETED", "FAILED", "CANCELLED"}, 240)
    log = (tmp_path / "logs" / f"gpt-e2e-{native}.out").read_text()
    assert st.state == "COMPLETED", log[-3000:]
    assert "ExitCode=0:0" in st.detail
    assert '"world_size": 2' in log  # one torchrun per virtual node, rendezvous on node 0
    assert list(read_loss_curve(tmp_path / "m.jsonl")) == [1, 2, 3, 4, 5, 6]


def test_requeued_job_resumes_from_its_checkpoint(
    slurm: SlurmLauncher, tmp_path: Path, reference_curve: dict[int, float]
) -> None:
    (tmp_path / "logs").mkdir()
    workload = {
        "steps": 24,
        "batch_size": 4,
        "step_sleep_s": 0.25,
        "extra_args": ["--dropout", "0.1", "--metrics-file", str(tmp_path / "m.jsonl")],
    }
    job = resolve(parse_jobspec(_spec(tmp_path, nodes=1, workload=workload)), load_catalog())
    native = slurm.submit(job).job_id.split(":")[1]
    ckpt = tmp_path / "ckpt"
    deadline = time.monotonic() + 180
    while not list(ckpt.glob("step_*/COMMITTED")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert list(ckpt.glob("step_*/COMMITTED")), "no checkpoint was committed"
    assert slurm.status(native).state == "RUNNING"
    slurm.requeue(native)
    # a requeued job waits for cred_expire (10 s here); starting it now is what an operator would do
    subprocess.run(["scontrol", "update", f"jobid={native}", "starttime=now"], check=False, timeout=30)
    st = _wait(slurm, native, {"COMPLETED", "FAILED", "CANCELLED"}, 240)
    log = (tmp_path / "logs" / f"gpt-e2e-{native}.out").read_text()
    assert st.state == "COMPLETED", log[-3000:]
    assert st.restarts == 1
    assert "restart 1 on" in log
    resumed = [int(x) for x in re.findall(r"ckpt resumed step=(\d+)", log)]
    assert len(resumed) == 1 and resumed[0] >= 3 and resumed[0] % 3 == 0
    assert '"restart_count": 1' in log
    # the resumed run's loss curve is the uninterrupted one, exactly (same args: batch 4, dropout 0.1, 24 steps)
    assert read_loss_curve(tmp_path / "m.jsonl") == prefix(reference_curve, 24)


def test_health_action_drains_a_node(slurm: SlurmLauncher) -> None:
    from fmstack.observability.actions import Action

    assert slurm.apply_health_action("n4", Action.RESTART_JOB, "xid-13") is False
    assert slurm.apply_health_action("n4", Action.RESET_GPU, "xid-79") is True
    try:
        out = subprocess.run(["sinfo", "-h", "-n", "n4", "-o", "%T %E"], capture_output=True, text=True, check=True)
        assert out.stdout.split()[0] in ("drained", "draining")
        assert "fmstack-health:RESET_GPU:xid-79" in out.stdout
    finally:
        slurm.resume_node("n4")
    out = subprocess.run(["sinfo", "-h", "-n", "n4", "-o", "%T"], capture_output=True, text=True, check=True)
    # back in service; sinfo may append '*' (no recent ping) for a moment on a loaded machine
    assert out.stdout.strip().rstrip("*") == "idle"


def test_cancel_of_an_ended_job_says_so(slurm: SlurmLauncher, tmp_path: Path) -> None:
    # scancel of a finished job exits 0 silently: `fmstack cancel` printed "cancel requested" for a job that had
    # completed (launch review, session 8); now it says so, as for a local job, and the state stays COMPLETED
    from click.testing import CliRunner

    from fmstack.cli.main import cli

    (tmp_path / "logs").mkdir()
    spec = _spec(tmp_path, nodes=1, command=["/bin/true"], workload=None, checkpoint=None)
    native = slurm.submit(resolve(parse_jobspec(spec), load_catalog())).job_id.split(":")[1]
    assert _wait(slurm, native, {"COMPLETED", "FAILED", "CANCELLED"}, 120).state == "COMPLETED"
    out = CliRunner().invoke(cli, ["cancel", f"slurm:{native}"])
    assert (out.exit_code, out.output.strip()) == (0, f"slurm:{native} already ended (COMPLETED); nothing to cancel")
    assert slurm.status(native).state == "COMPLETED"


def test_cancel_checkpoints_the_step_then_ends_cancelled(slurm: SlurmLauncher, tmp_path: Path) -> None:
    # a plain scancel signals srun, which kills its tasks at once ("forcing job termination"), possibly mid-save;
    # fmstack cancel sends USR2 to the batch shell alone: the steps save the step they are at, then the job cancels
    from click.testing import CliRunner

    from fmstack.cli.main import cli

    (tmp_path / "logs").mkdir()
    workload = {"steps": 200, "batch_size": 4, "step_sleep_s": 0.2,
                "extra_args": ["--metrics-file", str(tmp_path / "m.jsonl")]}  # fmt: skip
    job = resolve(parse_jobspec(_spec(tmp_path, nodes=1, workload=workload)), load_catalog())
    native = slurm.submit(job).job_id.split(":")[1]
    metrics = tmp_path / "m.jsonl"
    deadline = time.monotonic() + 180
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 4) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert slurm.status(native).state == "RUNNING"
    out = CliRunner().invoke(cli, ["cancel", f"slurm:{native}"])
    assert out.exit_code == 0, out.output
    assert "checkpoints the step it is at, then ends CANCELLED" in out.output
    st = _wait(slurm, native, {"COMPLETED", "FAILED", "CANCELLED"}, 120)
    log = (tmp_path / "logs" / f"gpt-e2e-{native}.out").read_text()
    assert st.state == "CANCELLED", log[-3000:]
    # torchrun itself exits 1 on the SIGTERM it forwarded (SignalException); the workers saved first
    assert "fmstack: cancel requested: checkpoint and stop" in log and "fmstack: stopped for cancel (exit " in log
    stopped = [int(x) for x in re.findall(r'"stopped_at_step": (\d+)', log)]
    assert len(stopped) == 1 and 4 <= stopped[0] < 200
    # the step it stopped at is committed, whether or not it falls on the 3-step interval
    assert (tmp_path / "ckpt" / f"step_{stopped[0]:08d}" / "COMMITTED").exists()
    assert max(read_loss_curve(metrics)) == stopped[0]


def test_cancel_now_is_a_plain_scancel(slurm: SlurmLauncher, tmp_path: Path) -> None:
    # requeue_exit_codes [1] ("any failure"): torchrun exits 1 on the SIGTERM of a plain scancel, and the script used
    # to requeue the job it was asked to cancel (PENDING again, restarts=1; session 15)
    (tmp_path / "logs").mkdir()
    metrics = tmp_path / "m.jsonl"
    workload = {"steps": 200, "batch_size": 4, "step_sleep_s": 0.2, "extra_args": ["--metrics-file", str(metrics)]}
    retry = {"max_restarts": 3, "requeue_exit_codes": [1]}
    job = resolve(parse_jobspec(_spec(tmp_path, workload=workload, retry=retry)), load_catalog())
    native = slurm.submit(job).job_id.split(":")[1]
    deadline = time.monotonic() + 180  # training, not torchrun still starting: its workers handle the SIGTERM
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 2) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert slurm.status(native).state == "RUNNING"
    assert slurm.cancel(native, checkpoint=False) == "scancel sent"
    st = _wait(slurm, native, {"COMPLETED", "FAILED", "CANCELLED", "PENDING"}, 120)
    log = (tmp_path / "logs" / f"gpt-e2e-{native}.out").read_text()
    assert (st.state, st.restarts) == ("CANCELLED", 0), log[-3000:]
    assert "cancel requested: checkpoint and stop" not in log and "asks for a requeue" not in log


def _worker_pids(marker: str) -> dict[int, int]:
    """RANK -> pid of the workload's worker processes (torchrun starts them as ``python -u -m
    fmstack.workloads.train``) whose command line names ``marker``."""
    out: dict[int, int] = {}
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            if "-u -m fmstack.workloads.train" not in cmd or marker not in cmd:
                continue
            env = dict(v.split("=", 1) for v in (proc / "environ").read_bytes().decode().split("\0") if "=" in v)
        except OSError:
            continue
        if "RANK" in env:
            out[int(env["RANK"])] = int(proc.name)
    return out


def test_two_nodes_time_limit_then_a_failed_node_resume_each_time(slurm: SlurmLauncher, tmp_path: Path) -> None:
    # a 2-node job is told its time limit is near (SIGUSR1 to the batch shell, as --signal=B:USR1 does): it
    # checkpoints the step it is at and is requeued; in the next run one node's worker dies (SIGKILL): srun kills the
    # other node's task and exits 128 + signal, and the requeue on exit code 1 must still happen (it did not: srun's
    # status is not the failing task's code), although max_restarts is 1 and SLURM_RESTART_COUNT is already 1 after
    # the time-limit requeue (which is not a failure). Each run resumes from the newest committed checkpoint, and
    # the loss curve is the uninterrupted one, bit for bit.
    (tmp_path / "logs").mkdir()
    steps, marker = 30, str(tmp_path / "m.jsonl")
    workload = {"steps": steps, "batch_size": 4, "step_sleep_s": 0.25, "extra_args": ["--metrics-file", marker]}
    retry = {"max_restarts": 1, "requeue_exit_codes": [1]}
    job = resolve(parse_jobspec(_spec(tmp_path, workload=workload, retry=retry)), load_catalog())
    native = slurm.submit(job).job_id.split(":")[1]
    ckpt, log_path = tmp_path / "ckpt", tmp_path / "logs" / f"gpt-e2e-{native}.out"

    def committed() -> list[int]:
        return sorted(int(d.parent.name.split("_")[1]) for d in ckpt.glob("step_*/COMMITTED"))

    def wait_for(pred: Callable[[], object], what: str, timeout_s: float = 180) -> None:
        deadline = time.monotonic() + timeout_s
        while not pred():
            assert time.monotonic() < deadline, f"{what}: " + (
                log_path.read_text()[-3000:] if log_path.exists() else ""
            )
            time.sleep(0.2)

    wait_for(lambda: committed(), "no checkpoint committed")
    subprocess.run(["scancel", "--batch", "--signal=USR1", native], check=True, timeout=30)
    wait_for(lambda: "requeue to resume" in log_path.read_text(), "no time-limit requeue")
    # a requeued job starts once its credential has expired (cred_expire, 10 s here): forced earlier, slurmctld kills
    # it ("Killing non-startable batch JobId=...: Job credential revoked"), so the test waits
    wait_for(lambda: "ckpt resumed" in log_path.read_text(), "the second run did not resume")
    before = max(committed())
    wait_for(lambda: max(committed()) > before and len(_worker_pids(marker)) == 2, "no checkpoint in the second run")
    newest = max(committed())
    os.kill(_worker_pids(marker)[1], signal.SIGKILL)  # rank 1: node 1's only worker
    wait_for(lambda: "asks for a requeue" in log_path.read_text(), "the failure was not requeued")
    st = _wait(slurm, native, {"COMPLETED", "FAILED", "CANCELLED"}, 240)
    log = log_path.read_text()
    assert st.state == "COMPLETED", log[-3000:]
    assert st.restarts == 2 and '"restart_count": 2' in log
    assert log.count("fmstack: stopped for the time limit") == 1
    assert log.count("fmstack: task exit code 1 asks for a requeue") == 1
    resumed = [int(x) for x in re.findall(r"ckpt resumed step=(\d+)", log)]
    stopped = [int(x) for x in re.findall(r'"stopped_at_step": (\d+)', log)]
    assert len(resumed) == 2 and resumed[0] == stopped[0]  # the time-limit stop's own step
    assert newest <= resumed[1] < newest + 3 and resumed[1] % 3 == 0  # the newest committed when the worker died
    # the uninterrupted run: 2 processes on one host, the same ranks, seed and batches
    ref = tmp_path / "ref.jsonl"
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                    "-m", "fmstack.workloads.train", "--steps", str(steps), "--batch-size", "4",
                    "--metrics-file", str(ref)],
                   check=True, capture_output=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
    assert read_loss_curve(Path(marker)) == read_loss_curve(ref)


def test_gb200_segment_on_a_slurm_without_it(slurm: SlurmLauncher, tmp_path: Path) -> None:
    # a 2-node p6e-gb200 job with slurm.segment: 2 renders --segment=2 (auto renders none: one NVL72 rack holds two
    # nodes); CI's Slurm (Debian 12: 22.05.8) predates
    # --segment (24.05): `fmstack launch` says so in one line, exit 2, before sbatch sees the script; segment: none
    # submits the same job, which runs (the NCCL MNNVL variables are exported all the same)
    from fmstack.orchestration.launchers.slurm_gb200 import SEGMENT_SINCE, parse_version

    version_text = subprocess.run(["sbatch", "--version"], capture_output=True, text=True, check=True).stdout
    version = parse_version(version_text)
    assert version is not None, version_text
    (tmp_path / "logs").mkdir()
    spec = _spec(tmp_path, command=["/bin/true"], workload=None, checkpoint=None, instance="p6e-gb200.36xlarge",
                 gpus_per_node=None, procs_per_node=1)  # fmt: skip
    spec["slurm"] = {"segment": 2}
    path = tmp_path / "gb.yaml"
    path.write_text(json.dumps(spec))  # JSON is YAML
    before = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, check=True).stdout
    proc = subprocess.run([sys.executable, "-m", "fmstack", "launch", str(path), "--on", "slurm"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    if version[:2] < SEGMENT_SINCE:
        assert proc.returncode == 2, proc.stderr + proc.stdout
        assert proc.stderr.splitlines() == [
            f"fmstack: error: slurm.segment: --segment=2 needs Slurm 24.05 or newer (topology/block segments), but "
            f"sbatch --version says {version_text.strip()!r}; set slurm.segment: none to submit without it"
        ]
        assert subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout == before
    else:  # a newer CI Slurm has --segment; without topology/block configured its answer is its own
        pytest.skip(f"sbatch {version_text.strip()} knows --segment")
    spec["slurm"] = {"segment": "none"}
    job = resolve(parse_jobspec(spec), load_catalog())
    native = slurm.submit(job).job_id.split(":")[1]
    st = _wait(slurm, native, {"COMPLETED", "FAILED", "CANCELLED"}, 120)
    log = (tmp_path / "logs" / f"gpt-e2e-{native}.out").read_text()
    assert st.state == "COMPLETED", log[-3000:]
    script = subprocess.run(["scontrol", "write", "batch_script", native, "-"], capture_output=True, text=True)
    assert script.returncode == 0, script.stderr  # slurmctld keeps the script while it remembers the job
    assert "#SBATCH --segment" not in script.stdout and "export NCCL_MNNVL_ENABLE=1" in script.stdout
