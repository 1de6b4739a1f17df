"""EFA on Kubernetes: pods that request ``vpc.amazonaws.com/efa`` also request 2 MiB huge pages and memory.

Cited: the EKS user guide (node-efa, "Run machine learning training on Amazon EKS with Elastic Fabric Adapter") and
aws-samples/awsome-distributed-training micro-benchmarks/nccl-tests/kubernetes/nccl-tests.yaml request, per
p5.48xlarge pod, ``vpc.amazonaws.com/efa: 32`` and ``hugepages-2Mi: 5120Mi`` with a memory request, limits equal to
requests. The EFA count per instance comes from the catalog (AWS EC2 network cards)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from fmstack.catalog import Catalog
from fmstack.errors import InputError
from fmstack.orchestration.jobspec import parse_jobspec, resolve
from fmstack.orchestration.launchers.k8s_manifests import (
    check_resources,
    render_jobset,
    render_pytorchjob,
    validate_manifest,
)
from tests.launch.conftest import P5_SPEC


def _resources(m: dict[str, Any]) -> list[dict[str, Any]]:
    if m["kind"] == "JobSet":
        pods = [rj["template"]["spec"]["template"]["spec"] for rj in m["spec"]["replicatedJobs"]]
    else:
        pods = [r["template"]["spec"] for r in m["spec"]["pytorchReplicaSpecs"].values()]
    return [c["resources"] for p in pods for c in p["containers"]]


# instance -> (EFA from the catalog, memory request in GiB: floor(host GiB * 0.9 - 5120 MiB / 1024))
CASES = {
    "p5.48xlarge": (32, "1838Gi"),  # 2048 GiB: floor(1843.2 - 5) = 1838
    "p5en.48xlarge": (16, "1838Gi"),
    "p6-b200.48xlarge": (8, "1838Gi"),
    "p6e-gb200.36xlarge": (4, "859Gi"),  # 960 GiB: floor(864 - 5) = 859
    "p4d.24xlarge": (4, "1031Gi"),  # 1152 GiB: floor(1036.8 - 5) = 1031
}


@pytest.mark.parametrize("render", [render_jobset, render_pytorchjob])
@pytest.mark.parametrize("instance", sorted(CASES))
def test_efa_pods_request_hugepages_and_memory(instance: str, render: Any, catalog: Catalog) -> None:
    pytest.importorskip("kubernetes_validate")
    efa, memory = CASES[instance]
    gpus = catalog.instance(instance).num_gpus
    m = render(resolve(parse_jobspec({**P5_SPEC, "instance": instance, "plan": None}), catalog))
    for res in _resources(m):
        extended = {"nvidia.com/gpu": str(gpus), "vpc.amazonaws.com/efa": str(efa), "hugepages-2Mi": "5120Mi"}
        assert res["limits"] == extended  # no memory limit: the trainer is not OOM-killed at a guess
        assert res["requests"] == {**extended, "memory": memory}
    validate_manifest(m)  # CRD schema, kubernetes-validate strict, and the API server's resource rules


def test_no_efa_no_hugepages(catalog: Catalog) -> None:
    m = render_jobset(resolve(parse_jobspec({**P5_SPEC, "instance": "dgx-h100", "plan": None}), catalog))
    (res,) = _resources(m)
    assert res["limits"] == {"nvidia.com/gpu": "8"}
    assert res["requests"] == {"nvidia.com/gpu": "8", "memory": "1843Gi"}  # floor(2048 * 0.9)


def test_memory_gib_overrides_the_default_and_is_bounded(catalog: Catalog) -> None:
    m = render_jobset(resolve(parse_jobspec({**P5_SPEC, "memory_gib": 1536}), catalog))
    assert _resources(m)[0]["requests"]["memory"] == "1536Gi"
    m = render_jobset(resolve(parse_jobspec({**P5_SPEC, "memory_gib": 100.5}), catalog))
    assert _resources(m)[0]["requests"]["memory"] == "102912Mi"  # 100.5 * 1024
    with pytest.raises(InputError, match=r"memory_gib: 4096 > 2048, the memory of one p5.48xlarge"):
        resolve(parse_jobspec({**P5_SPEC, "memory_gib": 4096}), catalog)


def test_api_server_resource_rules_are_checked(catalog: Catalog) -> None:
    pytest.importorskip("kubernetes_validate")
    good = render_jobset(resolve(parse_jobspec(P5_SPEC), catalog))

    def broken(edit: Any) -> dict[str, Any]:
        m = copy.deepcopy(good)
        edit(_resources(m)[0])
        return m

    # huge pages without cpu or memory: kubernetes-validate (OpenAPI) lets it through, the API server refuses it
    no_memory = broken(lambda r: r["requests"].pop("memory"))
    with pytest.raises(InputError, match=r"HugePages require cpu or memory"):
        validate_manifest(no_memory)
    with pytest.raises(InputError, match=r"requests.hugepages-2Mi: 5Mi is not a whole number of 2Mi pages"):
        validate_manifest(broken(lambda r: r["requests"].update({"hugepages-2Mi": "5Mi"})))
    with pytest.raises(InputError, match=r"limits.vpc.amazonaws.com/efa: must equal the request 32"):
        validate_manifest(broken(lambda r: r["limits"].update({"vpc.amazonaws.com/efa": "16"})))
    check_resources("c", {"limits": {"hugepages-1Gi": "2Gi", "cpu": "1"}, "requests": {"hugepages-1Gi": "2Gi"}})
