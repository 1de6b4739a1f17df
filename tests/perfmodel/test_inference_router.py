"""Colocated replicas behind a router (session 15): a replica that is one of R behind a round-robin router gets every
R-th arrival of the deployment's Poisson stream (Erlang(R) gaps); behind a random router, or alone, a Poisson stream
drawn exactly as before (docs/inference.md, Router)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fmstack.catalog import load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel.inference import ServeConfig, deployment
from fmstack.perfmodel.inference_open_loop import simulate_open_loop
from fmstack.perfmodel.inference_sim import SimConfig, simulate
from fmstack.perfmodel.inference_sim_io import arrival_gaps_s

N = 200_000
"""Gaps drawn for the moment checks."""
SIGMAS = 5.0
"""Tolerance in standard errors of the estimate (a fixed seed: a deterministic check, with room)."""


@pytest.mark.parametrize("replicas", [2, 4, 8])
def test_round_robin_gaps_are_erlang(replicas: int) -> None:
    """Every R-th arrival of a Poisson stream at Q: gaps of mean R / Q and squared coefficient of variation 1 / R.
    Standard errors over n gaps of gamma(k = R, scale 1 / Q): the mean's sqrt(k) / Q / sqrt(n); the sample
    variance's relative sqrt((2 + 6 / k) / n) (excess kurtosis 6 / k), the mean's sqrt(1 / (k n)), so the SCV's
    relative error is below sqrt((2 + 6 / k) / n) + 2 sqrt(1 / (k n))."""
    q = 12.0  # the deployment's requests/s
    sim = SimConfig(request_rate_per_s=q / replicas, num_requests=N, warmup_requests=0, replicas=replicas)
    gaps = arrival_gaps_s(sim, np.random.default_rng(7))
    k = float(replicas)
    mean_se = math.sqrt(k) / q / math.sqrt(N)
    assert abs(gaps.mean() - k / q) <= SIGMAS * mean_se
    scv = gaps.var(ddof=1) / gaps.mean() ** 2
    scv_rel_se = math.sqrt((2 + 6 / k) / N) + 2 * math.sqrt(1 / (k * N))
    assert abs(scv / (1 / k) - 1) <= SIGMAS * scv_rel_se


@pytest.mark.parametrize(("replicas", "router"), [(1, "round-robin"), (1, "random"), (4, "random")])
def test_poisson_gaps_are_the_draws_of_before(replicas: int, router: str) -> None:
    """One replica, or a random router's share: ``rng.exponential(1 / rate, n)``, the draws of the simulation before
    routers were modelled, bit for bit (every single-replica result is unchanged)."""
    sim = SimConfig(request_rate_per_s=3.0, num_requests=500, replicas=replicas, router=router, seed=5)
    before = np.random.default_rng(5).exponential(1.0 / 3.0, 500)
    assert np.array_equal(arrival_gaps_s(sim, np.random.default_rng(sim.seed)), before)


def test_random_router_simulates_as_one_replica_at_its_share() -> None:
    """A random router's replica and a lone replica at the same rate are the same run: identical percentiles."""
    cat = load_catalog()
    d = deployment(cat.model("llama3.1-8b"), build_cluster(cat, "p5.48xlarge", 1), CFG8)
    alone = simulate(d, CFG8, SimConfig(request_rate_per_s=4.0, num_requests=200, warmup_requests=20, seed=1))
    behind = simulate(d, CFG8, SimConfig(request_rate_per_s=4.0, num_requests=200, warmup_requests=20, seed=1,
                                         replicas=4, router="random"))  # fmt: skip
    assert behind.percentiles() == alone.percentiles()


CFG8 = ServeConfig(precision="fp8", input_len=512, output_len=128)
# the brief's case: Llama 3.1 70B TP 2 fp8 on p5, 2048/256, 3 req/s per replica (TTFT p99 0.82 s with Poisson arrivals)
CFG70 = ServeConfig(tp=2, precision="fp8", input_len=2048, output_len=256)


@pytest.mark.parametrize("seed", [0, 1])
def test_round_robin_does_not_raise_p99_ttft(seed: int) -> None:
    """At a fixed rate per replica, more regular arrivals queue less (Kingman: the wait grows with the arrivals'
    c_a^2, 1 / R behind round-robin against 1): TTFT p99 of one of 4 round-robin replicas is no higher than of a
    random router's, at the same seed."""
    cat = load_catalog()
    d = deployment(cat.model("llama3.1-70b"), build_cluster(cat, "p5.48xlarge", 1), CFG70)
    runs = {
        router: simulate_open_loop(d, CFG70, 3.0, seed=seed, replicas=4, router=router)[1]
        for router in ("random", "round-robin")
    }
    rr, rand = runs["round-robin"], runs["random"]
    assert rr is not None and rand is not None
    assert rr.ttft_s[99] <= rand.ttft_s[99]


@pytest.mark.parametrize(("field", "kwargs"), [("replicas", {"replicas": 0}), ("router", {"router": "least-load"})])
def test_bad_router_config(field: str, kwargs: dict[str, object]) -> None:
    with pytest.raises(InputError) as exc:
        SimConfig(request_rate_per_s=1.0, **kwargs)  # type: ignore[arg-type]
    assert exc.value.field == field
