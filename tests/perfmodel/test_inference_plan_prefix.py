"""`plan serve`'s screening of a shared-prefix workload (session 16, helper N): the expected hit rate each candidate
is priced at (Che's approximation per replica, the room the running sequences leave, the groups the router shows a
replica), by hand; optimistic against the simulation; and the plan it changes (docs/inference.md, Routers)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from fmstack.catalog import load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.perfmodel.inference import ServeConfig, concurrency_for_rate, deployment, max_concurrency
from fmstack.perfmodel.inference_disagg import SLO
from fmstack.perfmodel.inference_open_loop import simulate_open_loop_fleet
from fmstack.perfmodel.inference_plan import plan_serve
from fmstack.perfmodel.inference_plan_analytic import ALL_HIT, analytic
from fmstack.perfmodel.inference_prefix import (
    PrefixWorkload,
    che_hit_rate,
    che_hit_rates,
    screen_hit_rates,
    token_share,
)

SLO_README = SLO(ttft_s=0.5, itl_s=0.05)
GROUPS16 = PrefixWorkload(groups=16, prefix_len=1536)


def test_che_hit_rates_is_che_hit_rate() -> None:
    p = PrefixWorkload(groups=300, prefix_len=8, zipf=0.8).probabilities()
    caps = np.array([0.0, 1.0, 7.0, 64.0, 299.0, 300.0, 5000.0])
    got = che_hit_rates(p, caps)
    for c, h in zip(caps, got, strict=True):
        assert abs(h - che_hit_rate(p, float(c))) < 1e-12


def test_screen_hit_rates_by_hand() -> None:
    """Uniform 16 groups: room for k prefixes hits k / 16 (Che is exact for equal popularity, as LRU is); the room
    is floored to whole prefixes; cache-aware pools the room of its replicas (each sees about 16 / N groups)."""
    room = np.array([-3.0, 0.0, 4.9, 8.0, 16.0, 40.0])
    rr = screen_hit_rates(GROUPS16, room, replicas=4, router="round-robin")
    assert rr.tolist() == pytest.approx([0.0, 0.0, 0.25, 0.5, 1.0, 1.0], abs=1e-12)
    for router in ("random", "least-loaded"):
        assert screen_hit_rates(GROUPS16, room, replicas=4, router=router).tolist() == rr.tolist()
    ca = screen_hit_rates(GROUPS16, room, replicas=2, router="cache-aware")
    assert ca.tolist() == pytest.approx([0.0, 0.0, 0.5, 1.0, 1.0, 1.0], abs=1e-12)
    # rounded up to a hundredth: 5 of 16 = 0.3125 -> 0.32
    assert screen_hit_rates(GROUPS16, np.array([5.0]), replicas=1, router="random")[0] == pytest.approx(0.32)
    # a hit skips the prefix: 1536 of 2048 prompt tokens
    assert token_share(GROUPS16, 2048, 0.5) == pytest.approx(0.375)
    assert token_share(GROUPS16, 1536 + 1, 1.0) == pytest.approx(1536 / 1537)  # (input - 1 at most: here the prefix)


def _d70(tp: int, cfg: ServeConfig):  # type: ignore[no-untyped-def]
    cat = load_catalog()
    return cat, deployment(cat.model("llama3.1-70b"), build_cluster(cat, "p5.48xlarge", 1), cfg)


@pytest.mark.parametrize(
    ("groups", "zipf", "tp", "rate", "replicas", "router"),
    [(2000, 0.0, 4, 8.0, 2, "round-robin"), (2000, 0.0, 4, 8.0, 2, "cache-aware"), (300, 0.0, 2, 3.0, 4, "least-loaded"),
     (1000, 1.0, 2, 3.0, 4, "random")],
)  # fmt: skip
def test_screening_is_optimistic(groups: int, zipf: float, tp: int, rate: float, replicas: int, router: str) -> None:
    """The screened request hit rate at the analytic operating point (the concurrency the rate runs at, priced at that
    hit rate: a fixed point) is at least what the joint simulation measures (cold misses, the room fluctuating)."""
    w = PrefixWorkload(groups=groups, prefix_len=1536, zipf=zipf)
    cfg = ServeConfig(tp=tp, precision="fp8", input_len=2048, output_len=256, max_num_tokens=2048)
    _, d = _d70(tp, cfg)
    _, fleet = simulate_open_loop_fleet(d, cfg, rate, seed=0, replicas=replicas, router=router, prefix=w)
    assert fleet is not None
    full = max_concurrency(d, cfg)
    h = 1.0
    for _ in range(5):
        at = replace(cfg, request_rate_per_s=rate, prefix_hit_rate=token_share(w, 2048, h))
        c = concurrency_for_rate(d, at, rate)
        room = np.array([(full - c) * 2304 / 1536 + c])
        h = float(screen_hit_rates(w, room, replicas=replicas, router=router)[0])
    assert h >= fleet.prefix_hit_rate


def test_analytic_with_prefix_by_hand() -> None:
    """The candidate's screened hit rate is the one at its concurrency, by hand (room for ``(max - C) x 2304 / 1536``
    prefixes in the free part and the ``C`` running sequences' own, shared: ``+ C``; of 2,000 equally popular), and
    it serves more per replica than priced in full."""
    cfg = ServeConfig(tp=4, precision="fp8", input_len=2048, output_len=256, max_num_tokens=512)
    cat, d = _d70(4, cfg)
    cl, model = build_cluster(cat, "p5.48xlarge", 1), cat.model("llama3.1-70b")
    plain = analytic(cfg, cl, model, 20.0, SLO_README, "p5.48xlarge", 1)
    w = PrefixWorkload(groups=2000, prefix_len=1536)
    c = analytic(cfg, cl, model, 20.0, SLO_README, "p5.48xlarge", 1, prefix=w, router="round-robin")
    assert plain is not None and c is not None
    room = (max_concurrency(d, cfg) - c.concurrency) * 2304 // 1536 + c.concurrency
    assert c.prefix_request_hit_rate == pytest.approx(math.ceil(100 * room / 2000) / 100)
    assert c.prefix_hit_rate == pytest.approx(c.prefix_request_hit_rate * 0.75)
    assert c.rate_per_replica_rps > plain.rate_per_replica_rps and c.replicas <= plain.replicas


def test_cache_aware_replicas_are_the_smallest_that_serve() -> None:
    """Under cache-aware the hit rate grows with the replicas: the count is the smallest N whose own rate serves the
    load (N - 1 replicas at their own, lower, hit rate would not)."""
    cfg = ServeConfig(tp=2, precision="fp8", input_len=2048, output_len=256, max_num_tokens=2048)
    cat, d = _d70(2, cfg)
    cl, model = build_cluster(cat, "p5.48xlarge", 1), cat.model("llama3.1-70b")
    w = PrefixWorkload(groups=3000, prefix_len=1536)
    c = analytic(cfg, cl, model, 20.0, SLO_README, "p5.48xlarge", 1, prefix=w, router="cache-aware")
    assert c is not None and math.ceil(20.0 / c.rate_per_replica_rps) <= c.replicas
    rr = analytic(cfg, cl, model, 20.0, SLO_README, "p5.48xlarge", 1, prefix=w, router="round-robin")
    # one replica's room alone: too few hits for a 2048-token chunk to meet the ITL target, where the pooled room does
    assert rr is None and c.prefix_request_hit_rate >= ALL_HIT
    from fmstack.perfmodel.inference_plan_analytic import _best_point

    fewer = _best_point(d, cfg, SLO_README, max_concurrency(d, cfg), w, c.replicas - 1, "cache-aware")
    assert fewer is None or math.ceil(20.0 / fewer[0]) > c.replicas - 1


def test_plan_with_prefix_is_cheaper() -> None:
    """The README plan with 16 groups of 1,536 shared tokens on p5.48xlarge: screened as if nothing were cached it
    needed two nodes ($110.08/h, 6 x TP 2: the one-node candidates exceeded their capacity priced in full); screened
    at the expected hit rate one node serves it, and the simulation confirms: 2 x TP 4 fp8, $55.04/h."""
    cat = load_catalog()
    plan = plan_serve(cat, cat.model("llama3.1-70b"), qps=20.0, input_len=2048, output_len=256, slo=SLO_README,
                      instances=("p5.48xlarge",), search_disagg=False, prefix=GROUPS16)  # fmt: skip
    b = plan.best
    assert b.meets_slo and b.nodes == 1 and b.cost_per_hour_usd == pytest.approx(55.04)
    assert (b.replicas, b.tp, b.precision) == (2, 4, "fp8")
    assert b.prefix_request_hit_rate == 1.0 and b.prefix_hit_rate == pytest.approx(0.75)
    assert b.sim is not None and b.sim["ttft_p99_s"] <= 0.5 and b.sim["itl_p99_s"] <= 0.05
