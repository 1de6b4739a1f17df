"""Kubernetes pods with part of a node: a job asking for g of an instance's N GPUs requests g/N of the node's EFA
devices, huge pages, memory and (0.9 of) its vCPUs, so that pods splitting a node fit on it together; the huge-pages
request can be set or switched off (``kubernetes.hugepages_2mi_mib``).

Expected values are hand-calculated from the catalog (EFA devices, vCPUs, memory of each instance) and the rules in
k8s_manifests._partial: EFA floor(efa x g / N) and at least 1; huge pages 5120 MiB x g / N in whole 2 MiB pages (EKS
user guide node-efa: the node pre-allocates 5128 pages, the whole-node pod requests 5120 MiB); memory floor(host GiB
x 0.9 x g / N - huge pages); cpu floor(vCPUs x g / N x 0.9). Whole-node manifests are the golden files, unchanged."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fmstack.catalog import Catalog
from fmstack.catalog.schema import Instance
from fmstack.errors import InputError
from fmstack.orchestration.jobspec import parse_jobspec, resolve
from fmstack.orchestration.launchers.k8s_manifests import (
    EFA_HUGEPAGES_2MI_MIB,
    core_objects,
    render_jobset,
    render_pytorchjob,
    validate_manifest,
)
from fmstack.orchestration.launchers.kubernetes import HUGEPAGES_HINT, pods_waiting
from tests.launch.conftest import P5_SPEC
from tests.launch.test_k8s_efa import _resources

GIB = 2**30


def _spec(instance: str, gpus: int | None, **more: Any) -> dict[str, Any]:
    return {**P5_SPEC, "instance": instance, "gpus_per_node": gpus, "plan": None, **more}


# (instance, GPUs asked) -> (EFA, huge pages, cpu, memory), by hand:
PARTIAL = {
    # 32 EFA / 8 GPUs; 5120 * 4/8 = 2560; floor(192 * 0.5 * 0.9) = floor(86.4); floor(2048 * 0.9 * 0.5 - 2.5)
    ("p5.48xlarge", 4): ("16", "2560Mi", "86", "919Gi"),
    # 5120 / 8 = 640; floor(21.6) = 21; floor(230.4 - 0.625) = floor(229.775)
    ("p5.48xlarge", 1): ("4", "640Mi", "21", "229Gi"),
    # 5120 * 3/8 = 1920; floor(72.0 * 0.9) = floor(64.8); floor(691.2 - 1.875) = floor(689.325)
    ("p5.48xlarge", 3): ("12", "1920Mi", "64", "689Gi"),
    ("p5en.48xlarge", 4): ("8", "2560Mi", "86", "919Gi"),  # 16 EFA: 2 per GPU
    # 8 EFA: 1 per GPU; floor(192 * 0.25 * 0.9) = floor(43.2); floor(460.8 - 1.25) = floor(459.55)
    ("p6-b200.48xlarge", 2): ("2", "1280Mi", "43", "459Gi"),
    # 4 EFA / 4 GPUs; floor(144 * 0.5 * 0.9) = floor(64.8); floor(960 * 0.9 * 0.5 - 2.5) = floor(429.5)
    ("p6e-gb200.36xlarge", 2): ("2", "2560Mi", "64", "429Gi"),
    # 4 EFA / 8 GPUs: floor(0.5) = 0, at least 1; floor(96 / 8 * 0.9) = floor(10.8); floor(129.6 - 0.625)
    ("p4d.24xlarge", 1): ("1", "640Mi", "10", "128Gi"),
}


def _through_client_models(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as the official kubernetes client's models read it and write it back (V1Job / V1Pod): a field
    the models do not know is dropped, so equality says every field is one of the API's."""
    from kubernetes import client as k

    api = k.ApiClient()
    # the client's own deserializer: the public deserialize() takes a response object in older releases, text in 37
    model = api._ApiClient__deserialize(json.loads(json.dumps(obj)), f"V1{obj['kind']}")  # type: ignore[attr-defined]
    back: dict[str, Any] = api.sanitize_for_serialization(model)
    return back


