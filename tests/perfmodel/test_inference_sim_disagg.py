"""The disaggregated simulation: hand-priced TTFT and ITL without queueing, determinism, and the two queues."""

from __future__ import annotations

import pytest

from fmstack.catalog import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel.inference import ServeConfig, deployment, max_concurrency
from fmstack.perfmodel.inference_disagg import kv_transfer_s
from fmstack.perfmodel.inference_sim import SimConfig
from fmstack.perfmodel.inference_sim_disagg import DisaggSim, simulate_disagg
from fmstack.perfmodel.inference_step import Deployment, step_time

ISL, OSL, CHUNK = 8192, 256, 2048


@pytest.fixture(scope="module")
def setup(catalog: Catalog) -> tuple[Deployment, ServeConfig, float]:
    model = catalog.model("llama3.1-70b")
    cluster = build_cluster(catalog, "p5.48xlarge", 1)
    cfg = ServeConfig(tp=4, precision="fp8", input_len=ISL, output_len=OSL, max_num_tokens=CHUNK)
    _, kv = kv_transfer_s(model, cluster, cfg, same_domain=True)
    return deployment(model, cluster, cfg), cfg, kv


def _sim(rate: float, seed: int = 0, n: int = 120) -> SimConfig:
    return SimConfig(request_rate_per_s=rate, num_requests=n, warmup_requests=10, seed=seed)


def test_alone_ttft_is_prefill_chunks_transfer_and_one_decode_step(
    setup: tuple[Deployment, ServeConfig, float],
) -> None:
    d, cfg, kv = setup
    # 8192 prompt tokens in four 2048-token prefill-only iterations; chunk k attends 2048 k + 1 .. 2048 (k + 1)
    prefill = sum(
        float(step_time(d, 0.0, 0.0, float(CHUNK), CHUNK * CHUNK * k + CHUNK * (CHUNK + 1) / 2, float(k == 3)).total_s)
        for k in range(4)
    )
    first = float(step_time(d, 1.0, float(ISL)).total_s)  # the decode replica's first iteration, context 8192
    r = simulate_disagg(d, cfg, _sim(1e-4), prefill_replicas=1, decode_replicas=1, kv_transfer_s=kv)
    # times are differences of clock readings near 1e6 s (1e-4 req/s): float64 rounding of ~1e-10 s each
    assert r.ttft_s[50] == pytest.approx(prefill + kv + first, abs=1e-8)
    # 1e-4 req/s: no two requests overlap; the gap before token t is an iteration at context 8192 + t - 1,
    # t = 2 .. 256: the median is t = 129
    assert r.itl_s[50] == pytest.approx(float(step_time(d, 1.0, float(ISL + 128)).total_s), abs=1e-8)
    assert kv > 0


def test_itl_is_the_decode_only_step_at_the_simulated_batch(setup: tuple[Deployment, ServeConfig, float]) -> None:
    """Under load every gap is one decode-only iteration of between 1 and the replica's cap sequences."""
    d, cfg, kv = setup
    r = simulate_disagg(d, cfg, _sim(3.0), prefill_replicas=3, decode_replicas=1, kv_transfer_s=kv)
    lo = float(step_time(d, 1.0, float(ISL)).total_s)
    assert r.itl_s[50] > lo  # batched: more than one sequence per iteration
    full = float(step_time(d, float(max_concurrency(d, cfg)), float(ISL + OSL)).total_s)
    assert r.itl_s[99] <= full  # no gap longer than a decode-only iteration of the whole pool at the longest context


def test_same_seed_same_result(setup: tuple[Deployment, ServeConfig, float]) -> None:
    d, cfg, kv = setup
    runs = [simulate_disagg(d, cfg, _sim(3.0, seed), prefill_replicas=2, decode_replicas=1, kv_transfer_s=kv)
            for seed in (7, 7, 8)]  # fmt: skip
    assert runs[0] == runs[1]
    assert runs[0].ttft_s != runs[2].ttft_s


def test_more_prefill_replicas_lower_p99_ttft_when_prompt_bound(setup: tuple[Deployment, ServeConfig, float]) -> None:
    d, cfg, kv = setup
    p99 = [simulate_disagg(d, cfg, _sim(3.0), prefill_replicas=p, decode_replicas=1, kv_transfer_s=kv).ttft_s[99]
           for p in (2, 3, 4)]  # fmt: skip
    assert p99[0] > p99[1] > p99[2]


