"""Open-loop runs sized by Little's law and the queue's relaxation time, and rates near or above a replica's capacity
reported as having no steady state (a `plan serve` miss), not as meeting the SLO (session 13 review)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from fmstack.catalog import load_catalog
from fmstack.catalog.loader import Catalog
from fmstack.catalog.topology import Cluster, build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel.inference import ServeConfig, concurrency_for_rate, deployment
from fmstack.perfmodel.inference_disagg import SLO
from fmstack.perfmodel.inference_open_loop import (
    RELAX_MEASURED,
    RELAX_WARMUP,
    REQUESTS_MAX,
    capacity_rps,
    open_loop_run,
    relaxation_requests,
)
from fmstack.perfmodel.inference_plan import _analytic
from fmstack.perfmodel.inference_plan_verify import _simulate, verify_cheapest
from fmstack.perfmodel.inference_sim import SimConfig, simulate
from fmstack.perfmodel.inference_step import Deployment

# Llama 3.1 70B, TP 2 fp8 on one H100 node: the docs' example (10 req/s of 512/512 is 99 % of its capacity)
CFG = ServeConfig(tp=2, precision="fp8", input_len=512, output_len=512, max_num_tokens=2048)
# the 256/256 case of test_inference_plan_disagg.py: 20 req/s, TTFT p99 0.5 s, ITL p99 0.05 s
SHORT = ServeConfig(tp=2, precision="fp8", input_len=256, output_len=256, max_num_tokens=512)
SHORT_SLO = SLO(ttft_s=0.5, itl_s=0.05)


@pytest.fixture(scope="module")
def cat() -> Catalog:
    return load_catalog()


def _d(cat: Catalog, cfg: ServeConfig) -> Deployment:
    return deployment(cat.model("llama3.1-70b"), build_cluster(cat, "p5.48xlarge", 1), cfg)


def test_relaxation_requests_by_hand() -> None:
    """Morse's M/M/1 relaxation time ``1 / (mu (1 - sqrt(rho))^2)`` times the arrival rate ``rho mu``."""
    assert relaxation_requests(0.81) == pytest.approx(0.81 / 0.1**2, rel=1e-12)  # 81 requests
    assert relaxation_requests(0.9) == pytest.approx(341.763, abs=1e-3)
    assert relaxation_requests(0.95) == pytest.approx(1481.756, abs=1e-3)
    assert relaxation_requests(1.0) == math.inf and relaxation_requests(1.2) == math.inf
    # the budget ends the runs just above 95 % busy: 8 relaxation times of 1,500 requests
    assert (RELAX_WARMUP + RELAX_MEASURED) * relaxation_requests(0.950) <= REQUESTS_MAX
    assert (RELAX_WARMUP + RELAX_MEASURED) * relaxation_requests(0.951) > REQUESTS_MAX


def test_capacity_is_where_the_analytic_model_stops(cat: Catalog) -> None:
    d = _d(cat, CFG)
    cap = capacity_rps(d, CFG)
    assert cap == pytest.approx(10.085, abs=1e-3)
    at = replace(CFG, request_rate_per_s=cap)  # priced as an open loop, as estimate serve --qps prices it
    concurrency_for_rate(d, at, cap * (1 - 1e-9))
    with pytest.raises(InputError, match="exceeds one replica's capacity"):
        concurrency_for_rate(d, at, cap * (1 + 1e-6))


def test_warmup_and_measured_requests_at_90_percent(cat: Catalog) -> None:
    """By hand at rho 0.9: 341.76 requests per relaxation time, so 3 x -> 1,026 warm-up (more than the 163 in
    flight) and 5 x -> 1,709 measured (more than 3 x 163 = 489)."""
    d = _d(cat, CFG)
    run = open_loop_run(d, CFG, 0.9 * capacity_rps(d, CFG))
    assert run.utilization == pytest.approx(0.9, rel=1e-12)
    assert round(run.inflight) == 163
    assert run.sim is not None
    assert run.sim.warmup_requests == 1026 and run.sim.num_requests == 1026 + 1709


def test_at_40_percent_little_sets_the_warmup(cat: Catalog) -> None:
    """Far from capacity the queue settles at once (rho 0.4: 2.9 requests per relaxation time) and the requests in
    flight set the warm-up (the old rule measured a fifth of the run's requests, 15 of 150 in the plan)."""
    d = _d(cat, CFG)
    run = open_loop_run(d, CFG, 0.4 * capacity_rps(d, CFG))
    assert run.relaxation_requests == pytest.approx(0.4 / (1 - math.sqrt(0.4)) ** 2, rel=1e-12)
    assert run.sim is not None and run.sim.warmup_requests == max(15, math.ceil(run.inflight))
    assert run.sim.warmup_requests > 15