@pytest.mark.parametrize("render", [render_jobset, render_pytorchjob])
@pytest.mark.parametrize(("instance", "gpus"), sorted(PARTIAL))
def test_partial_node_requests_its_share(instance: str, gpus: int, render: Any, catalog: Catalog) -> None:
    pytest.importorskip("kubernetes_validate")
    efa, huge, cpu, memory = PARTIAL[(instance, gpus)]
    m = render(resolve(parse_jobspec(_spec(instance, gpus)), catalog))
    for res in _resources(m):
        extended = {"nvidia.com/gpu": str(gpus), "vpc.amazonaws.com/efa": efa, "hugepages-2Mi": huge}
        assert res["limits"] == extended
        assert res["requests"] == {**extended, "cpu": cpu, "memory": memory}
    validate_manifest(m)  # CRD schema, kubernetes-validate strict, the API server's resource rules
    for obj in core_objects(m):
        assert _through_client_models(obj) == obj


def test_partial_node_without_efa(catalog: Catalog) -> None:
    m = render_jobset(resolve(parse_jobspec(_spec("dgx-h100", 4)), catalog))
    (res,) = _resources(m)
    assert res["limits"] == {"nvidia.com/gpu": "4"}
    # floor(224 * 0.5 * 0.9) = floor(100.8); floor(2048 * 0.9 * 0.5) = floor(921.6)
    assert res["requests"] == {"nvidia.com/gpu": "4", "cpu": "100", "memory": "921Gi"}


@pytest.mark.parametrize("render", [render_jobset, render_pytorchjob])
def test_asking_for_every_gpu_is_the_whole_node(render: Any, catalog: Catalog) -> None:
    default = render(resolve(parse_jobspec(_spec("p5.48xlarge", None)), catalog))
    assert render(resolve(parse_jobspec(_spec("p5.48xlarge", 8)), catalog)) == default
    assert "cpu" not in _resources(default)[0]["requests"]  # a whole-node pod is alone on its node


def _requests(catalog: Catalog, inst: Instance, gpus: int) -> dict[str, float]:
    (res,) = _resources(render_jobset(resolve(parse_jobspec(_spec(inst.name, gpus)), catalog)))
    req = res["requests"]
    return {
        "efa": int(req.get("vpc.amazonaws.com/efa", 0)),
        "huge_mib": int(req.get("hugepages-2Mi", "0Mi").removesuffix("Mi")),
        "memory_gib": int(req["memory"].removesuffix("Gi")),
        "cpu": int(req.get("cpu", 0)),
    }


def test_pods_that_split_a_node_fit_on_it(catalog: Catalog) -> None:
    """Invariant, every EFA instance of the catalog and every split of its GPUs in two pods (g, N - g): together
    they request no more EFA devices, huge pages or memory than the whole-node pod, and CPU_SHARE of the vCPUs at
    most. A node holds the whole-node pod (the golden manifests), so it holds both halves."""
    checked = 0
    for inst in (i for i in catalog.all("instance") if isinstance(i, Instance) and i.network.startswith("efa")):
        whole = _requests(catalog, inst, inst.num_gpus)
        assert whole["huge_mib"] == EFA_HUGEPAGES_2MI_MIB <= 5128 * 2  # the node's pool (EKS node-efa)
        for g in range(1, inst.num_gpus):
            a, b = _requests(catalog, inst, g), _requests(catalog, inst, inst.num_gpus - g)
            for key in ("efa", "huge_mib", "memory_gib"):
                assert a[key] + b[key] <= whole[key], (inst.name, g, key, a, b, whole)
            assert a["cpu"] + b["cpu"] <= 0.9 * inst.vcpus
            assert min(a["efa"], b["efa"]) >= 1  # every pod of a multi-node job keeps a fabric device
            checked += 1
    assert checked >= 5 * 7  # p5, p5e, p5en, p6-b200, p6-b300 (8 GPUs), p6e-gb200, p4d


