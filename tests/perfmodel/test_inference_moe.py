"""MoE serving: routed experts priced at one expert's GEMM size (shared with training), the per-group roofline,
the token permutation traffic, and the attention precision of NVIDIA's NVFP4 DeepSeek-R1 checkpoint."""

from __future__ import annotations

import math

import pytest

from fmstack.catalog import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.perfmodel.efficiency import default_efficiency
from fmstack.perfmodel.inference import ServeConfig, deployment, memory_of
from fmstack.perfmodel.inference_kv import GIB
from fmstack.perfmodel.inference_step import Deployment, moe_permute_bytes, step_time
from fmstack.perfmodel.inference_validation import checkpoint_setup
from fmstack.perfmodel.modelconsts import expert_gemm_flops, model_consts

EXPERT = 3 * 7168 * 2048
"""DeepSeek-V3 routed expert: SwiGLU, hidden 7168, expert width 2048 (gate, up, down)."""


def _dsv3(catalog: Catalog, **kw: object) -> Deployment:
    cluster = build_cluster(catalog, "dgx-b200", 1)
    return Deployment(
        model=catalog.model("deepseek-v3"),
        cluster=cluster,
        efficiency=default_efficiency(cluster.gpu),
        **kw,  # type: ignore[arg-type]
    )


def test_expert_gemm_flops_is_one_experts_gemm(catalog: Catalog) -> None:
    mc = model_consts(catalog.model("deepseek-v3"))
    # 384 tokens on each of 8 EP GPUs, top-8 of 256 experts: 384 x 8 x 8 / 256 = 96 tokens reach one expert
    assert float(expert_gemm_flops(mc, 384.0, 8.0, 1.0)) == pytest.approx(2 * 96 * 7168 * 2048)
    # expert width split 4 ways (expert tensor parallelism) divides n
    assert float(expert_gemm_flops(mc, 384.0, 8.0, 4.0)) == pytest.approx(2 * 96 * 7168 * 512)


def test_attention_dp_decode_prices_experts_at_96_tokens_per_expert(catalog: Catalog) -> None:
    """3072 decode tokens on 8 B200s (attention DP, EP8, FP4): hand-calculated per-group roofline."""
    d = _dsv3(catalog, tp=8, ep=8, precision="fp4", kv_dtype="bf16", attention_dp=True)
    mc = d.mc
    parts = step_time(d, 3072.0, 2048.0)
    # experts: 58 MoE layers x 8 routed experts per token, 1/8 of the tokens' expert work on each GPU
    flops = 3072 * 2 * 58 * 8 * EXPERT / 8
    # B200 fp4 curve at 2 x 96 x 7168 x 2048 = 2.82 GFLOP: 0.17 + (0.27 - 0.17) x log10(2.82) = 0.2150
    eff = 0.17 + (0.27 - 0.17) * math.log10(2 * 96 * 7168 * 2048 / 1e9)
    assert eff == pytest.approx(0.2150, abs=1e-4)
    expert_compute = flops / (9000e12 * eff)
    # every expert touched; grouped GEMMs read at 0.694 of 8 TB/s (blog 24's B200 module, efficiency.yaml)
    expert_weights = 58 * 256 * EXPERT / 8 * (0.5 + 1 / 16) / (8000e9 * 0.694)
    assert expert_weights > expert_compute  # 8.3 ms vs 8.1 ms: weight-read bound (7.2 ms at the dense 0.8)
    # non-expert linear layers (replicated, each GPU runs 384 tokens) and the LM head, which the NVFP4 checkpoint
    # keeps in bf16 (ModelOpt excludes lm_head): its GEMM at the bf16 peak (2.25 PFLOP/s) and its own call size
    dense_flops = 3072 * (mc.fwd_linear_per_token - mc.fwd_head_per_token - mc.fwd_expert_per_token) / 8
    dense_eff = float(d.efficiency.gemm_at("fp4", 2.0 * 384 * 7168 * max(mc.ffn, mc.q_width)))
    head_flops = 384 * 2.0 * mc.vocab * 7168
    head_eff = float(d.efficiency.gemm_at("bf16", head_flops))
    dense_compute = dense_flops / (9000e12 * dense_eff) + head_flops / (2250e12 * head_eff)
    head = mc.vocab * mc.h
    dense_bytes = (mc.params_total - mc.params_embedding - mc.params_expert) * (0.5 + 1 / 16) + head * 2.0
    dense_weights = dense_bytes / (8000e9 * 0.8)
    expected = max(expert_compute, expert_weights) + max(dense_compute, dense_weights)
    assert float(parts.gemm_s + parts.weights_s) == pytest.approx(expected, rel=1e-6)