def test_full_decode_pool_makes_prompts_wait(setup: tuple[Deployment, ServeConfig, float]) -> None:
    d, cfg, kv = setup
    small = ServeConfig(tp=4, precision="fp8", input_len=ISL, output_len=OSL, max_num_tokens=CHUNK, max_batch=4)
    roomy = DisaggSim(d, cfg, _sim(3.0), prefill_replicas=4, decode_replicas=1, kv_transfer_s=kv)
    tight = DisaggSim(d, small, _sim(3.0), prefill_replicas=4, decode_replicas=1, kv_transfer_s=kv)
    a, b = roomy.run(), tight.run()
    assert max(roomy.slot_wait_s) == 0.0
    # 4 slots of ~2.6 s each serve ~1.5 req/s of the 3 offered: the queue for a slot grows
    assert max(tight.slot_wait_s) > 1.0
    assert b.ttft_s[99] > a.ttft_s[99] + 1.0
    assert b.itl_s[99] < a.itl_s[99]  # smaller decode batches


@pytest.mark.parametrize("pools", [(0, 1), (1, 0)])
def test_a_pool_of_none_is_refused(setup: tuple[Deployment, ServeConfig, float], pools: tuple[int, int]) -> None:
    d, cfg, kv = setup
    with pytest.raises(InputError, match="at least one prefill and one decode"):
        simulate_disagg(d, cfg, _sim(1.0), prefill_replicas=pools[0], decode_replicas=pools[1], kv_transfer_s=kv)


@pytest.mark.parametrize(("servers", "rho"), [(1, 0.5), (1, 0.85), (2, 0.7), (4, 0.92), (8, 0.5), (8, 0.85)])
def test_kingman_bounds_the_simulated_p99_prefill_wait(catalog: Catalog, servers: int, rho: float) -> None:
    """8192-token prompts (one at a time per prefill replica: deterministic service, M/D/c) at utilisation ``rho``:
    the p99 of the simulated queue waits stays under Kingman's bound on the equivalent E_c/D/1 queue. Measured
    (seed 1, 2000 requests): the bound is 1.02-1.77x the simulated p99, tightest for one replica at low load; the
    M/M/c Erlang-C tail is 2.0-3.0x (not used)."""
    from fmstack.perfmodel.inference_disagg import kingman_wait_quantile_s, prefill_alone_s
    from fmstack.perfmodel.inference_sim_disagg import pool_stats

    cluster = build_cluster(catalog, "p5.48xlarge", 1)
    cfg = ServeConfig(tp=2, precision="fp8", input_len=ISL, output_len=2, max_num_tokens=CHUNK)
    d = deployment(catalog.model("llama3.1-70b"), cluster, cfg)
    service = prefill_alone_s(d, cfg)
    rate = rho * servers / service
    sim = DisaggSim(d, cfg, SimConfig(request_rate_per_s=rate, num_requests=2000, warmup_requests=200, seed=1),
                    prefill_replicas=servers, decode_replicas=4, kv_transfer_s=0.0)  # fmt: skip
    sim.run()
    stats = pool_stats(sim)
    assert stats.prefill_utilisation == pytest.approx(rho, abs=0.05)
    bound = kingman_wait_quantile_s(rate, service, servers)
    assert stats.prefill_wait_p99_s <= bound <= 1.8 * stats.prefill_wait_p99_s


def test_pool_stats_of_a_load_the_split_cannot_take(setup: tuple[Deployment, ServeConfig, float]) -> None:
    # 1e9 requests/s arrive within microseconds: measured over the arrivals alone the decode pool read 0.0 sequences
    # and 0.0 slots in use while every prompt waited for a slot; measured until the last completion, the decode
    # slots (max_batch 4) are full and the decode pool is the bottleneck
    from fmstack.perfmodel.inference_sim_disagg import pool_stats

    d, _, kv = setup
    small = ServeConfig(tp=4, precision="fp8", input_len=ISL, output_len=OSL, max_num_tokens=CHUNK, max_batch=4)
    sim = DisaggSim(d, small, _sim(1e9, n=60), prefill_replicas=4, decode_replicas=1, kv_transfer_s=kv)
    sim.run()
    stats = pool_stats(sim)
    assert stats.decode_slots == 4 and stats.decode_slots_in_use > 3.5 and stats.decode_batch_mean > 3.5
    assert stats.bottleneck == "decode" and stats.slot_wait_share > 0.9