def test_one_gpu_pods_share_what_the_node_has(catalog: Catalog) -> None:
    # N one-GPU pods fit where the node has an EFA device per GPU; p4d.24xlarge has 4 for 8 GPUs, so 4 such pods
    # fit (each keeps a device), not 8: the documented cost of not leaving a pod without EFA
    for name, fits in (("p5.48xlarge", 8), ("p5en.48xlarge", 8), ("p6-b200.48xlarge", 8), ("p4d.24xlarge", 4)):
        inst = catalog.instance(name)
        one = _requests(catalog, inst, 1)
        assert inst.network_interfaces // one["efa"] == fits
        assert one["huge_mib"] * inst.num_gpus <= EFA_HUGEPAGES_2MI_MIB


@pytest.mark.parametrize(
    ("gpus", "hugepages", "limits_huge", "memory"),
    [
        (None, 0, None, "1843Gi"),  # none: floor(2048 * 0.9), nothing taken off for huge pages
        (None, 1024, "1024Mi", "1842Gi"),  # floor(1843.2 - 1)
        (4, 0, None, "921Gi"),  # partial node, none: floor(921.6)
        (4, 4096, "4096Mi", "917Gi"),  # a set value is per pod, not scaled: floor(921.6 - 4)
    ],
)
def test_hugepages_can_be_set_or_switched_off(
    gpus: int | None, hugepages: int, limits_huge: str | None, memory: str, catalog: Catalog
) -> None:
    pytest.importorskip("kubernetes_validate")
    spec = _spec("p5.48xlarge", gpus, kubernetes={"hugepages_2mi_mib": hugepages})
    m = render_jobset(resolve(parse_jobspec(spec), catalog))
    (res,) = _resources(m)
    assert res["limits"].get("hugepages-2Mi") == limits_huge
    assert res["requests"].get("hugepages-2Mi") == limits_huge
    assert res["requests"]["memory"] == memory
    assert res["limits"]["vpc.amazonaws.com/efa"] == ("32" if gpus is None else "16")  # EFA stays
    validate_manifest(m)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (5121, r"field 'kubernetes.hugepages_2mi_mib': Value error, must be a whole number of 2 MiB pages"),
        (-2, r"field 'kubernetes.hugepages_2mi_mib': Input should be greater than or equal to 0"),
        ("5120Mi", r"field 'kubernetes.hugepages_2mi_mib': Input should be a valid integer"),
        (True, r"field 'kubernetes.hugepages_2mi_mib': Input should be a valid integer"),
    ],
)
def test_bad_hugepages_values_are_one_line_errors(value: Any, message: str) -> None:
    with pytest.raises(InputError, match=message):
        parse_jobspec(_spec("p5.48xlarge", None, kubernetes={"hugepages_2mi_mib": value}))
    with pytest.raises(InputError, match=r"field 'kubernetes.hugepages': unknown field"):
        parse_jobspec(_spec("p5.48xlarge", None, kubernetes={"hugepages": 0}))


def test_hugepages_without_a_memory_request_are_refused(catalog: Catalog) -> None:
    spec = {**P5_SPEC, "instance": None, "plan": None, "kubernetes": {"hugepages_2mi_mib": 2048}}
    with pytest.raises(InputError, match=r"kubernetes.hugepages_2mi_mib: 2048 MiB of huge pages need a memory request"):
        render_jobset(resolve(parse_jobspec(spec), catalog))


def _unschedulable(message: str) -> dict[str, Any]:
    cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    return {"metadata": {"name": "p"}, "status": {"phase": "Pending", "conditions": [cond]}}


def test_pending_on_hugepages_points_at_the_field() -> None:
    msg = "0/4 nodes are available: 4 Insufficient hugepages-2Mi. preemption: 0/4 nodes are available."
    detail = pods_waiting([_unschedulable(msg)] * 2, 2)
    assert detail == f"2/2 pods pending; Unschedulable: {msg}; {HUGEPAGES_HINT}"
    assert "kubernetes.hugepages_2mi_mib: 0" in HUGEPAGES_HINT
    other = "0/4 nodes are available: 4 Insufficient vpc.amazonaws.com/efa."
    assert HUGEPAGES_HINT not in pods_waiting([_unschedulable(other)], 1)
