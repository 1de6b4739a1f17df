"""NVLink domains smaller than a node: a PCIe server (domain 1) and two NVLink islands of 4 in an 8-GPU node.

Traffic between GPUs of one node in different domains is priced at the scale-out tier's per-GPU parameters (the
assumption of ``catalog/topology.py``): before, domain 1 refused every estimate ("dgx1 has no NVLink domain; use
1") and a 4-GPU domain priced TP 8 at NVLink speed (``gpus_per_domain`` was max(domain, GPUs per node)).

Hand-worked numbers, A100-80GB nodes on HDR InfiniBand (catalog fabrics nvlink-3 and ib-hdr):
NVLink 3: 300 GB/s x 0.78 = 234 GB/s per GPU, 3.4 us per step. HDR: 200 GB/s per node / 8 GPUs x 0.9 = 22.5 GB/s
per GPU, 14 us per step.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fmstack.catalog import Catalog, load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel.collectives import GroupPlacement, collective_time_s
from fmstack.perfmodel.config import TrainConfig
from fmstack.perfmodel.planner import SearchSpace, plan_training
from fmstack.perfmodel.step_comm import placement_per_domain
from fmstack.perfmodel.training import estimate_training

NODE = """  - name: {name}
    gpu: A100-80GB
    num_gpus: 8
    gpu_memory_gb: 640
    vcpus: 256
    host_memory_gib: 2048
    nvlink_domain_gpus: {domain}
    network: ib-hdr
    network_bw_gbps: 200
    price_per_hour_usd: 20.0
"""
GIB = 2**30
NVLINK3_GBPS = 300 * 0.78
HDR_PER_GPU_GBPS = 200 / 8 * 0.9


@pytest.fixture(scope="module")
def cat(tmp_path_factory: pytest.TempPathFactory) -> Catalog:
    d: Path = tmp_path_factory.mktemp("subnode")
    (d / "x.yaml").write_text("kind: instance\nentries:\n" + NODE.format(name="dgx1", domain=1)
                              + NODE.format(name="dgx4", domain=4))  # fmt: skip
    return load_catalog(d)


def test_topology_of_a_domain_smaller_than_the_node(cat: Catalog) -> None:
    c4 = build_cluster(cat, "dgx4", 2)
    assert c4.gpus_per_domain == 4 and c4.num_domains == 4 and c4.nodes_per_domain == 1
    assert [c4.domain_of(g) for g in (0, 3, 4, 7, 8)] == [0, 0, 1, 1, 2]
    assert c4.hops(0, 3) == 0 and c4.hops(0, 4) == 1  # the other island of the node: off NVLink
    assert not c4.group_in_domain(8)
    c1 = build_cluster(cat, "dgx1", 2)
    assert c1.scale_up is None and c1.gpus_per_domain == 1 and c1.num_domains == 16
    assert placement_per_domain(8.0, 1.0, float(c4.gpus_per_domain)) == 4.0


def test_all_gather_without_nvlink_is_on_the_fabric(cat: Catalog) -> None:
    # 8 ranks, one per domain: 7 network steps at 14 us, 7/8 of 1 GiB at 22.5 GB/s per GPU (Simple protocol)
    t = collective_time_s(
        "all_gather", GIB, GroupPlacement(num_ranks=8, ranks_per_domain=1), build_cluster(cat, "dgx1", 1)
    )
    assert t == pytest.approx(7 * 14e-6 + 7 / 8 * GIB / (HDR_PER_GPU_GBPS * 1e9), rel=1e-12)


def test_all_gather_across_two_islands_of_one_node(cat: Catalog) -> None:
    """8 ranks, 4 in each of 2 domains: 6 NVLink steps and 1 network step; the ring runs at the slower of NVLink
    (234 GB/s) and the 4 GPUs' network share (4 x 22.5 = 90 GB/s)."""
    c4 = build_cluster(cat, "dgx4", 1)
    t = collective_time_s("all_gather", GIB, GroupPlacement(num_ranks=8, ranks_per_domain=4), c4)
    assert t == pytest.approx(6 * 3.4e-6 + 14e-6 + 7 / 8 * GIB / (4 * HDR_PER_GPU_GBPS * 1e9), rel=1e-12)
    # the whole node on NVLink (DGX A100): 7 NVLink steps at 234 GB/s
    whole = collective_time_s("all_gather", GIB, GroupPlacement(num_ranks=8, ranks_per_domain=8),
                              build_cluster(load_catalog(), "dgx-a100", 1))  # fmt: skip
    assert whole == pytest.approx(7 * 3.4e-6 + 7 / 8 * GIB / (NVLINK3_GBPS * 1e9), rel=1e-12)
    with pytest.raises(InputError, match="8 ranks per domain > 4 GPUs per NVLink domain of dgx4"):
        collective_time_s("all_gather", GIB, GroupPlacement(num_ranks=8, ranks_per_domain=8), c4)


def test_tp8_training_step_prices_the_island_boundary(cat: Catalog, catalog: Catalog) -> None:
    """TP 8 of llama3.1-8b on one node: the TP link time grows as the NVLink domain shrinks (8 -> 4 -> 1), and
    a node without NVLink estimates (before: an error naming no flag)."""
    model = catalog.model("llama3.1-8b")
    cfg = TrainConfig(tp=8, dp=1, sequence_parallel=True, global_batch=8, seq_len=8192)
    whole = estimate_training(model, build_cluster(catalog, "dgx-a100", 1), cfg)
    islands = estimate_training(model, build_cluster(cat, "dgx4", 1), cfg)
    pcie = estimate_training(model, build_cluster(cat, "dgx1", 1), cfg)
    assert whole.comm["tp"].link_s < islands.comm["tp"].link_s < pcie.comm["tp"].link_s
    assert whole.step_time_s < islands.step_time_s < pcie.step_time_s
    # compute does not depend on the domain
    assert islands.parts_s["gemm"] == pytest.approx(whole.parts_s["gemm"])
    assert "on IB-HDR" in pcie.bottleneck


def test_planner_keeps_tensor_parallelism_inside_the_domain(cat: Catalog) -> None:
    model = cat.model("llama3.1-8b")
    space = SearchSpace(seq_len=4096)
    for name, limit in (("dgx4", 4), ("dgx1", 1)):
        result = plan_training(model, [build_cluster(cat, name, 2)], tokens=1e12, top=50, space=space)
        assert max(e.config.tp for e in result.ranked) <= limit
