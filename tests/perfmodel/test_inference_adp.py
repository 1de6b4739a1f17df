"""Attention DP priced at the busiest rank: the iteration of one prompt on one of eight ranks by hand, the
simulation's rank assignment (ranks in step under a burst of same-length requests, out of step under Poisson
arrivals), and the analytic open-loop mixture against that simulation."""

from __future__ import annotations

import numpy as np
import pytest

from fmstack.catalog import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.perfmodel.efficiency import default_efficiency
from fmstack.perfmodel.inference import ServeConfig, deployment, estimate_serve, serve_curve
from fmstack.perfmodel.inference_sim import BatchingSim, SimConfig
from fmstack.perfmodel.inference_step import Deployment, RankLoad, step_time

C_RANK, CTX, P = 384.0, 2048.0, 1024.0
PCTX = P * (P + 1.0) / 2.0
"""384 decodes per rank at 2,048 cached tokens (INF-040's batch) and one whole 1,024-token causal prompt."""


@pytest.fixture(scope="module")
def adp(catalog: Catalog) -> Deployment:
    """DeepSeek-R1 NVFP4 on a DGX B200: attention DP over 8 ranks, EP8, bf16 attention (INF-040's setup)."""
    cluster = build_cluster(catalog, "dgx-b200", 1)
    return Deployment(
        model=catalog.model("deepseek-v3"), cluster=cluster, efficiency=default_efficiency(cluster.gpu), tp=8, ep=8,
        precision="fp4", kv_dtype="bf16", attention_dp=True, attention_precision="bf16",
    )  # fmt: skip


def test_one_prompt_on_one_of_eight_ranks_costs_the_rank_with_the_prompt(adp: Deployment) -> None:
    """8 ranks of 384 decodes, one prompt on rank 0: the iteration is rank 0's time, whose attention holds the
    prompt's whole causal product; spread over the ranks (the mean rank) it would hold an eighth."""
    on_rank0 = np.array([1.0, 0, 0, 0, 0, 0, 0, 0])
    ranks = RankLoad(decode_seqs=np.full(8, C_RANK), decode_ctx=np.full(8, CTX), prefill_tokens=P * on_rank0,
                     prefill_token_ctx=PCTX * on_rank0, prefill_seqs=on_rank0)  # fmt: skip
    per_rank = step_time(adp, 8 * C_RANK, CTX, P, PCTX, 1.0, busiest=ranks).total_s
    with_prompt = step_time(adp, 8 * C_RANK, CTX, P, PCTX, 1.0, busiest=RankLoad(
        decode_seqs=C_RANK, decode_ctx=CTX, prefill_tokens=P, prefill_token_ctx=PCTX, prefill_seqs=1.0))  # fmt: skip
    without = step_time(adp, 8 * C_RANK, CTX, P, PCTX, 1.0, busiest=RankLoad(decode_seqs=C_RANK, decode_ctx=CTX))
    assert int(np.argmax(per_rank)) == 0 and float(per_rank[0]) == float(with_prompt.total_s)
    assert np.all(per_rank[1:] == float(without.total_s)) and float(without.total_s) < float(per_rank[0])
    # the prompt's attention on rank 0: n(n+1)/2 attended pairs x the model's core FLOPs per pair (61 layers, all
    # 128 heads on the one GPU) at the bf16 peak x the attention efficiency
    core = adp.mc.fwd_core_per_token_per_ctx
    peak = adp.cluster.gpu.bf16_dense_tflops * 1e12 * adp.efficiency.attention
    prompt_attention = float(with_prompt.attention_s - without.attention_s)
    assert prompt_attention == pytest.approx(PCTX * core / peak, rel=1e-12)
    # QK^T (2 x 192) and PV (2 x 128) per head and attended pair: 61 x 128 x 640 = 4,997,120 FLOPs; B200 bf16
    # 2,250 TFLOP/s x 0.40 = 900 TFLOP/s: 524,800 pairs take 2.91 ms on rank 0 while the other seven wait
    assert core == 61 * 128 * 640 and peak == pytest.approx(900e12)
    assert prompt_attention == pytest.approx(2.914e-3, rel=1e-3)
    mean = step_time(adp, 8 * C_RANK, CTX, P, PCTX, 1.0)  # no busiest given: each rank 1/8 of the prompt
    assert float(mean.attention_s - without.attention_s) == pytest.approx(PCTX * core / peak / 8, rel=1e-12)
    assert float(mean.total_s) < float(with_prompt.total_s)
    spread = RankLoad(decode_seqs=C_RANK, decode_ctx=CTX, prefill_tokens=P / 8, prefill_token_ctx=PCTX / 8,
                      prefill_seqs=1 / 8)  # fmt: skip
    assert float(step_time(adp, 8 * C_RANK, CTX, P, PCTX, 1.0, busiest=spread).total_s) == pytest.approx(
        float(mean.total_s), rel=1e-12
    )
    # the routed experts take every rank's tokens however the prompt is placed
    assert float(with_prompt.moe_fixed_s) == float(mean.moe_fixed_s)
    # every rank with a prompt (ranks in step): the same rank-side parts, only the experts see 8 prompts
    every = step_time(adp, 8 * C_RANK, CTX, 8 * P, 8 * PCTX, 8.0, busiest=RankLoad(
        decode_seqs=C_RANK, decode_ctx=CTX, prefill_tokens=P, prefill_token_ctx=PCTX, prefill_seqs=1.0))  # fmt: skip
    for part in ("attention_s", "kv_read_s", "ep_comm_s", "overhead_s"):
        assert getattr(every, part) == getattr(with_prompt, part), part


