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
