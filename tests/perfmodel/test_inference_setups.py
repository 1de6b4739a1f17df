"""Serving setups the validation rows need: per-query-head KV reads, attention data parallelism, absorbed MLA."""

from __future__ import annotations

import pytest

from fmstack.catalog import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel.efficiency import default_efficiency
from fmstack.perfmodel.inference import ServeConfig, deployment, memory_of
from fmstack.perfmodel.inference_kv import KV_BYTES, kv_bytes_per_token
from fmstack.perfmodel.inference_step import Deployment, decode_core_per_ctx, kv_read_factor, step_time


def _dep(catalog: Catalog, model: str, system: str = "dgx-h100", **kw: object) -> Deployment:
    cluster = build_cluster(catalog, system, 1)
    return Deployment(model=catalog.model(model), cluster=cluster, efficiency=default_efficiency(cluster.gpu), **kw)  # type: ignore[arg-type]


def test_kv_read_factor_is_the_query_heads_per_kv_head_on_a_gpu(catalog: Catalog) -> None:
    # Llama 2 70B: 64 query heads, 8 KV heads. TP2: 32 query heads and 4 KV heads per GPU -> 8 reads each.
    assert kv_read_factor(_dep(catalog, "llama2-70b", tp=2, gqa_kv_sharing=False)) == 8.0
    # TP8: 8 query heads and 1 KV head per GPU -> 8
    assert kv_read_factor(_dep(catalog, "llama2-70b", tp=8, gqa_kv_sharing=False)) == 8.0
    assert kv_read_factor(_dep(catalog, "llama2-70b", tp=2)) == 1.0
    assert kv_read_factor(_dep(catalog, "llama2-7b", gqa_kv_sharing=False)) == 1.0  # MHA
    assert kv_read_factor(_dep(catalog, "deepseek-v3", tp=8, gqa_kv_sharing=False)) == 1.0  # MLA latent


def test_per_query_head_reads_multiply_the_decode_kv_bytes(catalog: Catalog) -> None:
    shared = _dep(catalog, "llama2-70b", tp=2, precision="fp8", kv_dtype="fp8")
    per_head = _dep(catalog, "llama2-70b", tp=2, precision="fp8", kv_dtype="fp8", gqa_kv_sharing=False)
    b, ctx = 64.0, 3072.0
    # per GPU per token: 2 (K, V) x 80 layers x 4 KV heads x 128 x 1 byte = 81,920 bytes
    kv_tok = 2 * 80 * 4 * 128
    read = float(step_time(shared, b, ctx).kv_read_s)
    read_8 = float(step_time(per_head, b, ctx).kv_read_s)
    assert read_8 / read == pytest.approx((b * ctx * kv_tok * 8 + b * kv_tok) / (b * ctx * kv_tok + b * kv_tok))


def test_absorbed_mla_decode_flops(catalog: Catalog) -> None:
    # DeepSeek-V3: 128 heads, kv_lora_rank 512, qk_rope_head_dim 64; 2 x 128 x (2 x 512 + 64) / tp 8
    assert decode_core_per_ctx(_dep(catalog, "deepseek-v3", tp=8, ep=8, precision="fp8")) == 2 * 128 * 1088 / 8


def test_attention_dp_memory_and_capacity(catalog: Catalog) -> None:
    model = catalog.model("deepseek-v3")
    cluster = build_cluster(catalog, "dgx-b200", 1)
    base = {"tp": 8, "ep": 8, "precision": "fp4", "kv_dtype": "bf16", "input_len": 1024, "output_len": 2048}
    tp_mem = memory_of(deployment(model, cluster, ServeConfig(**base)))  # type: ignore[arg-type]
    dp_mem = memory_of(deployment(model, cluster, ServeConfig(**base, attention_dp=True)))  # type: ignore[arg-type]
    # MLA latent cached per token: 61 layers x (512 + 64) x 2 bytes = 70,272 bytes; whole tokens on each GPU
    assert kv_bytes_per_token(model, KV_BYTES["bf16"]) == 61 * 576 * 2
    assert dp_mem.kv_bytes_per_token_gpu == tp_mem.kv_bytes_per_token_gpu == 61 * 576 * 2
    # non-expert weights replicated: more weight per GPU than TP8, yet 8 GPUs of distinct sequences
    assert dp_mem.weights_gib > tp_mem.weights_gib
    per_gpu_tokens = dp_mem.kv_tokens // 8
    assert per_gpu_tokens * dp_mem.kv_bytes_per_token_gpu <= dp_mem.kv_pool_gib * 2**30
    assert (per_gpu_tokens + 16) * dp_mem.kv_bytes_per_token_gpu > dp_mem.kv_pool_gib * 2**30
    assert dp_mem.kv_tokens > 6 * tp_mem.kv_tokens  # the blog's point: TP8 duplicates the MLA cache 8x


def test_attention_dp_has_no_tp_all_reduce(catalog: Catalog) -> None:
    dp = _dep(catalog, "deepseek-v3", system="dgx-b200", tp=8, ep=8, precision="fp4", attention_dp=True)
    parts = step_time(dp, 3072.0, 2048.0, 1536.0, 1536.0 * 512.0, 1.5)
    assert float(parts.tp_comm_s) == 0.0 and float(parts.ep_comm_s) > 0.0


@pytest.mark.parametrize(
    ("model", "kw"),
    [("llama3.1-70b", {"tp": 8, "attention_dp": True}), ("deepseek-v3", {"tp": 8, "ep": 4, "attention_dp": True})],
)
def test_attention_dp_needs_moe_and_ep_equal_tp(catalog: Catalog, model: str, kw: dict[str, object]) -> None:
    with pytest.raises(InputError, match="attention"):
        _dep(catalog, model, **kw)