def test_attention_precision_prices_and_stores_attention_apart(catalog: Catalog) -> None:
    model = catalog.model("deepseek-v3")
    cluster = build_cluster(catalog, "dgx-b200", 1)
    base = {"tp": 8, "ep": 8, "precision": "fp4", "kv_dtype": "bf16", "attention_dp": True}
    fp4 = deployment(model, cluster, ServeConfig(**base))  # type: ignore[arg-type]
    mixed = deployment(model, cluster, ServeConfig(**base, attention_precision="bf16"))  # type: ignore[arg-type]
    # MLA per layer: q_a 7168x1536 (+1536 norm), q_b 1536x128x192, kv_a 7168x576 (+512 norm),
    # kv_b 512x128x256, o 128x128x7168; 61 layers
    attn = 61 * (7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 + 512 * 128 * 256 + 128 * 128 * 7168)
    assert mixed.attention_linear_params == attn
    extra = attn * (2.0 - (0.5 + 1 / 16)) / GIB  # replicated on every GPU under attention DP
    assert memory_of(mixed).weights_gib - memory_of(fp4).weights_gib == pytest.approx(extra)
    # TensorRT-LLM blog 3: 'weights and activation occupies about 80 GB memory for each GPU'
    assert 70.0 < memory_of(mixed).weights_gib * GIB / 1e9 < 80.0
    # bf16 attention GEMMs: 4x lower peak than fp4, so the decode iteration's linear time grows
    t_fp4, t_mixed = step_time(fp4, 3072.0, 2048.0), step_time(mixed, 3072.0, 2048.0)
    assert float(t_mixed.gemm_s + t_mixed.weights_s) > float(t_fp4.gemm_s + t_fp4.weights_s)


def test_checkpoint_setup_matches_the_nvfp4_deepseek_checkpoint_only() -> None:
    fields, notes = checkpoint_setup("DeepSeek-R1 (MoE)", "fp4")
    assert fields == {"attention_precision": "bf16"} and "blog" in notes[0]
    assert checkpoint_setup("DeepSeek-R1 (MoE)", "fp8") == ({}, [])
    assert checkpoint_setup("Llama 3.3 70B Instruct", "fp4") == ({}, [])


def test_moe_permutation_traffic_by_hand(catalog: Catalog) -> None:
    """Expand (read + write 8 copies of h in 2 B), finalize (read 8 copies, write h), fp32 router logits (12 B
    per expert): the training model's accounting less Megatron's chunk sort."""
    # DeepSeek-V3, attention DP + EP8: copies split 8 ways, each token's router and h on one GPU
    adp = _dsv3(catalog, tp=8, ep=8, precision="fp4", kv_dtype="bf16", attention_dp=True)
    assert moe_permute_bytes(adp) == pytest.approx(8 * 7168 * 2 * 3 / 8 + (2 * 7168 + 12 * 256) / 8)  # 45,184 B
    # experts split by TP (ep 1): every TP rank expands every copy at full h and repeats the router
    tp_experts = _dsv3(catalog, tp=8, ep=1, precision="fp8")
    assert moe_permute_bytes(tp_experts) == pytest.approx(8 * 7168 * 2 * 3 + 2 * 7168 + 12 * 256)  # 361,472 B
    # dense models have none, and the elementwise part of a DeepSeek decode step grows by exactly this traffic
    llama = build_cluster(catalog, "dgx-h100", 1)
    dense = Deployment(model=catalog.model("llama3.1-8b"), cluster=llama, efficiency=default_efficiency(llama.gpu))
    assert moe_permute_bytes(dense) == 0.0
    mc = adp.mc
    tokens = 3072.0
    extra = tokens * mc.moe_layers * moe_permute_bytes(adp) / (8000e9 * 0.8)
    act = (mc.top_k + mc.shared_experts) * mc.expert_ffn
    base = tokens * mc.layers * ((8 + 12) * mc.h / 8 + 6 * act / 8) / (8000e9 * 0.8)
    assert float(step_time(adp, tokens, 2048.0).elementwise_s) == pytest.approx(base + extra, rel=1e-9)


BLOG24_TRTLLM_GEN_US = {1: 26.78, 8: 57.68, 16: 86.55, 32: 117.20, 48: 133.54, 64: 141.68, 128: 161.87,
                        192: 168.23, 208: 169.34, 224: 169.24, 256: 172.17}  # fmt: skip
"""TensorRT-LLM tech blog 24 ('MoE as Dense GEMM'), 'Per-Rank MoE Module Latency', TRTLLM-Gen column: one B200,
DeepSeek-V3 routed MoE (256 experts, top-8, hidden 7168, NVFP4) sharded TP8; tokens -> microseconds."""


