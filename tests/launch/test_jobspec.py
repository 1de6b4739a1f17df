"""JobSpec parsing, catalog resolution and the checks that run before anything is submitted."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from fmstack.catalog import Catalog
from fmstack.errors import InputError
from fmstack.orchestration.ckpt_checks import check_checkpoint_location, node_local_warning
from fmstack.orchestration.jobspec import load_jobspec, parse_jobspec, resolve, workload_argv
from fmstack.orchestration.launchers.torchrun import job_env
from tests.launch.conftest import P5_SPEC


def test_instance_fills_in_gpus_and_efa(catalog: Catalog) -> None:
    job = resolve(parse_jobspec(P5_SPEC), catalog)
    # p5.48xlarge: 8 H100, 32 EFA network cards, 2048 GiB host memory (catalog, AWS P5 page)
    assert (job.gpus_per_node, job.procs_per_node, job.efa_devices, job.memory_gib) == (8, 8, 32, 2048)
    assert job.world_size == 32


def test_more_gpus_than_the_instance_has(catalog: Catalog) -> None:
    with pytest.raises(InputError, match=r"gpus_per_node: 16 > 8, the GPUs of one p5.48xlarge"):
        resolve(parse_jobspec({**P5_SPEC, "gpus_per_node": 16}), catalog)


def test_plan_must_cover_the_job(catalog: Catalog) -> None:
    spec = {**P5_SPEC, "plan": {"tp": 8, "pp": 2, "dp": 4}}
    with pytest.raises(
        InputError, match=r"tp\(8\) \* pp\(2\) \* dp\(4\) = 64 != nodes\(4\) \* procs_per_node\(8\) = 32"
    ):
        resolve(parse_jobspec(spec), catalog)


@pytest.mark.parametrize(
    ("patch", "expected"),
    [
        ({"colour": "red"}, "field 'colour': unknown field"),
        ({"checkpoint": {"location": "/x", "interval": 5}}, "field 'checkpoint.interval': unknown field"),
        ({"name": "My Job"}, "field 'name'"),
        ({"env": {"A-B": "1"}}, "field 'env'"),
        ({"command": ["echo"]}, "exactly one of 'workload' or 'command'"),
        ({"nodes": 0}, "field 'nodes'"),
        ({"array": "0-3; rm -rf /"}, "field 'array'"),
        ({"array": "3-1"}, "field 'array': Value error, '3-1': the range 3-1 runs backwards"),
        ({"array": "0-3,9-5%2"}, "the range 9-5 runs backwards"),
        # 0 is success: requeueing on it reran a finished job; a status is 8 bits
        ({"retry": {"requeue_exit_codes": [0]}}, "field 'retry.requeue_exit_codes': Value error, \\[0\\]: exit codes"),
        ({"retry": {"requeue_exit_codes": [75, -1, 256]}}, "\\[-1, 256\\]: exit codes that requeue must be 1..255"),
    ],
)
def test_bad_specs_name_the_field(patch: dict[str, object], expected: str) -> None:
    with pytest.raises(InputError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        parse_jobspec({**P5_SPEC, **patch}, "job.yaml")


def test_requeue_exit_codes_take_the_whole_range_of_failures() -> None:
    spec = parse_jobspec({**P5_SPEC, "retry": {"requeue_exit_codes": [1, 75, 143, 255]}}, "job.yaml")
    assert spec.retry.requeue_exit_codes == [1, 75, 143, 255]


def test_toml_and_yaml_read_the_same(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("name: a\nnodes: 2\nworkload: {steps: 5}\n")
    (tmp_path / "a.toml").write_text('name = "a"\nnodes = 2\n[workload]\nsteps = 5\n')
    assert load_jobspec(tmp_path / "a.yaml") == load_jobspec(tmp_path / "a.toml")


def test_workload_argv(catalog: Catalog) -> None:
    argv = workload_argv(resolve(parse_jobspec(P5_SPEC), catalog))
    assert argv[:2] == ["-m", "fmstack.workloads.train"]
    assert argv[argv.index("--ckpt-durable") + 1] == "s3://ckpts/gpt-small"
    assert argv[argv.index("--ckpt-interval") + 1] == "50"


def test_checkpoint_location_checks_create_nothing(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    ok = parse_jobspec({"name": "a", "command": ["true"], "checkpoint": {"location": str(tmp_path / "new" / "dir")}})
    check_checkpoint_location(ok)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]
    bad = parse_jobspec({"name": "a", "command": ["true"], "checkpoint": {"location": str(tmp_path / "file" / "ck")}})
    with pytest.raises(InputError, match=r"checkpoint.location: .* is not a directory"):
        check_checkpoint_location(bad)


def test_unreachable_s3_endpoint(tmp_path: Path) -> None:
    pytest.importorskip("s3fs")
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spec = parse_jobspec(
        {
            "name": "a",
            "command": ["true"],
            "checkpoint": {
                "location": str(tmp_path),
                "durable": "s3://bucket/run",
                "storage_options": {
                    "key": "k", "secret": "s",
                    "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}"},
                    "config_kwargs": {"connect_timeout": 1, "retries": {"max_attempts": 1}},
                },
            },
        }
    )  # fmt: skip
    with pytest.raises(InputError, match=r"checkpoint.durable: 's3://bucket/run' is unreachable"):
        check_checkpoint_location(spec)


def test_reference_workload_refuses_tensor_or_pipeline_parallel_plans(catalog: Catalog) -> None:
    spec = {**P5_SPEC, "plan": {"tp": 8, "pp": 1, "dp": 4}}
    with pytest.raises(InputError, match=r"plan: tp\(8\) pp\(1\): the reference workload trains data parallel only"):
        resolve(parse_jobspec(spec), catalog)


def test_plan_degrees_reach_a_user_program_as_environment(catalog: Catalog) -> None:
    spec = {k: v for k, v in P5_SPEC.items() if k != "workload"}
    job = resolve(
        parse_jobspec({**spec, "command": ["python3", "train.py"], "plan": {"tp": 8, "pp": 2, "dp": 2}}), catalog
    )
    env = job_env(job)
    assert (env["FMSTACK_TP"], env["FMSTACK_PP"], env["FMSTACK_DP"]) == ("8", "2", "2")


def test_node_local_checkpoint_of_a_multi_node_job_is_warned_about() -> None:
    base = {**P5_SPEC, "checkpoint": {"location": "/tmp/ck"}}
    warning = node_local_warning(parse_jobspec(base))
    assert warning is not None and "node-local" in warning and "4 nodes" in warning
    assert node_local_warning(parse_jobspec({**base, "nodes": 1})) is None
    assert node_local_warning(parse_jobspec({**base, "checkpoint": {"location": "/fsx/ck"}})) is None
    assert (
        node_local_warning(parse_jobspec({**base, "checkpoint": {"location": "/tmp/ck", "durable": "s3://b/k"}}))
        is None
    )
    assert node_local_warning(parse_jobspec({**base, "checkpoint": {"location": "/tmpfs-not/ck"}})) is None
