"""Kubernetes launcher: render a JobSet, validate it offline, submit it with the official ``kubernetes`` client.

The client comes from the kubeconfig (``KUBECONFIG`` or ~/.kube/config; in-cluster config as a fallback) and goes
through ``CustomObjectsApi`` (create / get / delete). Tests point a kubeconfig at a stub API server on 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import yaml

from fmstack.errors import InputError
from fmstack.orchestration.jobspec import ResolvedJob
from fmstack.orchestration.launchers.base import JobStatus, Submission
from fmstack.orchestration.launchers.k8s_manifests import render_jobset, validate_manifest


def default_api_client() -> Any:
    from kubernetes import client, config

    try:
        config.load_kube_config()  # type: ignore[no-untyped-call]
    except Exception:
        try:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
        except Exception:
            raise InputError(
                "kubeconfig", "no usable kubeconfig (set KUBECONFIG) and not running in a cluster"
            ) from None
    return client.ApiClient()


class KubernetesLauncher:
    """JobSet flavour; ``PyTorchJobLauncher`` (pytorchjob.py) changes only the four class attributes."""

    name = "kubernetes"
    group, version, plural = "jobset.x-k8s.io", "v1alpha2", "jobsets"
    render_manifest: Callable[[ResolvedJob], dict[str, Any]] = staticmethod(render_jobset)

    def __init__(self, api_client_factory: Callable[[], Any] = default_api_client) -> None:
        self._api_client_factory = api_client_factory

    def manifest(self, job: ResolvedJob) -> dict[str, Any]:
        m = self.render_manifest(job)
        validate_manifest(m)
        return m

    def render(self, job: ResolvedJob) -> str:
        return yaml.safe_dump(self.manifest(job), sort_keys=False)

    def _api(self) -> Any:
        from kubernetes import client

        return client.CustomObjectsApi(self._api_client_factory())

    def submit(self, job: ResolvedJob, *, dry_run: bool = False) -> Submission:
        m = self.manifest(job)
        text = yaml.safe_dump(m, sort_keys=False)
        native = f"{job.spec.namespace}/{job.spec.name}"
        if dry_run:
            return Submission(job_id=f"{self.name}:{native}", rendered=text, dry_run=True)
        self._call("create", lambda api: api.create_namespaced_custom_object(
            self.group, self.version, job.spec.namespace, self.plural, m))  # fmt: skip
        return Submission(job_id=f"{self.name}:{native}", rendered=text, dry_run=False)

    def _split(self, native_id: str) -> tuple[str, str]:
        ns, sep, name = native_id.partition("/")
        if not sep or not ns or not name:
            raise InputError("ID", f"{self.name}:{native_id}: expected {self.name}:NAMESPACE/NAME")
        return ns, name

    def _call(self, what: str, fn: Callable[[Any], Any]) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            return fn(self._api())
        except ApiException as exc:
            raise InputError("kubernetes", f"{what} failed: HTTP {exc.status} {exc.reason}") from None
        except OSError as exc:
            raise InputError("kubernetes", f"{what} failed: API server unreachable ({exc})") from None

    def status(self, native_id: str) -> JobStatus:
        ns, name = self._split(native_id)
        obj = self._call(
            "get", lambda api: api.get_namespaced_custom_object(self.group, self.version, ns, self.plural, name)
        )
        st = obj.get("status") or {}
        true = {c.get("type") for c in st.get("conditions") or [] if c.get("status") == "True"}
        return JobStatus(
            job_id=f"{self.name}:{native_id}",
            state=self.state_of(obj, true),
            detail=",".join(sorted(true)),
            restarts=int(st.get("restarts", 0)),
        )

    @staticmethod
    def state_of(obj: dict[str, Any], true: set[str]) -> str:
        """JobSet: conditions Completed / Failed / Suspended (jobset api v1alpha2); a JobSet with a status and
        none of them is running its Jobs."""
        if true & {"Completed", "Succeeded"}:
            return "COMPLETED"
        if "Failed" in true:
            return "FAILED"
        if "Suspended" in true or (obj.get("spec") or {}).get("suspend") or not obj.get("status"):
            return "PENDING"
        return "RUNNING"

    def cancel(self, native_id: str) -> None:
        ns, name = self._split(native_id)
        self._call(
            "delete", lambda api: api.delete_namespaced_custom_object(self.group, self.version, ns, self.plural, name)
        )
