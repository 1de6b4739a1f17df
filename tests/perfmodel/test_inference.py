"""Serving model: KV cache and weights by hand, the roofline iteration, the curve's invariants, bad input."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from fmstack.catalog import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel.inference import ServeConfig, deployment, estimate_serve, mean_iteration, serve_curve
from fmstack.perfmodel.inference_kv import kv_bytes_per_token, serve_memory
from fmstack.perfmodel.inference_step import _comm, _comm_lookup, step_time
from fmstack.perfmodel.modelconsts import model_consts

GIB = 2**30


def test_kv_cache_llama31_70b_128k_by_hand(catalog: Catalog) -> None:
    # 2 (K and V) x 80 layers x 8 kv heads x 128 head dim x 2 bytes (bf16) x 131072 tokens = 40 GiB exactly
    m = catalog.model("llama3.1-70b")
    per_token = kv_bytes_per_token(m, 2.0)
    assert per_token == 2 * 80 * 8 * 128 * 2 == 327_680
    assert per_token * 131_072 / GIB == 40.0
    assert kv_bytes_per_token(m, 1.0) * 131_072 / GIB == 20.0  # fp8 KV halves it


def test_kv_cache_mla_caches_the_latent(catalog: Catalog) -> None:
    # DeepSeek-V2/V3: (kv_lora_rank 512 + rope 64) per layer per token, 61 layers, 2 bytes = 70,272 B
    assert kv_bytes_per_token(catalog.model("deepseek-v3"), 2.0) == 61 * (512 + 64) * 2


def test_kv_cache_counts_every_copy_it_keeps(catalog: Catalog) -> None:
    """``kv_cache_gib`` is what the running sequences take of ``kv_pool_gib``: MLA's latent (no heads to split) sits
    on all 8 TP GPUs; at tp 16 each of llama3.1-70b's 8 KV heads sits on 2 GPUs; attention DP keeps a sequence on one
    rank. A full pool is full (was 1/8 of the DeepSeek-V3 pool and 1/2 at tp 16)."""
    h100 = build_cluster(catalog, "p5en.48xlarge", 1)
    cfg = ServeConfig(tp=8, ep=8, precision="fp8", kv_dtype="fp8", input_len=1000, output_len=1000, concurrency=100)
    est = estimate_serve(catalog.model("deepseek-v3"), h100, cfg)
    assert est.running == 100
    # 100 sequences x 2000 tokens x 61 x 576 B (fp8 latent) x 8 GPUs
    assert est.kv_cache_gib == pytest.approx(100 * 2000 * 61 * 576 * 8 / GIB)
    adp = estimate_serve(catalog.model("deepseek-v3"), h100, replace(cfg, attention_dp=True))
    assert adp.kv_cache_gib == pytest.approx(100 * 2000 * 61 * 576 / GIB)
    two = build_cluster(catalog, "p5.48xlarge", 2)
    tp16 = estimate_serve(catalog.model("llama3.1-70b"), two,
                          ServeConfig(tp=16, input_len=2048, output_len=256, concurrency=64))  # fmt: skip
    assert tp16.kv_cache_gib == pytest.approx(2 * 64 * 2304 * 327_680 / GIB) == 90.0


def test_paged_max_concurrency_by_hand(catalog: Catalog) -> None:
    m = catalog.model("llama3.1-70b")
    mem = serve_memory(m, model_consts(m), hbm_gib=80e9 / GIB, tp=8, pp=1, precision="bf16", kv_dtype="bf16")
    # bf16 weights over 8 GPUs, 4 GiB reserve, 90 % of the rest for the KV pool; kv heads split 8 ways
    assert mem.weights_gib == pytest.approx(model_consts(m).params_total * 2 / 8 / GIB)
    assert mem.kv_pool_gib == pytest.approx((80e9 / GIB - mem.weights_gib - 4.0) * 0.9)
    assert mem.kv_bytes_per_token_gpu == 327_680 / 8
    # a 2304-token sequence holds 144 blocks of 16 tokens
    assert mem.max_concurrency(2304) == mem.kv_tokens // 2304
    assert mem.max_concurrency(2305) == mem.kv_tokens // (145 * 16)


def test_decode_at_batch_one_reads_every_weight(catalog: Catalog) -> None:
    # Llama 3.1 8B bf16 on one H100: linear weights 6,979,588,096 x 2 B + LM head 128256 x 4096 x 2 B
    # = 15,009,849,344 B at 3.35 TB/s x 0.8 (default memory efficiency) = 5.6007 ms
    m = catalog.model("llama3.1-8b")
    d = deployment(m, build_cluster(catalog, "p5.48xlarge", 1), ServeConfig(tp=1))
    parts = step_time(d, 1.0, 128.0)
    assert float(parts.weights_s) == pytest.approx(15_009_849_344 / 2.68e12, rel=1e-6)
    assert float(parts.gemm_s) == 0.0  # memory-bound: the compute part is not the binding one
    assert float(parts.total_s) == pytest.approx(sum(float(v) for v in parts.parts().values()))


def test_prefill_is_compute_bound_and_scales_with_tokens(catalog: Catalog) -> None:
    d = deployment(catalog.model("llama3.1-70b"), build_cluster(catalog, "p5.48xlarge", 1), ServeConfig(tp=8))
    one = step_time(d, 0.0, 0.0, 4096.0, 4096 * 4097 / 2, 1.0)
    assert float(one.weights_s) == 0.0 and float(one.gemm_s) > 0.0
    two = step_time(d, 0.0, 0.0, 8192.0, 2 * 4096 * 4097 / 2, 2.0)
    assert 1.8 < float(two.gemm_s) / float(one.gemm_s) < 2.05  # linear FLOPs, slightly better efficiency


def test_tabulated_collectives_match_the_collectives_model(catalog: Catalog) -> None:
    d = deployment(catalog.model("llama3.1-70b"), build_cluster(catalog, "p5.48xlarge", 1), ServeConfig(tp=8))
    sizes = np.logspace(3.0, 10.0, 777)
    exact = _comm("all_reduce", sizes, 8, 8, d.cluster)
    assert np.max(np.abs(_comm_lookup(d, "all_reduce", sizes) / exact - 1.0)) < 0.01


def test_curve_vectorised_equals_one_point_at_a_time(catalog: Catalog) -> None:
    m = catalog.model("llama3.1-70b")
    cl = build_cluster(catalog, "p5.48xlarge", 1)
    cfg = ServeConfig(tp=8, input_len=2048, output_len=256)
    d = deployment(m, cl, cfg)
    conc = np.array([1.0, 7.0, 64.0, 300.0])
    curve = serve_curve(d, cfg, conc)
    for i, c in enumerate(conc):
        one = estimate_serve(m, cl, ServeConfig(tp=8, input_len=2048, output_len=256, concurrency=int(c)))
        assert one.ttft_s == pytest.approx(curve.ttft_s[i], rel=1e-12)
        assert one.itl_s == pytest.approx(curve.itl_s[i], rel=1e-12)
        assert one.output_tokens_per_s == pytest.approx(curve.output_tokens_per_s[i], rel=1e-12)


def test_mean_iteration_is_the_mixture_of_whole_prompt_iterations(catalog: Catalog) -> None:
    """16 running clients, 512/64 tokens: 16 / 64 = 0.25 prompts per iteration. The engine runs whole prompts,
    so an iteration carries k = 0, 1, 2 ... of them; closed loop each client admits one every 64 iterations at
    its own phase, k binomial(16, 1/64): the mean iteration is 0.7773 T(0) + 0.1974 T(1) + 0.0235 T(2) +
    0.0017 T(3) + ..., not T(0.25 of a prompt); the roofline is convex in the prompt tokens (decode-only reads
    weights, a prompt computes), so the mixture is longer. Open loop (Poisson arrivals) k is Poisson(0.25)."""
    m = catalog.model("llama3.1-8b")
    cfg = ServeConfig(tp=1, input_len=512, output_len=64)
    d = deployment(m, build_cluster(catalog, "p5.48xlarge", 1), cfg)
    c, new, osl = 16.0, 512.0, 64.0
    ctx, pctx = new + osl / 2, new * (new + 1) / 2

    def t(k: float) -> float:
        return float(step_time(d, c, ctx, k * new, k * pctx, k).total_s)

    pk = [math.comb(16, k) * (1 / 64) ** k * (63 / 64) ** (16 - k) for k in range(17)]
    assert pk[:4] == pytest.approx([0.7773, 0.1974, 0.0235, 0.0017], abs=1e-4)
    by_hand = sum(p * t(k) for k, p in enumerate(pk))
    mixture = float(mean_iteration(d, np.array([c]), ctx, new, pctx, osl, 8192, open_loop=False).total_s[0])
    assert mixture == pytest.approx(by_hand, rel=1e-12)
    assert mixture > t(0.25)  # Jensen: the mean prompt share in every iteration is cheaper
    # the curve's throughput is Little's law on that mixture: 16 requests per 64 mixture iterations
    curve = serve_curve(d, cfg, [c])
    assert float(curve.requests_per_s[0]) == pytest.approx(c / (osl * by_hand), rel=1e-12)
    # open loop: Poisson(0.25); the parts add up to the mixture's total
    poisson = [math.exp(-0.25) * 0.25**k / math.factorial(k) for k in range(12)]
    assert poisson[:4] == pytest.approx([0.7788, 0.1947, 0.0243, 0.0020], abs=1e-4)
    parts = mean_iteration(d, np.array([c]), ctx, new, pctx, osl, 8192, open_loop=True)
    assert float(parts.total_s[0]) == pytest.approx(sum(p * t(k) for k, p in enumerate(poisson)), rel=1e-12)
    assert sum(float(v[0]) for v in parts.parts().values()) == pytest.approx(float(parts.total_s[0]), rel=1e-12)
    # max_num_tokens 256: a 512-token prompt comes in 2 chunks of 256, each client has a chunk in 2 of 64
    # iterations; the 16 decode tokens leave 240, floored at one chunk (256), so k >= 2 chunks spill into k
    # iterations of one chunk each, in place of decode-only ones
    pk3 = [math.comb(16, k) * (2 / 64) ** k * (62 / 64) ** (16 - k) for k in range(17)]

    def spilled(k: int) -> float:
        m = max(1, k)
        one = float(step_time(d, c, ctx, k * 256 / m, k * pctx / 2 / m, k / 2 / m).total_s)
        return m * one - (m - 1) * t(0)

    halves = float(mean_iteration(d, np.array([c]), ctx, new, pctx, osl, 256, open_loop=False).total_s[0])
    chunks = sum(p * spilled(k) for k, p in enumerate(pk3))
    assert halves == pytest.approx(chunks, rel=1e-12)
    # one client of one output token: every iteration is its prompt's
    one = float(mean_iteration(d, np.array([1.0]), ctx, new, pctx, 1.0, 8192, open_loop=False).total_s[0])
    assert one == float(step_time(d, 1.0, ctx, new, pctx, 1.0).total_s)


def test_littles_law_and_monotone_throughput(catalog: Catalog) -> None:
    m = catalog.model("llama3.1-8b")
    cl = build_cluster(catalog, "p5.48xlarge", 1)
    cfg = ServeConfig(tp=1, input_len=1000, output_len=500)
    curve = serve_curve(deployment(m, cl, cfg), cfg, np.arange(1, 400, dtype=np.float64))
    # closed loop: clients = throughput x time in the system, also for the clients that queue (272 fit here)
    np.testing.assert_allclose(curve.requests_per_s * curve.latency_s, curve.concurrency, rtol=1e-12)
    inside = curve.concurrency <= curve.running
    assert np.all(np.diff(curve.output_tokens_per_s[inside]) > 0)
    assert np.all(np.diff(curve.itl_s[inside]) > 0)
    # latency = TTFT + (output_len - 1) x ITL
    np.testing.assert_allclose(curve.latency_s, curve.ttft_s + 499 * curve.itl_s, rtol=1e-9)


def test_beyond_memory_clients_queue(catalog: Catalog) -> None:
    m = catalog.model("llama3.1-70b")
    cl = build_cluster(catalog, "p5.48xlarge", 1)
    cfg = ServeConfig(tp=8, input_len=8192, output_len=1024)
    top = estimate_serve(m, cl, cfg)
    over = estimate_serve(
        m, cl, ServeConfig(tp=8, input_len=8192, output_len=1024, concurrency=2 * top.max_concurrency)
    )
    assert over.running == top.max_concurrency
    assert over.output_tokens_per_s == pytest.approx(top.output_tokens_per_s)
    assert over.latency_s == pytest.approx(2 * top.latency_s, rel=1e-9)  # Little's law with twice the clients


def test_fp8_weights_and_prefix_cache(catalog: Catalog) -> None:
    m = catalog.model("llama3.1-70b")
    cl = build_cluster(catalog, "p5.48xlarge", 1)
    bf16 = estimate_serve(m, cl, ServeConfig(tp=8, concurrency=1))
    fp8 = estimate_serve(m, cl, ServeConfig(tp=8, precision="fp8", concurrency=1))
    assert fp8.weights_gib_per_gpu < 0.55 * bf16.weights_gib_per_gpu
    assert fp8.config.kv == "fp8" and fp8.kv_bytes_per_token == bf16.kv_bytes_per_token / 2
    assert fp8.itl_s < bf16.itl_s
    cached = estimate_serve(m, cl, ServeConfig(tp=8, concurrency=1, prefix_hit_rate=0.9))
    assert cached.ttft_s < 0.3 * bf16.ttft_s


def test_bad_input_names_the_field(catalog: Catalog) -> None:
    m = catalog.model("llama3.1-8b")
    cl = build_cluster(catalog, "p5.48xlarge", 1)
    with pytest.raises(InputError, match="output-len"):
        estimate_serve(m, cl, ServeConfig(output_len=0))
    with pytest.raises(InputError, match=r"tp\(64\) must divide num_heads\(32\)"):
        estimate_serve(m, build_cluster(catalog, "p5.48xlarge", 8), ServeConfig(tp=64))
    with pytest.raises(InputError, match="does not fit"):
        estimate_serve(catalog.model("llama3.1-405b"), cl, ServeConfig(tp=1))


def test_max_batch_below_one_is_refused_by_name(catalog: Catalog) -> None:
    cl = build_cluster(catalog, "p5.48xlarge", 1)
    with pytest.raises(InputError, match=r"^max-batch: must be >= 1, got 0$"):  # was "tp: ... does not fit"
        estimate_serve(catalog.model("llama3.1-70b"), cl, ServeConfig(tp=8, concurrency=64, max_batch=0))


def test_does_not_fit_says_what_is_compared(catalog: Catalog) -> None:
    """70B at tp 2 on H100: the weights fit, one 61,000-token sequence's KV does not fit the pool."""
    cl = build_cluster(catalog, "p5.48xlarge", 1)
    hbm = cl.gpu.hbm_gib
    with pytest.raises(InputError, match=r"^tp: llama3.1-70b does not fit at tp\(2\) \* pp\(1\)") as err:
        estimate_serve(catalog.model("llama3.1-70b"), cl, ServeConfig(tp=2, input_len=60_000, output_len=1000))
    weights = 70_553_706_496 * 2 / 2 / 2**30  # bf16 over 2 GPUs: 65.7 GiB
    left = hbm - weights - 4.0  # the serving reserve
    pool = 0.9 * left
    # KV per token per GPU: 2 (K, V) x 80 layers x 8 kv heads x 128 x 2 B / 2 GPUs = 160 KiB; 61,008 tokens in blocks
    need = 61_008 * 2 * 80 * 8 * 128 * 2 / 2 / 2**30
    assert pool < need
    msg = err.value.message
    for text in (
        f"of {hbm:.1f} GiB per GPU",
        f"weights take {weights:.1f} GiB",
        "reserve 4.0 GiB",
        f"leaving {left:.1f} GiB",
        f"90%: {pool:.2f} GiB",
        f"the {need:.2f} GiB of one 61000-token sequence",
    ):
        assert text in msg, (text, msg)


