"""A deleted or preempted pod of a checkpointing job gets the stop lead between SIGTERM and SIGKILL.

Kubernetes sends SIGTERM and, ``terminationGracePeriodSeconds`` later (default 30 s), SIGKILL; torchrun SIGKILLs its
workers ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT`` after forwarding a SIGTERM (default 30 s). The reference workload saves the
step it is at on SIGTERM (fmstack.workloads.stop), which needs one step, the save and the exit: both waits get the
JobSpec's stop lead (``checkpoint.stop_warning_s``, default 120 s), as the Slurm script's do."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from fmstack.catalog import Catalog
from fmstack.orchestration.jobspec import parse_jobspec, resolve
from fmstack.orchestration.launchers.k8s_manifests import render_jobset, render_pytorchjob, validate_manifest
from tests.launch.conftest import P5_SPEC


def _pods(m: dict[str, Any]) -> list[dict[str, Any]]:
    if m["kind"] == "JobSet":
        return [rj["template"]["spec"]["template"]["spec"] for rj in m["spec"]["replicatedJobs"]]
    return [r["template"]["spec"] for r in m["spec"]["pytorchReplicaSpecs"].values()]


def _shutdown_env(pod: dict[str, Any]) -> str | None:
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    return env.get("TORCH_ELASTIC_SHUTDOWN_TIMEOUT")


@pytest.mark.parametrize("render", [render_jobset, render_pytorchjob])
@pytest.mark.parametrize(
    ("over", "grace"),
    [
        ({}, 120),  # P5_SPEC checkpoints: the default lead
        ({"checkpoint": {"location": "/fsx/ck", "durable": "s3://b/k", "stop_warning_s": 600}}, 600),
        ({"checkpoint": {"location": "/fsx/ck", "durable": "s3://b/k", "stop_warning_s": 0}}, None),
        ({"checkpoint": None}, None),  # nothing to save: Kubernetes' 30 s default
        ({"workload": None, "command": ["./train.sh"]}, None),  # a program that may not save on SIGTERM
    ],
)
def test_grace_and_torchrun_shutdown_follow_the_stop_lead(
    catalog: Catalog, render: Any, over: dict[str, Any], grace: int | None
) -> None:
    spec = copy.deepcopy(P5_SPEC)
    spec.update(over)
    manifest = render(resolve(parse_jobspec(spec), catalog))
    validate_manifest(manifest)  # the official schema accepts the field
    for pod in _pods(manifest):
        assert pod.get("terminationGracePeriodSeconds") == grace
        assert _shutdown_env(pod) == (None if grace is None else str(grace))


def test_the_users_own_torchrun_timeout_wins(catalog: Catalog) -> None:
    spec = copy.deepcopy(P5_SPEC)
    spec["env"] = {**spec.get("env", {}), "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "300"}
    for pod in _pods(render_jobset(resolve(parse_jobspec(spec), catalog))):
        assert _shutdown_env(pod) == "300" and pod["terminationGracePeriodSeconds"] == 120
