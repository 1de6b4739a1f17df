"""The collectives model: hand-worked alpha-beta cases, nccl-tests' bandwidth definitions, and the published
nccl-tests results (every in-scope row within 15 %)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fmstack.catalog import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel.collectives import (
    GroupPlacement,
    algbw_gbps,
    algorithm_times_s,
    busbw_gbps,
    collective_time_s,
    pipelined_time_s,
    ring_all_gather_time_s,
    ring_all_reduce_time_s,
    send_recv_time_s,
    tree_all_reduce_time_s,
)
from fmstack.perfmodel.collectives_validation import ACCEPT_ERROR_PCT, summary, validate_collectives

GB = 1e9


def test_ring_all_reduce_hand_worked() -> None:
    # S = 1 GB, n = 8, B = 100 GB/s, alpha = 5 us:
    # 2(n-1) alpha = 14 * 5 us = 70 us; 2(n-1)/n * S/B = 1.75 * 1e9 / 1e11 = 17.5 ms; total 17.570 ms.
    assert ring_all_reduce_time_s(1e9, 8, 100.0, 5e-6) == pytest.approx(0.01757, rel=1e-12)


def test_ring_all_gather_and_tree_and_p2p_hand_worked() -> None:
    # all-gather of a 64 MB output on 4 ranks at 50 GB/s, alpha 10 us: 3 * 10 us + 0.75 * 64e6 / 50e9 = 990 us.
    assert ring_all_gather_time_s(64e6, 4, 50.0, 10e-6) == pytest.approx(990e-6, rel=1e-12)
    # Two-rank tree: each rank roots one tree and is the leaf of the other: 2 * 1 * alpha + S/B.
    assert tree_all_reduce_time_s(1e9, 2, 100.0, 5e-6) == pytest.approx(10e-6 + 0.01, rel=1e-12)
    # 16 ranks: depth 4, inner ranks move 2S: 8 alpha + 2 S/B = 40 us + 20 ms.
    assert tree_all_reduce_time_s(1e9, 16, 100.0, 5e-6) == pytest.approx(40e-6 + 0.02, rel=1e-12)
    assert send_recv_time_s(1e6, 25.0, 2e-6) == pytest.approx(2e-6 + 40e-6, rel=1e-12)
    # Pipelined with the best chunk: latency + (sqrt(fill) + sqrt(transfer))^2 = 1 + (2 + 3)^2.
    assert pipelined_time_s(1.0, 4.0, 9.0) == pytest.approx(26.0)


def test_busbw_is_nccl_tests_definition() -> None:
    # nccl-tests PERFORMANCE.md; published row COL-004: 16 ranks, 134217728 B in 870.3 us ->
    # algbw = 134217728 / 870.3 us = 154.22 GB/s, busbw = algbw * 2 * 15 / 16 = 289.16 GB/s.
    assert algbw_gbps(134217728, 870.3e-6) == pytest.approx(154.22, abs=0.01)
    assert busbw_gbps("all_reduce", 134217728, 870.3e-6, 16) == pytest.approx(289.16, abs=0.01)
    # COL-017 all-to-all, 16 ranks: busbw = algbw * 15 / 16 = 84.53 * 0.9375 = 79.25.
    t = 2147483648 / 84.53e9
    assert busbw_gbps("all_to_all", 2147483648, t, 16) == pytest.approx(79.25, abs=0.01)
    assert busbw_gbps("broadcast", 1e9, 0.01, 8) == pytest.approx(100.0)
    with pytest.raises(InputError, match="op"):
        busbw_gbps("allreduce", 1e9, 0.01, 8)


def test_large_message_asymptotes_on_p5(catalog: Catalog) -> None:
    node = build_cluster(catalog, "p5.48xlarge", 1)
    tp8 = GroupPlacement(num_ranks=8, ranks_per_domain=8)
    size = 2.0**36  # 64 GiB: latency and pipeline fill are < 0.5 %
    ring = collective_time_s("all_reduce", size, tp8, node, algorithm="ring")
    nvls = collective_time_s("all_reduce", size, tp8, node, algorithm="nvls")
    # ring busbw -> 450 GB/s x 0.82 = 369 GB/s; NVLS -> x 1.3 = 479.7 GB/s (nvlink-4 defaults).
    assert busbw_gbps("all_reduce", size, ring, 8) == pytest.approx(369.0, rel=1e-3)
    assert busbw_gbps("all_reduce", size, nvls, 8) == pytest.approx(479.7, rel=5e-3)
    # All-to-all across 2 p5 nodes: half of each rank's bytes leave the node over 400 GB/s x 0.85:
    # t = 8 ranks * S/2 / 340 GB/s, algbw = 85 GB/s.
    two = build_cluster(catalog, "p5.48xlarge", 2)
    a2a = collective_time_s("all_to_all", size, GroupPlacement(num_ranks=16, ranks_per_domain=8), two)
    assert algbw_gbps(size, a2a) == pytest.approx(85.0, rel=1e-3)


def test_dp_group_one_rank_per_node_uses_its_own_nics(catalog: Catalog) -> None:
    cluster = build_cluster(catalog, "p5.48xlarge", 4)
    dp = GroupPlacement(num_ranks=4, ranks_per_domain=1)
    size = 2.0**36
    t = collective_time_s("all_reduce", size, dp, cluster, algorithm="ring")
    # ring over 4 GPUs each with 50 GB/s x 0.85 of EFA: busbw -> 42.5 GB/s.
    assert busbw_gbps("all_reduce", size, t, 4) == pytest.approx(42.5, rel=1e-3)


def test_vectorised_matches_scalar(catalog: Catalog) -> None:
    cluster = build_cluster(catalog, "p5.48xlarge", 32)
    sizes = np.array([8.0, 2.0**20, 2.0**27, 2.0**33])
    ranks = np.array([8, 16, 64, 256])
    placement = GroupPlacement(num_ranks=ranks, ranks_per_domain=np.full(4, 8))
    for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv"):
        vec = collective_time_s(op, sizes, placement, cluster)
        assert isinstance(vec, np.ndarray) and vec.shape == (4,)
        for i in range(4):
            one = collective_time_s(op, sizes[i], GroupPlacement(num_ranks=int(ranks[i]), ranks_per_domain=8), cluster)
            assert isinstance(one, float)
            assert vec[i] == pytest.approx(one, rel=1e-12)


def test_invariants(catalog: Catalog) -> None:
    cluster = build_cluster(catalog, "p5.48xlarge", 8)
    sizes = np.logspace(0, 34, 60, base=2.0)
    for g, n in ((8, 8), (8, 64), (1, 8), (4, 32)):
        placement = GroupPlacement(num_ranks=n, ranks_per_domain=g)
        for op in ("all_reduce", "all_gather", "all_to_all", "broadcast", "send_recv"):
            t = np.asarray(collective_time_s(op, sizes, placement, cluster))
            assert np.all(np.diff(t) >= 0), (op, g, n)  # more bytes never take less time
            cands = algorithm_times_s(op, sizes, placement, cluster)
            assert np.all(t <= np.minimum.reduce([np.asarray(v) for v in cands.values()]) + 1e-15)
    one = GroupPlacement(num_ranks=1, ranks_per_domain=1)
    assert collective_time_s("all_reduce", 1e9, one, cluster) == 0.0


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"num_ranks": 0, "ranks_per_domain": 1}, "num_ranks"),
        ({"num_ranks": 8, "ranks_per_domain": 16}, "ranks_per_domain"),
        ({"num_ranks": 12, "ranks_per_domain": 8}, "ranks_per_domain"),
    ],
)
def test_bad_placement(kwargs: dict[str, int], field: str) -> None:
    with pytest.raises(InputError) as err:
        GroupPlacement(**kwargs)
    assert err.value.field == field


def test_bad_calls(catalog: Catalog) -> None:
    cluster = build_cluster(catalog, "p5.48xlarge", 2)
    p16 = GroupPlacement(num_ranks=16, ranks_per_domain=8)
    with pytest.raises(InputError, match="allowed: all_reduce"):
        collective_time_s("allreduce", 1e6, p16, cluster)
    with pytest.raises(InputError, match="allowed: auto, ring, tree, nvls, hierarchical"):
        collective_time_s("all_reduce", 1e6, p16, cluster, algorithm="butterfly")
    with pytest.raises(InputError, match="supports: auto, ring"):
        collective_time_s("all_gather", 1e6, p16, cluster, algorithm="nvls")
    with pytest.raises(InputError, match="GPUs per NVLink domain"):
        collective_time_s("all_reduce", 1e6, GroupPlacement(num_ranks=16, ranks_per_domain=16), cluster)
    with pytest.raises(InputError, match="GPUs in the cluster"):
        collective_time_s("all_reduce", 1e6, GroupPlacement(num_ranks=64, ranks_per_domain=8), cluster)
    with pytest.raises(InputError, match="size_bytes"):
        collective_time_s("all_reduce", -1.0, p16, cluster)


def test_published_nccl_tests_within_15_percent(catalog: Catalog) -> None:
    checks = validate_collectives(catalog)
    assert [c.id for c in checks] == [f"COL-{i:03d}" for i in range(1, 37)]  # no row dropped
    in_scope = [c for c in checks if c.in_scope]
    assert len(in_scope) == 31
    for c in checks:
        if not c.in_scope:
            assert c.note, c.id
        assert math.isfinite(c.predicted_busbw_gbps), c.id
    median, worst = summary(checks)
    print(f"\ncollectives: {len(in_scope)} in-scope rows, median |error| {median:.1f} %, worst {worst:.1f} %")
    for c in in_scope:
        assert abs(c.error_pct) <= ACCEPT_ERROR_PCT, (c.id, c.error_pct, c.note)
