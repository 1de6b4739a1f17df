"""Serving's closing loop: the model's price of the reference decoder's steps, and their measurement (CPU here;
the H100 numbers are in benchmarks/results/decode-loop-h100-2026-11-24.md)."""

from __future__ import annotations

import pytest

from fmstack.bench.decode_loop import kernel_group, measure_steps, parse_points
from fmstack.bench.predict_decode import price_decode, price_prefill
from fmstack.catalog import load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel.inference_step import ITERATION_OVERHEAD_S, LAYER_OVERHEAD_S
from fmstack.workloads.decoder import DecoderConfig

CAT = load_catalog()
ARCH = CAT.model("llama3.1-8b")
H100 = build_cluster(CAT, "p5.48xlarge", 1)


def test_batch_one_decode_is_the_weight_read_by_hand() -> None:
    """Llama 3.1 8B, batch 1, bf16 on one H100: every weight but the embedding (8,030,261,248 - 128,256 x 4,096
    = 7,504,924,672 parameters, 2 B each) at 0.8 (the Hopper default) x 3,350 GB/s = 5.6007 ms."""
    p = price_decode(ARCH, H100, None, batch=1, attended=2049)
    assert p.parts_s["weight_reads"] == pytest.approx(2 * 7_504_924_672 / (0.8 * 3350e9), rel=1e-4)
    assert p.top() == "weight_reads"
    # the graph-replay price drops the engine's host term and keeps the per-layer launch gaps
    assert p.gpu_s == pytest.approx(p.total_s - ITERATION_OVERHEAD_S)
    assert p.parts_s["overhead"] - ITERATION_OVERHEAD_S == pytest.approx(32 * LAYER_OVERHEAD_S)


def test_kv_reads_grow_with_batch_times_context() -> None:
    """The KV part is batch x attended x 128 KiB (32 layers x 2 x 8 heads x 128 x 2 B) at 0.8 x 3,350 GB/s."""
    p = price_decode(ARCH, H100, None, batch=64, attended=2049)
    kv = 64 * 2049 * 131_072 + 64 * 131_072  # read the cache, write the new token's K and V
    assert p.parts_s["kv_cache_reads"] == pytest.approx(kv / (0.8 * 3350e9), rel=1e-6)
    assert p.top() == "kv_cache_reads"


def test_prefill_is_compute_bound_and_counts_the_causal_half() -> None:
    short, long = (price_prefill(ARCH, H100, None, batch=1, prompt_len=n) for n in (2048, 8192))
    assert short.top() == long.top() == "gemm_compute"
    assert long.gpu_s > 4 * short.gpu_s  # the linear layers scale 4x, causal attention 16x


def test_bad_sizes_name_the_field() -> None:
    with pytest.raises(InputError, match=r"^batch: must be > 0, got 0$"):
        price_decode(ARCH, H100, None, batch=0, attended=10)
    with pytest.raises(InputError, match=r"^prompt-len: must be > 0, got -1$"):
        price_prefill(ARCH, H100, None, batch=1, prompt_len=-1)
    with pytest.raises(InputError, match=r"^model: deepseek-v3 is a mixture of experts"):
        price_decode(CAT.model("deepseek-v3"), H100, None, batch=1, attended=10)
    with pytest.raises(InputError, match=r"^decode: '8y2' is not BATCHxCONTEXT"):
        parse_points("1x2,8y2", "decode")
    assert parse_points(" 1x2048, 64x4096 ", "decode") == [(1, 2048), (64, 4096)]


def test_kernel_names_fall_in_groups() -> None:
    assert kernel_group("void pytorch_flash::flash_fwd_splitkv_kernel<...>") == "attention"
    assert kernel_group("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64") == "gemm"
    assert kernel_group("nvjet_tst_64x8_64x16_4x1_v_bz_splitK_TNT") == "gemm"
    assert kernel_group("void at::native::vectorized_elementwise_kernel<4, ...>") == "other"
    # names seen on the H100 (torch 2.11): cuDNN's SDPA and its split-KV reduction are attention; Inductor's fused
    # kernels name every op they fused, a rotary kernel beside attention included, and are not attention
    assert (
        kernel_group("cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_3_64x64x128_4x1x1") == "attention"
    )
    assert kernel_group("void cudnn::fusion::lean_reduction_kernel<...>") == "attention"
    name = "triton_poi_fused__scaled_dot_product_cudnn_attention__unsafe_view_add_cat_mul_neg_slice_transpose_view_3"
    assert kernel_group(name) == "other"
    assert kernel_group("triton_tem_fused_mm_0") == "gemm"


def test_measure_steps_on_cpu() -> None:
    pytest.importorskip("torch")
    cfg = DecoderConfig(vocab_size=64, hidden_size=32, num_layers=1, num_heads=4, num_kv_heads=2, head_dim=8,
                        ffn_hidden_size=48)  # fmt: skip
    seen = []
    points = measure_steps(cfg, device="cpu", dtype="fp32", decode=[(2, 16)], prefill=[(1, 8)],
                           attention=("sdpa", "matmul"), min_time_s=0.001, trials=1, on_point=seen.append)  # fmt: skip
    assert [(p.kind, p.attention) for p in points] == [("decode", "sdpa"), ("decode", "matmul"), ("prefill", "sdpa")]
    assert seen == points
    dec = points[0]
    assert dec.attended == 17 and dec.kv_cache_bytes == 2 * 1 * 2 * 17 * 16 * 4
    assert all(p.kernel_s > 0 and p.eager_s > 0 and p.kernels_s == {} for p in points)
    with pytest.raises(InputError, match=r"^attention: unknown 'spda'; allowed: sdpa, matmul$"):
        measure_steps(cfg, device="cpu", decode=[(1, 4)], attention=("spda",))  # type: ignore[arg-type]
