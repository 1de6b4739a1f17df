"""Kubernetes: manifests validate offline against the schemas; the official client submits them to a stub API
server on 127.0.0.1 that records what it receives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from fmstack.catalog import Catalog
from fmstack.errors import InputError
from fmstack.orchestration.jobspec import ResolvedJob, parse_jobspec, resolve
from fmstack.orchestration.launchers.k8s_manifests import render_jobset, render_pytorchjob, validate_manifest
from tests.launch.conftest import P5_SPEC

pytest.importorskip("kubernetes")
pytest.importorskip("kubernetes_validate")


class _Stub(BaseHTTPRequestHandler):
    store: dict[str, Any]
    log: list[tuple[str, str, Any]]
    status: dict[str, Any]  # what a GET returns as the object's status (default: Completed, restarts 1)
    pods: list[dict[str, Any]]  # what a pod list returns (serialised V1Pod models)
    pods_forbidden = False  # a user without RBAC to list pods

    def _reply(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.log.append(("POST", self.path, body))
        self.store[f"{self.path}/{body['metadata']['name']}"] = body
        self._reply(201, body)

    def do_GET(self) -> None:
        self.log.append(("GET", self.path, None))
        if self.path.split("?")[0].endswith("/pods"):
            if self.pods_forbidden:
                self._reply(403, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 403})
                return
            self._reply(200, {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": self.pods})
            return
        obj = self.store.get(self.path)
        if obj is None:
            self._reply(
                404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}
            )
            return
        status = self.status or {"restarts": 1, "conditions": [{"type": "Completed", "status": "True"}]}
        self._reply(200, {**obj, "status": status})

    def do_DELETE(self) -> None:
        self.log.append(("DELETE", self.path, None))
        self._reply(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})

    def log_message(self, *args: Any) -> None:
        return None


def _env(kubeconfig: Path) -> dict[str, str]:
    """A clean environment with the stub's kubeconfig (PYTHONPATH kept: a checkout run without installing)."""
    return {"KUBECONFIG": str(kubeconfig), "PATH": "/usr/bin:/bin", "PYTHONPATH": os.environ.get("PYTHONPATH", "")}


@pytest.fixture
def stub() -> Iterator[type[_Stub]]:
    handler = type("Handler", (_Stub,), {"store": {}, "log": [], "status": {}, "pods": []})
    yield handler


@pytest.fixture
def api_server(tmp_path: Path, stub: type[_Stub]) -> Iterator[tuple[Path, list[tuple[str, str, Any]]]]:
    log = stub.log
    handler = stub
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "stub",
        "clusters": [{"name": "stub", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "stub", "context": {"cluster": "stub", "user": "u"}}],
    }))  # fmt: skip
    yield kubeconfig, log
    server.shutdown()
    server.server_close()


def test_manifests_validate(p5_job: ResolvedJob) -> None:
    validate_manifest(render_jobset(p5_job))
    validate_manifest(render_pytorchjob(p5_job))


def test_schema_catches_a_bad_crd_field(p5_job: ResolvedJob) -> None:
    m = render_jobset(p5_job)
    m["spec"]["failurePolicy"]["maxRestart"] = 3  # typo
    with pytest.raises(InputError, match=r"JobSet spec.failurePolicy: Additional properties are not allowed"):
        validate_manifest(m)
    m = render_pytorchjob(p5_job)
    m["spec"]["pytorchReplicaSpecs"]["Chief"] = m["spec"]["pytorchReplicaSpecs"]["Master"]
    with pytest.raises(InputError, match=r"PyTorchJob spec.pytorchReplicaSpecs"):
        validate_manifest(m)


