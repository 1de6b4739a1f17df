"""Kubernetes launcher: render a JobSet, validate it offline, submit it with the official ``kubernetes`` client.

The client comes from the kubeconfig (``KUBECONFIG`` or ~/.kube/config; in-cluster config as a fallback) and goes
through ``CustomObjectsApi`` (create / get / delete). Tests point a kubeconfig at a stub API server on 127.0.0.1.
A job on GB200/GB300 nodes comes with an NVIDIA DRA ComputeDomain (k8s_gb200): created before the job (its pods
claim the domain's channel template, which must exist for their claims to be made), deleted after it.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from typing import Any

import yaml

from fmstack.errors import InputError
from fmstack.orchestration.jobspec import ResolvedJob
from fmstack.orchestration.launchers import k8s_gb200
from fmstack.orchestration.launchers.base import JobStatus, Submission
from fmstack.orchestration.launchers.k8s_manifests import render_jobset, render_manifests, validate_manifest

_DNS_LABEL = re.compile(r"^(?=.{1,63}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
"""Namespace and object names as the API server accepts them (Kubernetes docs, Object Names and IDs)."""


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

    def manifests(self, job: ResolvedJob) -> list[dict[str, Any]]:
        """Every object the job needs, validated, in the order they are created: [ComputeDomain,] job."""
        objs = render_manifests(job, self.render_manifest)
        for m in objs:
            validate_manifest(m)
        return objs

    def manifest(self, job: ResolvedJob) -> dict[str, Any]:
        """The job object (JobSet / PyTorchJob), validated."""
        return self.manifests(job)[-1]

    def render(self, job: ResolvedJob) -> str:
        """YAML, one document per object (``---`` between them; a single object as before)."""
        return yaml.safe_dump_all(self.manifests(job), sort_keys=False)

    def _api(self) -> Any:
        from kubernetes import client

        return client.CustomObjectsApi(self._api_client_factory())

    def submit(self, job: ResolvedJob, *, dry_run: bool = False) -> Submission:
        *domains, m = self.manifests(job)
        text = yaml.safe_dump_all([*domains, m], sort_keys=False)
        ns, native = job.spec.namespace, f"{job.spec.namespace}/{job.spec.name}"
        if dry_run:
            return Submission(job_id=f"{self.name}:{native}", rendered=text, dry_run=True)
        for d in domains:
            self._domain("create", ns, d)
        try:
            created = self._call("create", lambda api: api.create_namespaced_custom_object(
                self.group, self.version, ns, self.plural, m))  # fmt: skip
        except InputError:  # no job to use it: the ComputeDomain goes too, then the job's error
            for d in domains:
                with contextlib.suppress(InputError):  # the job's error is the one to report
                    self._domain("delete", ns, d["metadata"]["name"])
            raise
        uid = ((created or {}).get("metadata") or {}).get("uid") if isinstance(created, dict) else None
        for d in domains if uid else ():
            # the job owns its ComputeDomain: Kubernetes' garbage collector deletes it with the job however the job
            # goes (it finishes and is deleted, kubectl delete), not only on fmstack cancel; a failed patch leaves
            # the annotation's cleanup (cancel) as before
            owner = {"apiVersion": m["apiVersion"], "kind": m["kind"], "name": m["metadata"]["name"], "uid": uid}
            with contextlib.suppress(InputError):
                self._domain("own", ns, (d["metadata"]["name"], {"metadata": {"ownerReferences": [owner]}}))
        return Submission(job_id=f"{self.name}:{native}", rendered=text, dry_run=False)

    def _domain(self, verb: str, ns: str, obj: Any) -> None:
        """Create (obj: the ComputeDomain), delete (obj: its name) or give an owner to (obj: (name, merge patch)) a
        ComputeDomain (k8s_gb200)."""
        where = (k8s_gb200.GROUP, k8s_gb200.VERSION, ns, k8s_gb200.PLURAL)
        if verb == "create":
            self._call("create ComputeDomain", lambda api: api.create_namespaced_custom_object(*where, obj))
        elif verb == "own":
            self._call("patch ComputeDomain", lambda api: api.patch_namespaced_custom_object(*where, *obj))
        else:
            self._call("delete ComputeDomain", lambda api: api.delete_namespaced_custom_object(*where, obj))

    def _split(self, native_id: str) -> tuple[str, str]:
        ns, sep, name = native_id.partition("/")
        if not sep or not ns or not name:
            raise InputError("ID", f"{self.name}:{native_id}: expected {self.name}:NAMESPACE/NAME")
        # checked here, before the kubeconfig is read: 'ns/a/b' or 'Research/x' used to end in a kubeconfig
        # error or an HTTP 404 that did not point at the id
        if not _DNS_LABEL.match(ns):
            raise InputError("ID", f"{self.name}:{native_id}: namespace {ns!r} is not a DNS-1123 label "
                             "(lowercase letters, digits, '-'; at most 63)")  # fmt: skip
        if not _DNS_SUBDOMAIN.match(name):
            raise InputError("ID", f"{self.name}:{native_id}: name {name!r} is not a Kubernetes object name "
                             "(lowercase letters, digits, '-', '.'; at most 253)")  # fmt: skip
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
        state, detail = self.state_of(obj, true), ",".join(sorted(true))
        if state == "RUNNING":  # the job's conditions say nothing of pods still waiting for a node: ask the pods
            try:
                waiting = pods_waiting(self._pods(ns, name), self.expected_pods(obj))
            except InputError as exc:  # no RBAC to list pods, say: the job's own state, and that pods went unread
                waiting, detail = "", f"{detail} (pods not checked: {exc.message})".strip()
            if waiting:
                state, detail = "PENDING", waiting
        elif state == "PENDING" and not detail and self.suspended(obj):
            queue = ((obj.get("metadata") or {}).get("labels") or {}).get("kueue.x-k8s.io/queue-name")
            detail = f"suspended: waiting for Kueue to admit it (queue {queue})" if queue else "suspended"
        return JobStatus(
            job_id=f"{self.name}:{native_id}", state=state, detail=detail, restarts=int(st.get("restarts", 0))
        )

    def _pods(self, ns: str, name: str) -> list[dict[str, Any]]:
        """The job's pods as plain dicts (the client's V1Pod models serialised: the API's camelCase keys)."""
        from kubernetes import client

        api_client = self._api_client_factory()
        selector = f"{self.pod_label}={name}"
        pods = self._call(
            "list pods", lambda _: client.CoreV1Api(api_client).list_namespaced_pod(ns, label_selector=selector)
        )
        items: list[dict[str, Any]] = api_client.sanitize_for_serialization(pods).get("items") or []
        return items

    pod_label = "jobset.sigs.k8s.io/jobset-name"
    """The label JobSet puts on every pod of a JobSet (jobset api/jobset/v1alpha2 JobSetNameKey)."""

    @staticmethod
    def expected_pods(obj: dict[str, Any]) -> int:
        """Pods a JobSet runs at once: replicas x parallelism over its replicated Jobs."""
        rjobs = (obj.get("spec") or {}).get("replicatedJobs") or []
        return sum(int(rj.get("replicas", 1)) * int(rj["template"]["spec"].get("parallelism", 1)) for rj in rjobs)

    @staticmethod
    def suspended(obj: dict[str, Any]) -> bool:
        return bool((obj.get("spec") or {}).get("suspend"))

    @staticmethod
    def state_of(obj: dict[str, Any], true: set[str]) -> str:
        """JobSet: conditions Completed / Failed / Suspended (jobset api v1alpha2); a JobSet with a status and
        none of them is running its Jobs."""
        if true & {"Completed", "Succeeded"}:
            return "COMPLETED"
        if "Failed" in true:
            return "FAILED"
        if "Suspended" in true or KubernetesLauncher.suspended(obj) or not obj.get("status"):
            return "PENDING"
        return "RUNNING"

    def cancel(self, native_id: str) -> None:
        """Delete the job, then the ComputeDomain fmstack created with it (named in its annotation; one the JobSpec
        named, which fmstack did not create, stays)."""
        ns, name = self._split(native_id)
        obj = self._call(
            "get", lambda api: api.get_namespaced_custom_object(self.group, self.version, ns, self.plural, name)
        )
        domain = ((obj.get("metadata") or {}).get("annotations") or {}).get(k8s_gb200.ANNOTATION)
        self._call(
            "delete", lambda api: api.delete_namespaced_custom_object(self.group, self.version, ns, self.plural, name)
        )
        if domain:
            self._domain("delete", ns, domain)


