"""Kubeflow PyTorchJob launcher (kubeflow.org/v1), the alternative to JobSet: same client, other manifest."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fmstack.orchestration.jobspec import ResolvedJob
from fmstack.orchestration.launchers.k8s_manifests import render_pytorchjob
from fmstack.orchestration.launchers.kubernetes import KubernetesLauncher


class PyTorchJobLauncher(KubernetesLauncher):
    name = "pytorchjob"
    group, version, plural = "kubeflow.org", "v1", "pytorchjobs"
    render_manifest: Callable[[ResolvedJob], dict[str, Any]] = staticmethod(render_pytorchjob)
    pod_label = "training.kubeflow.org/job-name"
    """The label the training operator puts on a PyTorchJob's pods (kubeflow/training-operator JobNameLabel)."""

    @staticmethod
    def expected_pods(obj: dict[str, Any]) -> int:
        """One pod per replica, Master and Workers."""
        specs = (obj.get("spec") or {}).get("pytorchReplicaSpecs") or {}
        return sum(int(r.get("replicas", 1)) for r in specs.values())

    @staticmethod
    def suspended(obj: dict[str, Any]) -> bool:
        return bool(((obj.get("spec") or {}).get("runPolicy") or {}).get("suspend"))

    @staticmethod
    def state_of(obj: dict[str, Any], true: set[str]) -> str:
        """From the job's conditions (kubeflow training-operator, kubeflow.org/v1 JobConditionType: Created,
        Running, Restarting, Succeeded, Suspended, Failed). The operator sets Created as soon as it has made the
        pods, pending or not; only Running (or Restarting, pods being recreated after a failure) means the job
        runs. Created alone is PENDING: it used to read RUNNING while every pod still waited for a node."""
        if "Succeeded" in true:
            return "COMPLETED"
        if "Failed" in true:
            return "FAILED"
        if "Suspended" in true or PyTorchJobLauncher.suspended(obj):
            return "PENDING"
        if true & {"Running", "Restarting"}:
            return "RUNNING"
        return "PENDING"