def test_kubernetes_validate_catches_a_bad_core_field(p5_job: ResolvedJob) -> None:
    m = render_jobset(p5_job)
    m["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["imagee"] = "x"
    with pytest.raises(InputError, match="imagee"):
        validate_manifest(m)


def test_submit_status_cancel_through_the_official_client(
    api_server: tuple[Path, list[tuple[str, str, Any]]], tmp_path: Path
) -> None:
    kubeconfig, log = api_server
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({**P5_SPEC, "checkpoint": {"location": str(tmp_path / "ck"), "pvc": "fsx-claim"}}))
    env = _env(kubeconfig)

    def fm(*args: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "fmstack", *args], capture_output=True, text=True, env=env, timeout=120
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip()

    assert fm("launch", str(spec), "--on", "kubernetes") == "kubernetes:research/gpt-small"
    method, path, body = log[0]
    assert (method, path) == ("POST", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/research/jobsets")
    assert body == render_jobset_from_file(spec)
    assert fm("status", "kubernetes:research/gpt-small").startswith(
        "kubernetes:research/gpt-small COMPLETED restarts=1"
    )
    fm("cancel", "kubernetes:research/gpt-small")
    assert log[-1][:2] == ("DELETE", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/research/jobsets/gpt-small")
    assert fm("launch", str(spec), "--on", "pytorchjob").startswith("pytorchjob:research/")
    assert log[-1][1] == "/apis/kubeflow.org/v1/namespaces/research/pytorchjobs"


def test_missing_object_is_one_clear_error(api_server: tuple[Path, list[tuple[str, str, Any]]]) -> None:
    kubeconfig, _ = api_server
    proc = subprocess.run(
        [sys.executable, "-m", "fmstack", "status", "kubernetes:default/nope"],
        capture_output=True, text=True, env=_env(kubeconfig), timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip() == "fmstack: error: kubernetes: get failed: HTTP 404 Not Found"


def render_jobset_from_file(spec: Path) -> dict[str, Any]:
    from fmstack.catalog import load_catalog
    from fmstack.orchestration.jobspec import load_jobspec, resolve

    return render_jobset(resolve(load_jobspec(spec), load_catalog()))


def test_checkpoint_claim_is_mounted_at_the_location(catalog: Catalog) -> None:
    spec = {**P5_SPEC, "checkpoint": {"location": "/ckpt/run", "pvc": "fsx-claim"}}
    pod = render_jobset(resolve(parse_jobspec(spec), catalog))["spec"]["replicatedJobs"][0]["template"]["spec"][
        "template"
    ]["spec"]
    assert {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "fsx-claim"}} in pod["volumes"]
    assert {"name": "checkpoints", "mountPath": "/ckpt/run"} in pod["containers"][0]["volumeMounts"]


def test_checkpoint_without_claim_or_durable_tier_is_refused(catalog: Catalog) -> None:
    spec = {**P5_SPEC, "checkpoint": {"location": "/ckpt/run"}}
    with pytest.raises(InputError, match=r"checkpoint.pvc: '/ckpt/run' would live in the pod's own file system"):
        render_jobset(resolve(parse_jobspec(spec), catalog))


def _pod(i: int, phase: str, **status: Any) -> dict[str, Any]:
    """A pod of the 4-node JobSet as the API serves it: built from the client's models, serialised by the client."""
    from kubernetes import client as k

    pod = k.V1Pod(
        metadata=k.V1ObjectMeta(
            name=f"gpt-small-trainer-0-{i}-x", labels={"jobset.sigs.k8s.io/jobset-name": "gpt-small"}
        ),
        status=k.V1PodStatus(phase=phase, **status),
    )
    body: dict[str, Any] = k.ApiClient().sanitize_for_serialization(pod)
    return body


UNSCHEDULABLE = (
    "0/4 nodes are available: 4 Insufficient vpc.amazonaws.com/efa. preemption: 0/4 nodes are available: 4 No "
    "preemption victims found for incoming pod."
)


def _unschedulable(i: int) -> dict[str, Any]:
    from kubernetes import client as k

    cond = k.V1PodCondition(type="PodScheduled", status="False", reason="Unschedulable", message=UNSCHEDULABLE)
    return _pod(i, "Pending", conditions=[cond])


def _image_pull(i: int) -> dict[str, Any]:
    from kubernetes import client as k

    waiting = k.V1ContainerStateWaiting(reason="ImagePullBackOff", message='Back-off pulling image "fmstack:0.1"')
    cs = k.V1ContainerStatus(
        name="trainer", image="fmstack:0.1", image_id="", ready=False, restart_count=0,
        state=k.V1ContainerState(waiting=waiting),
    )  # fmt: skip
    scheduled = k.V1PodCondition(type="PodScheduled", status="True")
    return _pod(i, "Pending", conditions=[scheduled], container_statuses=[cs])


def _admit(stub: type[_Stub]) -> None:
    """What Kueue does on admission: unsuspend the JobSet."""
    (obj,) = stub.store.values()
    obj["spec"]["suspend"] = False


RUNNING_STATUS = {"restarts": 0, "replicatedJobsStatus": [{"name": "trainer", "ready": 0, "succeeded": 0,
                                                           "failed": 0, "active": 1, "suspended": 0}]}  # fmt: skip


@pytest.mark.parametrize(
    ("pods", "state", "detail"),
    [
        # every pod waits for a node with 32 EFA: it read RUNNING before, the JobSet has no condition to say so
        ([_unschedulable(i) for i in range(4)], "PENDING", f"4/4 pods pending; Unschedulable: {UNSCHEDULABLE}"),
        ([_pod(0, "Running"), _pod(1, "Running"), _image_pull(2), _image_pull(3)], "PENDING",
         '2/4 pods pending; ImagePullBackOff: Back-off pulling image "fmstack:0.1"'),
        ([_pod(0, "Running"), _pod(1, "Running")], "PENDING", "2 of 4 pods not created yet"),
        ([_pod(i, "Running") for i in range(4)], "RUNNING", ""),
    ],
)  # fmt: skip
def test_jobset_status_says_pending_while_pods_wait(
    api_server: tuple[Path, list[tuple[str, str, Any]]], stub: type[_Stub], catalog: Catalog,
    pods: list[dict[str, Any]], state: str, detail: str,
) -> None:  # fmt: skip
    from kubernetes import client as k

    from fmstack.orchestration.launchers.kubernetes import KubernetesLauncher

    kubeconfig, log = api_server
    server = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]

    def api_client() -> Any:
        cfg = k.Configuration()
        cfg.host = server
        return k.ApiClient(cfg)

    launcher = KubernetesLauncher(api_client)
    launcher.submit(resolve(parse_jobspec(P5_SPEC), catalog))
    stub.status = {"restarts": 0}
    assert launcher.status("research/gpt-small").detail == "suspended: waiting for Kueue to admit it (queue team-a)"
    _admit(stub)
    stub.status, stub.pods = RUNNING_STATUS, pods
    st = launcher.status("research/gpt-small")
    assert (st.state, st.detail, st.restarts) == (state, detail, 0)
    assert log[-1][1] == "/api/v1/namespaces/research/pods?labelSelector=jobset.sigs.k8s.io/jobset-name%3Dgpt-small"


def test_status_line_names_why_a_jobset_is_pending(
    api_server: tuple[Path, list[tuple[str, str, Any]]], stub: type[_Stub], tmp_path: Path
) -> None:
    kubeconfig, _ = api_server
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({**P5_SPEC, "checkpoint": {"location": str(tmp_path / "ck"), "pvc": "fsx-claim"}}))
    run = [sys.executable, "-m", "fmstack"]
    env = _env(kubeconfig)
    subprocess.run([*run, "launch", str(spec), "--on", "kubernetes"], check=True, env=env, timeout=120)
    _admit(stub)
    stub.status, stub.pods = RUNNING_STATUS, [_unschedulable(i) for i in range(4)]
    proc = subprocess.run([*run, "status", "kubernetes:research/gpt-small"], capture_output=True, text=True, env=env,
                          timeout=120)  # fmt: skip
    assert proc.stdout.strip() == (
        f"kubernetes:research/gpt-small PENDING restarts=0 4/4 pods pending; Unschedulable: {UNSCHEDULABLE}"
    )


def test_status_without_rights_to_list_pods_still_answers(
    api_server: tuple[Path, list[tuple[str, str, Any]]], stub: type[_Stub], catalog: Catalog
) -> None:
    from kubernetes import client as k

    from fmstack.orchestration.launchers.kubernetes import KubernetesLauncher

    server = yaml.safe_load(api_server[0].read_text())["clusters"][0]["cluster"]["server"]
    cfg = k.Configuration()
    cfg.host = server
    launcher = KubernetesLauncher(lambda: k.ApiClient(cfg))
    launcher.submit(resolve(parse_jobspec(P5_SPEC), catalog))
    _admit(stub)
    stub.status, stub.pods_forbidden = RUNNING_STATUS, True
    st = launcher.status("research/gpt-small")
    assert (st.state, st.detail) == ("RUNNING", "(pods not checked: list pods failed: HTTP 403 Forbidden)")
