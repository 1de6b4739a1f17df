"""GB200 multi-node NVLink on Kubernetes: a ComputeDomain per job (NVIDIA DRA driver), the channel claim and the
``nvidia.com/gpu.clique`` affinity in every pod, ``NCCL_MNNVL_ENABLE=1`` (k8s_gb200).

Golden manifests for a 2-node (8 GPU) and an 18-node (72 GPU, one u-p6e-gb200x72) p6e-gb200 job; invariants over
node counts inside and beyond one 72-GPU NVLink domain; the p5 manifests unchanged (test_golden.py) and every
instance without multi-node NVLink unchanged; the apply / delete order through the official client against the
stub API server of test_kubernetes.py. No EKS GB200 cluster here: the objects are checked against the schemas only
(the ComputeDomain against the CRD vendored from NVIDIA/k8s-dra-driver-gpu v25.12.0, the pods with
kubernetes-validate at 1.33).

Regenerate the golden files after a reviewed change: ``FMSTACK_REGEN_GOLDEN=1 python3 -m pytest
tests/launch/test_k8s_gb200.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from fmstack.catalog import Catalog
from fmstack.catalog.schema import Instance
from fmstack.errors import InputError
from fmstack.orchestration.jobspec import ResolvedJob, parse_jobspec, resolve
from fmstack.orchestration.launchers import get_launcher, k8s_gb200
from fmstack.orchestration.launchers.k8s_manifests import (
    core_objects,
    render_jobset,
    render_manifests,
    render_pytorchjob,
    validate_manifest,
)
from tests.launch import test_kubernetes
from tests.launch.test_kubernetes import _Stub

pytest.importorskip("kubernetes")
pytest.importorskip("kubernetes_validate")

GOLDEN = Path(__file__).parent / "golden"
stub, api_server = test_kubernetes.stub, test_kubernetes.api_server  # the stub API server's fixtures
GB200_SPEC: dict[str, Any] = {
    "name": "gpt-gb",
    "workload": {"model": "small", "parallel": "fsdp", "precision": "bf16", "steps": 1000, "batch_size": 4},
    "nodes": 2,
    "instance": "p6e-gb200.36xlarge",
    "namespace": "research",
    "time_limit_min": 120,
    "image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/fmstack:0.1",
    "log_dir": "/fsx/logs",
    "checkpoint": {"location": "/fsx/ckpt/gpt-gb", "pvc": "fsx-claim", "interval_steps": 50},
}


def _job(catalog: Catalog, **more: Any) -> ResolvedJob:
    return resolve(parse_jobspec({**GB200_SPEC, **more}), catalog)


@pytest.mark.parametrize(("nodes", "golden"), [(2, "jobset_gb200_2n.yaml"), (18, "jobset_gb200_18n.yaml")])
def test_render_matches_golden(nodes: int, golden: str, catalog: Catalog) -> None:
    text = get_launcher("kubernetes").render(_job(catalog, nodes=nodes))
    path = GOLDEN / golden
    if os.environ.get("FMSTACK_REGEN_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8")


def _pod_templates(m: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """(pods, template) for each pod template of a JobSet or PyTorchJob."""
    if m["kind"] == "JobSet":
        return [(rj["replicas"] * rj["template"]["spec"]["parallelism"], rj["template"]["spec"]["template"])
                for rj in m["spec"]["replicatedJobs"]]  # fmt: skip
    return [(r["replicas"], r["template"]) for r in m["spec"]["pytorchReplicaSpecs"].values()]


# 72 GPUs per NVLink domain / 4 per p6e-gb200.36xlarge = 18 nodes: up to 18 one domain holds the job
@pytest.mark.parametrize(("nodes", "one_domain"), [(2, True), (9, True), (18, True), (19, False), (36, False)])
@pytest.mark.parametrize("render", [render_jobset, render_pytorchjob])
def test_every_pod_claims_the_channel(nodes: int, one_domain: bool, render: Any, catalog: Catalog) -> None:
    domain, m = render_manifests(_job(catalog, nodes=nodes), render)
    for obj in (domain, m):
        validate_manifest(obj)  # CRD schema (vendored), kubernetes-validate strict at 1.33 for the pods
    assert domain["kind"] == "ComputeDomain" and domain["metadata"]["namespace"] == m["metadata"]["namespace"]
    template = domain["spec"]["channel"]["resourceClaimTemplate"]["name"]
    templates = _pod_templates(m)
    assert domain["spec"]["numNodes"] == sum(n for n, _ in templates) == nodes  # one pod per node
    assert m["metadata"]["annotations"] == {"fmstack/compute-domain": domain["metadata"]["name"]}
    for _, t in templates:
        pod = t["spec"]
        (claim,) = pod["resourceClaims"]
        assert claim["resourceClaimTemplateName"] == template
        for c in pod["containers"]:
            assert c["resources"]["claims"] == [{"name": claim["name"]}]
            env = {e["name"]: e.get("value") for e in c["env"]}
            assert env["NCCL_MNNVL_ENABLE"] == "1"
        affinity = pod["affinity"]["podAffinity"]
        terms = (
            affinity["requiredDuringSchedulingIgnoredDuringExecution"]
            if one_domain
            else [p["podAffinityTerm"] for p in affinity["preferredDuringSchedulingIgnoredDuringExecution"]]
        )
        assert len(affinity) == 1  # required iff one domain holds the job; a required term beyond it never schedules
        (term,) = terms
        assert term["topologyKey"] == "nvidia.com/gpu.clique"
        # the selector picks this job's pods: the label is on the template
        (expr,) = term["labelSelector"]["matchExpressions"]
        assert t["metadata"]["labels"][expr["key"]] in expr["values"]


def test_pods_that_claim_need_kubernetes_133_schemas(catalog: Catalog) -> None:
    """The pinned version matters: at 1.30 PodResourceClaim had ``source``, not ``resourceClaimTemplateName``."""
    import kubernetes_validate

    (job,) = core_objects(render_jobset(_job(catalog)))
    kubernetes_validate.validate(job, k8s_gb200.K8S_VERSION_DRA, strict=True)
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, "1.30", strict=True)


@pytest.mark.parametrize(
    "more",
    [
        {"nodes": 1},  # one node: NVLink within it needs no IMEX channel
        {"gpus_per_node": 2},  # pods with part of a node: pods != nodes, no numNodes to give
        {"kubernetes": {"compute_domain": "none"}},
    ],
)
def test_no_compute_domain(more: dict[str, Any], catalog: Catalog) -> None:
    job = _job(catalog, **more)
    (m,) = render_manifests(job, render_jobset)
    text = yaml.safe_dump(m)
    for needle in ("resourceClaims", "claims", "gpu.clique", "NCCL_MNNVL_ENABLE", "compute-domain", "affinity"):
        assert needle not in text


def test_instances_without_multi_node_nvlink_are_unchanged(catalog: Catalog) -> None:
    """Invariant over the catalog: where the NVLink domain is at most a node, auto renders what none renders."""
    checked = 0
    for inst in catalog.all("instance"):
        assert isinstance(inst, Instance)
        if inst.nvlink_domain_gpus > inst.num_gpus:
            continue
        auto, none = (
            render_manifests(
                _job(catalog, instance=inst.name, nodes=4, kubernetes={"compute_domain": cd}), render_jobset
            )
            for cd in ("auto", "none")
        )
        assert auto == none and len(auto) == 1, inst.name
        checked += 1
    assert checked >= 8


def test_an_existing_compute_domain_is_claimed_not_created(catalog: Catalog) -> None:
    job = _job(catalog, nodes=4, kubernetes={"compute_domain": "team-nvl-channel"})
    (m,) = render_manifests(job, render_jobset)
    validate_manifest(m)
    assert "annotations" not in m["metadata"]  # cancel deletes no ComputeDomain it did not create
    ((_, t),) = _pod_templates(m)
    assert t["spec"]["resourceClaims"] == [{"name": "compute-domain-channel", "resourceClaimTemplateName":
                                            "team-nvl-channel"}]  # fmt: skip
    assert "requiredDuringSchedulingIgnoredDuringExecution" in t["spec"]["affinity"]["podAffinity"]


def test_the_jobspec_env_wins_over_the_nccl_defaults(catalog: Catalog) -> None:
    m = render_jobset(_job(catalog, env={"NCCL_NVLS_ENABLE": "0"}))
    ((_, t),) = _pod_templates(m)
    env = [(e["name"], e.get("value")) for e in t["spec"]["containers"][0]["env"]]
    assert ("NCCL_NVLS_ENABLE", "0") in env and ("NCCL_MNNVL_ENABLE", "1") in env
    assert len({name for name, _ in env}) == len(env)


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda d: d["spec"].update(numNode=2), r"ComputeDomain spec: Additional properties are not allowed"),
        (lambda d: d["spec"].update(numNodes="2"), r"ComputeDomain spec.numNodes: '2' is not of type 'integer'"),
        (lambda d: d["spec"].pop("channel"), r"ComputeDomain spec: 'channel' is a required property"),
        (lambda d: d["spec"]["channel"].update(allocationMode="Many"), r"spec.channel.allocationMode: 'Many' is not"),
        (lambda d: d["spec"].update(numNodes=-1), r"ComputeDomain spec.numNodes: -1 must be zero or greater"),
        (lambda d: d.update(apiVersion="resource.nvidia.com/v1"), r"ComputeDomain apiVersion"),
    ],
)
def test_the_crd_schema_catches_a_bad_compute_domain(edit: Any, match: str, catalog: Catalog) -> None:
    domain, _ = render_manifests(_job(catalog), render_jobset)
    edit(domain)
    with pytest.raises(InputError, match=match):
        validate_manifest(domain)


def test_bad_compute_domain_values(catalog: Catalog) -> None:
    for value, match in [
        ("Auto", "must be auto, none or a ResourceClaimTemplate name"),
        ("", "must be auto, none or a ResourceClaimTemplate name"),
        ("a_b", "must be auto, none or a ResourceClaimTemplate name"),
        (True, "Input should be a valid string"),
    ]:
        with pytest.raises(InputError, match=rf"field 'kubernetes.compute_domain': .*{match}"):
            _job(catalog, kubernetes={"compute_domain": value})
    with pytest.raises(InputError, match=r"kubernetes.compute_domain: 'x': p5.48xlarge \(nvlink_domain_gpus 8"):
        render_jobset(_job(catalog, instance="p5.48xlarge", kubernetes={"compute_domain": "x"}))


def _launcher(api_server: tuple[Path, Any], kind: str = "kubernetes") -> Any:
    from kubernetes import client as k

    server = yaml.safe_load(api_server[0].read_text())["clusters"][0]["cluster"]["server"]
    cfg = k.Configuration()
    cfg.host = server
    from fmstack.orchestration.launchers.kubernetes import KubernetesLauncher
    from fmstack.orchestration.launchers.pytorchjob import PyTorchJobLauncher

    cls = KubernetesLauncher if kind == "kubernetes" else PyTorchJobLauncher
    return cls(lambda: k.ApiClient(cfg))


CD_PATH = "/apis/resource.nvidia.com/v1beta1/namespaces/research/computedomains"


@pytest.mark.parametrize(("kind", "path"), [("kubernetes", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/research/jobsets"),
                                            ("pytorchjob", "/apis/kubeflow.org/v1/namespaces/research/pytorchjobs")])  # fmt: skip
def test_compute_domain_is_created_first_and_deleted_last(
    api_server: tuple[Path, list[tuple[str, str, Any]]], catalog: Catalog, kind: str, path: str
) -> None:
    _, log = api_server
    launcher = _launcher(api_server, kind)
    job = _job(catalog)
    launcher.submit(job)
    domain, m = launcher.manifests(job)
    assert [(method, p, body) for method, p, body in log] == [("POST", CD_PATH, domain), ("POST", path, m)]
    log.clear()
    launcher.cancel("research/gpt-gb")
    assert [e[:2] for e in log] == [("GET", f"{path}/gpt-gb"), ("DELETE", f"{path}/gpt-gb"),
                                    ("DELETE", f"{CD_PATH}/gpt-gb-compute-domain")]  # fmt: skip


def test_cancel_leaves_a_compute_domain_it_did_not_create(
    api_server: tuple[Path, list[tuple[str, str, Any]]], catalog: Catalog
) -> None:
    _, log = api_server
    launcher = _launcher(api_server)
    launcher.submit(_job(catalog, kubernetes={"compute_domain": "team-nvl-channel"}))
    assert [e[1].rsplit("/", 1)[-1] for e in log] == ["jobsets"]
    launcher.cancel("research/gpt-gb")
    assert [e[0] for e in log[1:]] == ["GET", "DELETE"]


def test_a_refused_job_takes_its_compute_domain_back(
    api_server: tuple[Path, list[tuple[str, str, Any]]], stub: type[_Stub], catalog: Catalog
) -> None:
    _, log = api_server
    post = stub.do_POST

    def refuse_jobsets(self: _Stub) -> None:
        if self.path.endswith("/jobsets"):
            self.rfile.read(int(self.headers["Content-Length"]))
            self.log.append(("POST", self.path, None))
            self._reply(403, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 403})
            return
        post(self)

    stub.do_POST = refuse_jobsets  # type: ignore[method-assign]
    with pytest.raises(InputError, match="kubernetes: create failed: HTTP 403"):
        _launcher(api_server).submit(_job(catalog))
    assert [e[:2] for e in log][-1] == ("DELETE", f"{CD_PATH}/gpt-gb-compute-domain")
    assert [e[0] for e in log] == ["POST", "POST", "DELETE"]


def test_dry_run_prints_the_compute_domain(catalog: Catalog) -> None:
    sub = get_launcher("kubernetes").submit(_job(catalog), dry_run=True)
    docs = list(yaml.safe_load_all(sub.rendered))
    assert [d["kind"] for d in docs] == ["ComputeDomain", "JobSet"]
    assert docs[0]["spec"]["numNodes"] == 2


def test_the_job_owns_its_compute_domain(
    api_server: tuple[Path, list[tuple[str, str, Any]]], stub: type[_Stub], catalog: Catalog
) -> None:
    """Once the API server gives the job a uid, the ComputeDomain gets an ownerReference to it: the garbage
    collector deletes it with the job however the job goes (it was deleted only by fmstack cancel, and a job that
    finished or was deleted with kubectl left it behind, so a resubmission of the same name failed at create)."""
    _, log = api_server
    post = stub.do_POST

    def post_with_uid(self: _Stub) -> None:
        if not self.path.endswith("/jobsets"):
            post(self)
            return
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.log.append(("POST", self.path, body))
        self._reply(201, {**body, "metadata": {**body["metadata"], "uid": "0c1d-uid"}})

    def patch(self: _Stub) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.log.append(("PATCH", self.path, (self.headers["Content-Type"], body)))
        self._reply(200, {})

    stub.do_POST = post_with_uid  # type: ignore[method-assign]
    stub.do_PATCH = patch  # type: ignore[attr-defined]
    _launcher(api_server).submit(_job(catalog))
    assert [e[:2] for e in log] == [("POST", CD_PATH), ("POST", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/research/jobsets"),
                                    ("PATCH", f"{CD_PATH}/gpt-gb-compute-domain")]  # fmt: skip
    owner = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "gpt-gb", "uid": "0c1d-uid"}
    # a merge patch (a JSON patch would need a list of operations)
    assert log[-1][2] == ("application/merge-patch+json", {"metadata": {"ownerReferences": [owner]}})
