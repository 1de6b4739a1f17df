"""Batching simulation: one request by hand, determinism by seed, conservation, chunked prefill."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from fmstack.catalog import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel.inference import ServeConfig, deployment
from fmstack.perfmodel.inference_sim import BatchingSim, SimConfig, simulate
from fmstack.perfmodel.inference_step import Deployment, step_time


@pytest.fixture(scope="module")
def setup(catalog: Catalog) -> tuple[Deployment, ServeConfig]:
    cfg = ServeConfig(tp=8, input_len=512, output_len=64)
    return deployment(catalog.model("llama3.1-70b"), build_cluster(catalog, "p5.48xlarge", 1), cfg), cfg


def test_one_client_matches_the_iteration_times(setup: tuple[Deployment, ServeConfig]) -> None:
    d, cfg = setup
    r = simulate(d, cfg, SimConfig(concurrency=1, num_requests=4, warmup_requests=1))
    ttft = float(step_time(d, 0.0, 0.0, 512.0, 512 * 513 / 2, 1.0).total_s)
    gaps = [float(step_time(d, 1.0, 512.0 + g).total_s) for g in range(1, 64)]
    assert r.ttft_s[50] == pytest.approx(ttft, rel=1e-12)
    assert r.itl_s[50] == pytest.approx(float(np.percentile(gaps, 50)), rel=1e-12)
    assert r.latency_s[99] == pytest.approx(ttft + sum(gaps), rel=1e-12)
    assert r.completed == 3


def test_same_seed_same_result_and_state_on_the_instance(setup: tuple[Deployment, ServeConfig]) -> None:
    d, cfg = setup
    sim = SimConfig(request_rate_per_s=3.0, num_requests=60, warmup_requests=5, length_spread=0.3, seed=7)
    a = simulate(d, cfg, sim)
    b = BatchingSim(d, cfg, sim).run()
    assert a == b
    c = simulate(
        d, cfg, SimConfig(request_rate_per_s=3.0, num_requests=60, warmup_requests=5, length_spread=0.3, seed=8)
    )
    assert c != a


def test_every_request_completes_with_its_tokens(setup: tuple[Deployment, ServeConfig]) -> None:
    d, cfg = setup
    engine = BatchingSim(d, cfg, SimConfig(concurrency=16, num_requests=80, warmup_requests=0))
    pool = engine._kv_tokens_free
    r = engine.run()
    assert engine._kv_tokens_free == pool
    assert r.completed == 80
    assert r.output_tokens_per_s * r.duration_s == pytest.approx(80 * 64)
    assert not engine._running and not engine._waiting  # every KV reservation returned


def test_without_chunked_prefill_decodes_stall(setup: tuple[Deployment, ServeConfig]) -> None:
    d, cfg = setup
    base: dict[str, Any] = {"concurrency": 32, "num_requests": 160, "warmup_requests": 32, "ramp_s": 2.0}
    chunked = simulate(d, cfg, SimConfig(**base, chunked_prefill=True))
    stalled = simulate(d, cfg, SimConfig(**base, chunked_prefill=False))
    # prefill-only iterations pause every running decode: the typical (decode-only) gap is the same, the tail longer
    assert stalled.itl_s[50] == pytest.approx(chunked.itl_s[50], rel=0.01)
    assert stalled.itl_s[99] > 1.3 * chunked.itl_s[99]


def test_bad_sim_config() -> None:
    with pytest.raises(InputError, match="exactly one"):
        SimConfig()
    with pytest.raises(InputError, match="qps"):
        SimConfig(request_rate_per_s=0.0)


def test_closed_loop_cooldown_drops_the_draining_requests(setup: tuple[Deployment, ServeConfig]) -> None:
    """The last `concurrency` requests run while clients stop: counting them pulls the means below the p50."""
    d, cfg = setup
    base: dict[str, Any] = {"concurrency": 32, "num_requests": 160, "warmup_requests": 32, "ramp_s": 2.0}
    kept = simulate(d, cfg, SimConfig(**base))
    cut = simulate(d, cfg, SimConfig(**base, cooldown_requests=32))
    assert kept.completed == 128 and cut.completed == 96
    assert cut.mean_latency_s > kept.mean_latency_s  # the drained ones are faster (fewer running)
    assert cut.mean_latency_s <= cut.latency_s[99]
    means = cut.means()
    assert means["latency_mean_s_sim"] == cut.mean_latency_s and means["ttft_mean_s_sim"] == cut.mean_ttft_s
    with pytest.raises(InputError, match="cooldown_requests"):
        SimConfig(**{**base, "num_requests": 64}, cooldown_requests=32)


def test_analytic_ttft_waits_for_the_iteration_in_progress(setup: tuple[Deployment, ServeConfig]) -> None:
    """Closed loop: TTFT = one iteration of the c - 1 others (k of their whole prompts in it, k binomial(c - 1,
    1 / output_len); open loop Poisson with the same mean) + the iteration holding this prompt: given that it
    holds this one (size-biased), 1 + k prompts with k the others' count, the mixture over k, not the price at
    the mean count 1 + (c - 1) / output_len; hand-built from step_time."""
    from dataclasses import replace

    from fmstack.perfmodel.inference import serve_curve

    d, cfg = setup
    c, new, osl = 32.0, 512.0, 64.0
    ctx, pctx, others = new + osl / 2, new * (new + 1) / 2, c - 1
    mu = others / osl
    t = [float(step_time(d, others, ctx, k * new, k * pctx, k).total_s) for k in range(32)]
    wait = sum(math.comb(31, k) * (1 / osl) ** k * (1 - 1 / osl) ** (31 - k) * t[k] for k in range(32))
    wait_poisson = sum(math.exp(-mu) * mu**k / math.factorial(k) * t[k] for k in range(32))
    t1 = [float(step_time(d, others, ctx, (1 + k) * new, (1 + k) * pctx, 1 + k).total_s) for k in range(32)]
    own = sum(math.comb(31, k) * (1 / osl) ** k * (1 - 1 / osl) ** (31 - k) * t1[k] for k in range(32))
    own_poisson = sum(math.exp(-mu) * mu**k / math.factorial(k) * t1[k] for k in range(32))
    p = 1 + others / osl
    at_mean = float(step_time(d, others, ctx, p * new, p * pctx, p).total_s)  # the old price, at the mean count
    assert abs(own / at_mean - 1) > 1e-3  # here lower: larger prompt GEMMs run at a higher efficiency
    assert float(serve_curve(d, cfg, [c]).ttft_s[0]) == pytest.approx(wait + own, rel=1e-12)
    # one client: nothing in progress, nothing else batched: the prompt's own iteration
    one = float(step_time(d, 0.0, ctx, new, pctx, 1.0).total_s)
    assert float(serve_curve(d, cfg, [1.0]).ttft_s[0]) == pytest.approx(one, rel=1e-12)
    # Poisson arrivals find the iteration half done on average
    rate = replace(cfg, request_rate_per_s=1.0)
    assert float(serve_curve(d, rate, [c]).ttft_s[0]) == pytest.approx(wait_poisson / 2 + own_poisson, rel=1e-12)
    # the simulation agrees within 10 % once varied lengths break the fixed-length waves
    sim = simulate(d, cfg, SimConfig(concurrency=32, num_requests=352, warmup_requests=64, cooldown_requests=32,
                                     ramp_s=2.0, length_spread=0.3))  # fmt: skip
    assert sim.mean_ttft_s == pytest.approx(wait + own, rel=0.10)


def test_closed_loop_rule_counts_the_warm_up_and_the_clients(catalog: Catalog) -> None:
    """closed_loop_config by hand: Llama 3.1 70B, tp 8, 2048/256 on 8 H100s runs 606 sequences at most."""
    from fmstack.perfmodel.inference_closed_loop import closed_loop_config, running_bound

    cfg = ServeConfig(tp=8, input_len=2048, output_len=256)
    d = deployment(catalog.model("llama3.1-70b"), build_cluster(catalog, "p5.48xlarge", 1), cfg)
    assert running_bound(d, cfg) == 606
    # 64 clients, all simulated: warm-up = their first requests, 3 x 64 measured, the last 64 left out
    small = closed_loop_config(d, cfg, 64, latency_s=9.6)
    assert (small.concurrency, small.warmup_requests, small.num_requests, small.cooldown_requests) == (
        64, 64, 64 + 192 + 64, 64)  # fmt: skip
    assert small.ramp_s == 9.6
    # above 2 x 606 clients, 1212 are simulated whatever the load: the requests simulated do not grow with it;
    # warm-up 1212 first requests + the 606 sent before the last client started; 1212 measured; 1212 cool-down
    for clients in (2000, 100_000, 10**7):
        big = closed_loop_config(d, cfg, clients, latency_s=clients / 9.47)
        assert (big.concurrency, big.warmup_requests, big.num_requests) == (1212, 1818, 1818 + 1212 + 1212)
        assert big.ramp_s == pytest.approx(1212 / 9.47)  # one latency of the clients simulated
    # length spread: shorter sequences let more run at once; the bound follows the shortest one drawn
    assert running_bound(d, cfg, 0.5) == 606 * 2304 // (1024 + 128)
    assert running_bound(d, replace(cfg, max_batch=32), 0.5) == 32


def test_clients_beyond_the_engine_only_queue(catalog: Catalog) -> None:
    """100,000 clients on an engine that runs 606: the simulation runs 1212 of them (4242 requests, as for 2000
    clients) and adds the rest's queue wait; its mean TTFT matches the analytic one.

    Both TTFTs are ``(C - 606) / X`` (each request waits behind the C - 606 queued clients, the engine finishing X
    requests/s) plus an engine TTFT under 2 s, i.e. under 0.02 % of ~10,500 s; so their ratio is the ratio of the
    throughputs. Both price 606 running sequences with the same iteration model; the simulation's iterations carry
    0 to 4 whole prompts (8192-token budget) around the analytic mean of 606 / 256 = 2.37, and the iteration time is
    close to affine in the prompt tokens at this load (every iteration carries 606 decodes): 5 % allowed."""
    from fmstack.perfmodel.inference import estimate_serve
    from fmstack.perfmodel.inference_closed_loop import simulate_closed_loop

    arch, cl = catalog.model("llama3.1-70b"), build_cluster(catalog, "p5.48xlarge", 1)
    cfg = ServeConfig(tp=8, input_len=2048, output_len=256, concurrency=100_000)
    est = estimate_serve(arch, cl, cfg)
    assert est.max_concurrency == 606 and est.ttft_s > 10_000
    r = simulate_closed_loop(deployment(arch, cl, cfg), cfg, 100_000, est.latency_s)
    assert r.clients_simulated == 1212 and r.requests_simulated == 4242
    assert r.queue_wait_s == pytest.approx((100_000 - 1212) / r.completion_rate_per_s)
    assert r.completion_rate_per_s == pytest.approx(est.requests_per_s, rel=0.05)
    assert r.mean_ttft_s == pytest.approx(est.ttft_s, rel=0.05)
    assert r.mean_latency_s == pytest.approx(est.latency_s, rel=0.05)
    assert r.ttft_s[50] <= r.ttft_s[99] < r.ttft_s[50] * 1.01  # the same queue for every request


def test_prefix_hits_skip_prefill_in_the_simulation(catalog: Catalog) -> None:
    """A prefix-cache hit removes prefill work in the simulation as in the analytic model: at batch 1 the TTFT is
    one prefill of the uncached tokens, so the two agree with and without hits (the simulation used to prefill
    every prompt token whatever the hit rate)."""
    from fmstack.perfmodel.inference import ServeConfig, deployment, estimate_serve
    from fmstack.perfmodel.inference_sim import SimConfig, simulate

    m, cl = catalog.model("llama3.1-8b"), build_cluster(catalog, "p5.48xlarge", 1)
    ttft = {}
    for hit in (0.0, 0.75):
        cfg = ServeConfig(tp=1, input_len=4096, output_len=16, concurrency=1, prefix_hit_rate=hit)
        sim = simulate(deployment(m, cl, cfg), cfg, SimConfig(concurrency=1, num_requests=5, warmup_requests=1))
        analytic = estimate_serve(m, cl, cfg).ttft_s
        assert sim.mean_ttft_s == pytest.approx(analytic, rel=0.02)
        ttft[hit] = sim.mean_ttft_s
    assert ttft[0.75] < 0.5 * ttft[0.0]  # a quarter of the tokens, each attending a longer context


def test_closed_loop_starts_at_independent_phases(catalog: Catalog) -> None:
    """Equal lengths keep whatever phases the start leaves. Clients ramped in over one latency lock into clusters
    (a long iteration collects more starts); started at uniform phases of their first request (the closed loop's
    steady state, ``stationary_start``, what ``simulate_closed_loop`` runs) the simulation's mean TTFT is the
    analytic one's (Llama 3.1 8B, tp 1, 512/128, max-batch 64, 64 clients; and the 70B at its limit, 606)."""
    from fmstack.perfmodel.inference import serve_curve
    from fmstack.perfmodel.inference_closed_loop import closed_loop_config, simulate_closed_loop

    cl = build_cluster(catalog, "p5.48xlarge", 1)
    for name, cfg, clients in (
        ("llama3.1-8b", ServeConfig(tp=1, input_len=512, output_len=128, max_batch=64), 64),
        ("llama3.1-70b", ServeConfig(tp=8, input_len=2048, output_len=256), 606),
    ):
        d = deployment(catalog.model(name), cl, cfg)
        curve = serve_curve(d, cfg, [float(clients)])
        latency = float(curve.latency_s[0])
        steady = simulate_closed_loop(d, cfg, clients, latency)
        ramped = simulate(d, cfg, replace(closed_loop_config(d, cfg, clients, latency), stationary_start=False))
        assert steady.mean_ttft_s == pytest.approx(float(curve.ttft_s[0]), rel=0.10)
        assert steady.mean_itl_s == pytest.approx(float(curve.itl_s[0]), rel=0.02)
        assert ramped.mean_ttft_s > 1.05 * steady.mean_ttft_s  # the ramp's clusters, frozen by equal lengths


def test_max_batch_does_not_shrink_the_kv_pool(setup: tuple[Deployment, ServeConfig]) -> None:
    """``--max-batch`` limits running sequences, not memory: the simulated KV pool is the memory's."""
    d, cfg = setup
    full = BatchingSim(d, cfg, SimConfig(concurrency=4))._kv_tokens_free
    capped = BatchingSim(d, replace(cfg, max_batch=4), SimConfig(concurrency=4))._kv_tokens_free
    assert capped == full > 4 * (cfg.input_len + cfg.output_len)