def test_sized_run_sees_the_full_engine_the_short_one_missed(cat: Catalog) -> None:
    """At 94 % of capacity the engine runs ~222 requests; 150 requests with 15 of warm-up measured a half-full
    engine (ITL p99 0.098 s, a plan "met" 0.1 s); the sized run (3,039 warm-up, 5,065 measured) gives 0.171 s, as
    40,000-request runs do (0.159 and 0.155 s, seeds 100 and 101; docs/inference.md)."""
    d = _d(cat, CFG)
    rate = 0.94 * capacity_rps(d, CFG)
    run = open_loop_run(d, CFG, rate)
    assert run.sim is not None and run.sim.warmup_requests == 3039
    sized = simulate(d, CFG, run.sim)
    short = simulate(d, CFG, SimConfig(request_rate_per_s=rate, num_requests=150, warmup_requests=15, seed=0))
    assert short.itl_s[99] < 0.1 < sized.itl_s[99]
    assert sized.itl_s[99] > 1.5 * short.itl_s[99]


def test_near_capacity_has_no_steady_state(cat: Catalog) -> None:
    d = _d(cat, CFG)
    run = open_loop_run(d, CFG, 10.0)  # the docs' example: 99.2 % of 10.085 req/s
    assert run.sim is None
    reason = run.near_capacity_reason()
    assert "99.2 % of the replica's capacity (10.09 requests/s)" in reason
    assert "near capacity counts as missing a p99 target" in reason


def test_just_above_capacity_is_refused(cat: Catalog) -> None:
    d = _d(cat, CFG)
    with pytest.raises(InputError, match=r"^qps: .* exceeds one replica's capacity, 10.1 requests/s"):
        open_loop_run(d, CFG, 1.001 * capacity_rps(d, CFG))


def test_plan_check_near_capacity_is_a_miss_not_a_meet(cat: Catalog) -> None:
    """`plan serve`'s 256/256 case at 20 req/s: one TP 2 fp8 replica (512-token chunk) is 97.6 % busy. The old
    check (150 requests, 15 warm-up) said it meets (TTFT p99 0.126 s <= 0.5 s); 20,000 requests show the steady
    state misses by far (TTFT p99 4.0 s at seed 0). Now it is a miss with the reason, and the plan's retry fills
    the node it pays for (a miss whose retry is simulated is not listed)."""
    model = cat.model("llama3.1-70b")
    cluster = build_cluster(cat, "p5.48xlarge", 1)
    d = deployment(model, cluster, SHORT)
    old = simulate(d, SHORT, SimConfig(request_rate_per_s=20.0, num_requests=150, warmup_requests=15, seed=0))
    assert old.ttft_s[99] <= SHORT_SLO.ttft_s and old.itl_s[99] <= SHORT_SLO.itl_s  # the old verdict: meets
    steady = simulate(d, SHORT, SimConfig(request_rate_per_s=20.0, num_requests=20_000, warmup_requests=5_000, seed=0))
    assert steady.ttft_s[99] > 2 * SHORT_SLO.ttft_s

    def cluster_of(name: str, nodes: int) -> Cluster:
        return build_cluster(cat, name, nodes)

    cand = _analytic(SHORT, cluster, model, 20.0, SHORT_SLO, "p5.48xlarge", 1)
    assert cand is not None and cand.replicas == 1
    result, note = _simulate(cluster_of, model, cand, 20.0, 256, 256, 0)
    assert result is None and "97.6 % of the replica's capacity" in note
    ranked = verify_cheapest(cluster_of, model, [cand], 20.0, 256, 256, SHORT_SLO, 0)
    assert not any(c.meets_slo and c.replicas == 1 for c in ranked)
    best = ranked[0]
    assert best.meets_slo and best.replicas == 4 and best.nodes == 1  # 4 TP 2 replicas on the paid node


def test_plan_check_just_above_capacity_is_a_miss(cat: Catalog) -> None:
    """A replica asked for 1 % more than its capacity (the analytic search never prices one there; a safeguard):
    a miss naming the capacity, not a traceback and not a meet."""
    model = cat.model("llama3.1-70b")
    cluster = build_cluster(cat, "p5.48xlarge", 1)
    cand = _analytic(SHORT, cluster, model, 20.0, SHORT_SLO, "p5.48xlarge", 1)
    assert cand is not None
    over = 1.01 * capacity_rps(deployment(model, cluster, SHORT), SHORT)
    result, note = _simulate(lambda n, k: build_cluster(cat, n, k), model, cand, over, 256, 256, 0)
    assert result is None and "exceeds one replica's capacity" in note