def _blog24_bytes(tokens: int) -> float:
    """Expert weight bytes one TP8 rank reads: experts touched x 3 x 7168 x (2048 / 8) x 0.5625 B."""
    return 256 * (1 - (1 - 8 / 256) ** tokens) * 3 * 7168 * 256 * (0.5 + 1 / 16)


def test_moe_module_constants_reproduce_the_measured_b200_module(catalog: Catalog) -> None:
    """24.8 us + bytes / (0.694 x 8 TB/s) is the least-squares line through blog 24's 11 sizes, within 7.2 us."""
    from fmstack.perfmodel.inference_step import MOE_LAYER_FIXED_S

    eff = default_efficiency(catalog.gpu("B200"))
    assert eff.expert_memory == 0.694 and eff.memory == 0.8
    bw = 8000e9 * eff.expert_memory  # 5.55 TB/s
    for tokens, measured_us in BLOG24_TRTLLM_GEN_US.items():
        predicted_us = (MOE_LAYER_FIXED_S + _blog24_bytes(tokens) / bw) * 1e6
        assert abs(predicted_us - measured_us) <= 7.2, tokens
    # the line itself, by normal equations over the 11 points: intercept 24.8 us, slope 1 / 5.55 TB/s
    xs = [_blog24_bytes(m) for m in BLOG24_TRTLLM_GEN_US]
    ys = [t * 1e-6 for t in BLOG24_TRTLLM_GEN_US.values()]
    n, sx, sy = len(xs), sum(xs), sum(ys)
    sxx, sxy = sum(x * x for x in xs), sum(x * y for x, y in zip(xs, ys, strict=True))
    slope = (n * sxy - sx * sy) / (n * sxx - sx * sx)
    assert (sy - slope * sx) / n == pytest.approx(MOE_LAYER_FIXED_S, abs=0.1e-6)
    assert 1 / slope / 8000e9 == pytest.approx(eff.expert_memory, abs=0.005)
    # Hopper has no grouped-GEMM measurement: its experts read at the dense fraction
    hopper = default_efficiency(catalog.gpu("H100"))
    assert hopper.grouped_memory is None and hopper.expert_memory == hopper.memory


def test_moe_layer_fixed_time_by_hand(catalog: Catalog) -> None:
    """58 MoE layers x 24.8 us per iteration for DeepSeek-V3 (any batch); none for a dense model."""
    d = _dsv3(catalog, tp=8, ep=8, precision="fp4", kv_dtype="bf16", attention_dp=True)
    for seqs in (1.0, 3072.0):
        assert float(step_time(d, seqs, 2048.0).moe_fixed_s) == pytest.approx(58 * 24.8e-6)
    assert "moe_layer_fixed" in step_time(d, 1.0, 2048.0).parts()
    h100 = build_cluster(catalog, "dgx-h100", 1)
    dense = Deployment(model=catalog.model("llama3.1-8b"), cluster=h100, efficiency=default_efficiency(h100.gpu))
    assert float(step_time(dense, 64.0, 1024.0).moe_fixed_s) == 0.0


BLOG18_EP8_US = {1: 49.9, 2: 49.5, 4: 49.5, 8: 49.0, 16: 51.1, 32: 50.9, 64: 56.4, 128: 69.8, 256: 103.8,
                 512: 181.2, 1024: 341.9, 2048: 634.4}  # fmt: skip
"""TensorRT-LLM tech blog 18 (one-sided AlltoAll over NVLink), 'ep_size=8' table: dispatch + combine latency on
GB200 NVL72, DeepSeek-V3 profile (hidden 7168, top-8), BF16; tokens per rank -> microseconds."""


def test_ep_exchange_reproduces_the_measured_nvlink5_dispatch_and_combine(catalog: Catalog) -> None:
    """Two modelled all-to-alls + 40.3 us per MoE layer: within 18 % of blog 18's EP8 table at every size; the
    40.3 us is the mean gap over 1..32 tokens, where bandwidth is negligible."""
    from fmstack.perfmodel.inference_step import EP_EXCHANGE_FIXED_S

    d = _dsv3(catalog, tp=8, ep=8, precision="fp4", kv_dtype="bf16", attention_dp=True)
    gaps = []
    for tokens, measured_us in BLOG18_EP8_US.items():
        # one MoE layer: 58 MoE of 61 layers, so the per-layer exchange is ep_comm / 58 at tokens x 8 in total
        one_layer_us = float(step_time(d, tokens * 8.0, 0.0).ep_comm_s) / 58 * 1e6
        assert abs(one_layer_us - measured_us) <= 0.18 * measured_us, tokens
        if tokens <= 32:
            gaps.append(measured_us - (one_layer_us - EP_EXCHANGE_FIXED_S * 1e6))
    assert sum(gaps) / len(gaps) == pytest.approx(EP_EXCHANGE_FIXED_S * 1e6, abs=0.1)