def pods_waiting(pods: list[dict[str, Any]], expected: int) -> str:
    """Why a job whose conditions say running is not running yet, or "" if all its pods run (or have ended).

    A pod waits while its phase is Pending: not yet bound to a node (condition PodScheduled False, reason
    Unschedulable, the scheduler's message: "0/8 nodes are available: 8 Insufficient vpc.amazonaws.com/efa.") or
    bound with containers not started (a container's state.waiting: ErrImagePull, ImagePullBackOff,
    ContainerCreating). Pods the Job controller has not created yet (a ResourceQuota refused them, say) wait too.
    Kubernetes docs, "Pod Lifecycle" (phase, conditions, container states)."""
    live = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
    pending = [p for p in live if (p.get("status") or {}).get("phase") == "Pending"]
    missing = max(0, expected - len(live))
    if not pending and not missing:
        return ""
    reasons: list[str] = []
    for pod in pending:
        st = pod.get("status") or {}
        found = [(c.get("reason") or "Unschedulable", c.get("message")) for c in st.get("conditions") or []
                 if c.get("type") == "PodScheduled" and c.get("status") == "False"]  # fmt: skip
        for cs in st.get("containerStatuses") or []:
            if waiting := (cs.get("state") or {}).get("waiting"):
                found.append((waiting.get("reason") or "Waiting", waiting.get("message")))
        for reason, message in found:
            text = " ".join(str(message or "").split())
            reasons.append(f"{reason}: {text}" if text else reason)
    parts = [f"{len(pending)}/{max(expected, len(live))} pods pending"] if pending else []
    if missing:
        parts.append(f"{missing} of {expected} pods not created yet")
    seen = list(dict.fromkeys(reasons))  # the same reason on every pod once
    hint = [HUGEPAGES_HINT] if any("Insufficient hugepages-2Mi" in r for r in seen) else []
    return "; ".join(parts + seen[:2] + hint)


HUGEPAGES_HINT = (
    "if the nodes pre-allocate no 2 MiB huge pages (kubectl describe node: hugepages-2Mi), set "
    "kubernetes.hugepages_2mi_mib: 0 in the JobSpec, or a size they have"
)
"""Appended when the scheduler says "Insufficient hugepages-2Mi": the EFA pods' default request (5120Mi per
node) needs pages the node pre-allocated (EKS node-efa: 5128 with the EFA driver); AWS's GB200 sample
(aws-samples/awsome-distributed-training micro-benchmarks/nccl-tests/kubernetes/nccl-tests-gb200.yaml) requests
none."""