def test_request_rate_mode_is_littles_law(catalog: Catalog) -> None:
    m = catalog.model("llama3.1-70b")
    cl = build_cluster(catalog, "p5.48xlarge", 1)
    e = estimate_serve(m, cl, ServeConfig(tp=8, input_len=2048, output_len=256, request_rate_per_s=5.0))
    assert e.requests_per_s == 5.0 and e.output_tokens_per_s == 5.0 * 256
    assert e.concurrency == pytest.approx(5.0 * e.latency_s, rel=1e-3)  # L = lambda W
    slow = estimate_serve(m, cl, ServeConfig(tp=8, input_len=2048, output_len=256, request_rate_per_s=0.01))
    one = estimate_serve(m, cl, ServeConfig(tp=8, input_len=2048, output_len=256, concurrency=1))
    assert slow.latency_s == one.latency_s  # requests do not overlap
    with pytest.raises(InputError, match="exceeds one replica's capacity"):
        estimate_serve(m, cl, ServeConfig(tp=8, input_len=2048, output_len=256, request_rate_per_s=1000.0))
    with pytest.raises(InputError, match="not both"):
        estimate_serve(m, cl, ServeConfig(tp=8, concurrency=4, request_rate_per_s=1.0))


def test_sum_of_ceilings_closed_form() -> None:
    """The place-in-the-spill average of ``own_prompt_time`` in closed form equals the explicit sum (the explicit
    form built an r x points matrix: 3x slower plan serve)."""
    import math

    import numpy as np

    from fmstack.perfmodel.inference_mixture import _sum_ceil

    r, s = np.meshgrid(np.arange(1.0, 41.0), np.arange(1.0, 41.0))
    explicit = np.array(
        [
            sum(math.ceil(j * sj / rj) for j in range(1, int(rj) + 1))
            for rj, sj in zip(r.ravel(), s.ravel(), strict=True)
        ]
    )
    assert np.array_equal(_sum_ceil(r.ravel(), s.ravel()), explicit.astype(np.float64))