def test_busiest_is_ignored_without_attention_dp(catalog: Catalog) -> None:
    cluster = build_cluster(catalog, "dgx-h100", 1)
    d = Deployment(model=catalog.model("llama3.1-70b"), cluster=cluster, efficiency=default_efficiency(cluster.gpu),
                   tp=8, precision="fp8")  # fmt: skip
    a = step_time(d, 64.0, 1024.0, 512.0, 512 * 513 / 2, 1.0)
    b = step_time(d, 64.0, 1024.0, 512.0, 512 * 513 / 2, 1.0, busiest=RankLoad(decode_seqs=1.0, decode_ctx=1.0))
    assert a == b


def _small(catalog: Catalog, **load: float) -> tuple[Deployment, ServeConfig]:
    cfg = ServeConfig(tp=8, ep=8, precision="fp4", kv_dtype="bf16", input_len=1024, output_len=256,
                      attention_dp=True, attention_precision="bf16", max_num_tokens=1536, **load)  # type: ignore[arg-type]  # fmt: skip
    return deployment(catalog.model("deepseek-v3"), build_cluster(catalog, "dgx-b200", 1), cfg), cfg


def test_a_burst_of_same_length_requests_keeps_the_ranks_in_step(catalog: Catalog) -> None:
    """trtllm-bench's closed loop: 384 clients start together, every request 1024/256. The heap gives each
    rank 48; each rank admits one 1024-token prompt per iteration (max_num_tokens 1536), so all eight prefill
    in the same 48 of every ~256 iterations and the busiest rank is the mean one."""
    d, cfg = _small(catalog, concurrency=384)
    sim = BatchingSim(d, cfg, SimConfig(concurrency=384, num_requests=3 * 384, warmup_requests=384,
                                        cooldown_requests=384, chunked_prefill=False))  # fmt: skip
    burst = sim.run()
    ranks = np.array(sim.prompt_ranks)
    assert ranks[ranks > 0].mean() > 7.5  # when one rank prefills, (nearly) all do
    assert np.mean(ranks > 0) == pytest.approx(48 / 256, abs=0.01)
    # the same clients started over ~one request latency: the ranks fall out of step and wait on each other
    ramped = BatchingSim(d, cfg, SimConfig(concurrency=384, num_requests=8 * 384, warmup_requests=3 * 384,
                                           cooldown_requests=384, ramp_s=7.0, chunked_prefill=False))  # fmt: skip
    late = ramped.run()
    late_ranks = np.array(ramped.prompt_ranks)
    assert late_ranks[late_ranks > 0].mean() < 4.0
    assert late.mean_latency_s > 1.15 * burst.mean_latency_s


def test_open_loop_busiest_rank_mixture_matches_the_simulation(catalog: Catalog) -> None:
    """Poisson arrivals at 40 requests/s: the analytic mean iteration over k ~ Poisson(C / osl) prompts per
    iteration, ceil(k / 8) on the busiest rank, against the simulation that assigns and times every rank."""
    d, cfg = _small(catalog, request_rate_per_s=40.0)
    est = estimate_serve(d.model, d.cluster, cfg)
    sim = BatchingSim(d, cfg, SimConfig(request_rate_per_s=40.0, num_requests=6000, warmup_requests=1500,
                                        cooldown_requests=1500, chunked_prefill=False, seed=1)).run()  # fmt: skip
    assert est.itl_s == pytest.approx(sim.mean_itl_s, rel=0.05)  # 54.0 vs 53.9 ms
    assert est.latency_s == pytest.approx(sim.mean_latency_s, rel=0.05)  # 13.85 vs 13.83 s
    # TTFT: half an iteration in progress + the own prompt whole on its rank (max_num_tokens is per rank)
    assert est.ttft_s == pytest.approx(sim.mean_ttft_s, rel=0.10)  # 86 vs 92 ms
    # the mean rank carrying the mean prompt share in every iteration, at the same concurrency, is far off
    # (29 ms): the barrier is what costs
    c, isl, osl = est.concurrency, float(cfg.input_len), float(cfg.output_len)
    share = step_time(d, c, isl + osl / 2, c * isl / osl, c * isl * (isl + 1) / 2 / osl, c / osl).total_s
    assert float(share) < 0.6 * sim.mean_itl_s
    # the closed-loop curve (ranks in step: whole prompts on every rank in the same iterations, 34.5 ms) lies
    # between: whole prompts cost more than their mean share (convex roofline), unsynchronised ranks more still
    _, closed = _small(catalog, concurrency=round(est.concurrency))
    in_step = float(serve_curve(d, closed, np.array([est.concurrency])).itl_s[0])
    assert float(share) < in_step < sim.mean_itl_s


def test_closed_loop_own_prompt_iteration_carries_a_prompt_on_every_rank(adp: Deployment) -> None:
    """Closed loop the ranks run in step (``mean_iteration``): the iteration that admits a request admits one on
    every rank, so its experts take 8 prompts. With 8 clients and one output token in 10,000 per prompt, the other
    groups' count is binomial(0, q) = 0: the own iteration is exactly 8 prompts over the ranks, the request's rank
    one prompt next to its decodes (review of session 7: it was priced as one prompt for the whole engine)."""
    from fmstack.perfmodel.inference_mixture import own_prompt_time

    c = np.array([8.0])
    t = own_prompt_time(adp, c, CTX, P, PCTX, 10_000.0, 8192, open_loop=False)
    busy = RankLoad(decode_seqs=7.0 / 8.0, decode_ctx=CTX, prefill_tokens=P, prefill_token_ctx=PCTX, prefill_seqs=1.0)
    eight = step_time(adp, 7.0, CTX, 8 * P, 8 * PCTX, 8.0, busiest=busy).total_s
    assert float(t[0]) == pytest.approx(float(eight), rel=1e-12)
    one = step_time(adp, 7.0, CTX, P, PCTX, 1.0, busiest=busy).total_s
    assert float(eight) > float(one)  # the experts' share of 8 prompts
