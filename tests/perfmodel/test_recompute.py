"""Megatron-Core selective recompute modules, N fully recomputed layers, FP8 saved Linear inputs: hand-worked bytes
per token per layer on two small models, recomputed FLOPs in HFU, invariants of memory and step time."""

from __future__ import annotations

import pytest

from fmstack.catalog import Catalog
from fmstack.catalog.schema import MLA, ModelArch, MoE
from fmstack.catalog.topology import build_cluster
from fmstack.perfmodel.columns import columns_of
from fmstack.perfmodel.config import TrainConfig
from fmstack.perfmodel.memory import activation_bytes_per_token_layer
from fmstack.perfmodel.modelconsts import model_consts
from fmstack.perfmodel.training import estimate_training

# h 64, ffn 160 (SwiGLU), 4 heads of 16, 2 kv heads: q = v = 64, kv = 32 wide; tp 1, no SP, FlashAttention
SMALL = {"num_layers": 4, "hidden_size": 64, "ffn_hidden_size": 160, "num_heads": 4, "num_kv_heads": 2,
         "head_dim": None, "vocab_size": 128, "max_seq_len": 256}  # fmt: skip


def _small_dense(catalog: Catalog) -> ModelArch:
    return catalog.model("llama3.1-8b").model_copy(update={"name": "small-dense", **SMALL})


def _small_moe(catalog: Catalog, *, mla: bool = False) -> ModelArch:
    """1 dense + 3 MoE layers: 8 experts of ffn 32, top-2, 1 shared expert (optionally MLA attention)."""
    moe = MoE(num_experts=8, top_k=2, expert_ffn_hidden_size=32, num_shared_experts=1, first_dense_layers=1)
    attn = MLA(q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16)
    update = {"name": "small-moe", **SMALL, "moe": moe, "mla": attn if mla else None}
    return catalog.model("qwen3-30b-a3b").model_copy(update=update)


def _bytes(model: ModelArch, **cfg: object) -> tuple[float, float]:
    return activation_bytes_per_token_layer(model_consts(model), columns_of(TrainConfig(seq_len=256, **cfg)))  # type: ignore[arg-type]


# dense layer, bf16: replicated 4h norm inputs + 2h QKV input + 2h MLP input = 512; attention 2q + 4kv + 2v = 384;
# MLP fc1 output 4f + fc2 input 2f = 960: 1856. fp8 halves the QKV, fc1 and fc2 inputs: 1856 - (64 + 64 + 160).
@pytest.mark.parametrize(
    ("precision", "modules", "expected"),
    [
        ("bf16", (), 1856.0),
        ("fp8", (), 1568.0),
        ("bf16", ("core_attn",), 1856.0),  # FlashAttention stores no s^2 part to drop
        ("bf16", ("layernorm",), 1856.0),  # both norms are fused into TE linears on a dense layer
        ("bf16", ("mlp",), 768.0),  # 4h + 2h + 384: the MLP input and its saved tensors go
        ("fp8", ("mlp",), 704.0),  # 4h + h + 384
    ],
)
def test_dense_layer_bytes_per_token(
    catalog: Catalog, precision: str, modules: tuple[str, ...], expected: float
) -> None:
    recompute = "selective" if modules else "none"
    dense, _ = _bytes(_small_dense(catalog), precision=precision, recompute=recompute, recompute_modules=modules)
    assert dense == expected


def test_core_attn_drops_the_s2_part_without_flash(catalog: Catalog) -> None:
    model = _small_dense(catalog)
    stored, _ = _bytes(model, flash_attention=False)
    assert stored == 1856.0 + 4 * 256 * 2  # a s (2 B softmax output), no dropout
    for modules in [(), ("core_attn",)]:  # Megatron's default set is ["core_attn"]
        dropped, _ = _bytes(model, flash_attention=False, recompute="selective", recompute_modules=modules)
        assert dropped == 1856.0
    kept, _ = _bytes(model, flash_attention=False, recompute="selective", recompute_modules=("layernorm",))
    assert kept == stored


# MoE layer, bf16: replicated 4h + 2h QKV input + 2h pre-MLP norm output = 512; attention 384; each of the 2 routed and
# 1 shared expert: fc1 input 2h + fc1 output 4 f_e + fc2 input 2 f_e = 128 + 128 + 64 = 320, so 960: 1856.
# fp8: replicated 4h + h + 2h (the router input stays bf16) = 448; each expert h + 4 f_e + f_e = 224: 448 + 384 + 672.
@pytest.mark.parametrize(
    ("precision", "modules", "expected"),
    [
        ("bf16", (), 1856.0),
        ("fp8", (), 1504.0),
        ("bf16", ("layernorm",), 1600.0),  # pre-MLP norm output 2h and the shared fc1 input it feeds (2h)
        ("fp8", ("layernorm",), 1312.0),  # 2h + the shared expert's fp8 copy h
        ("bf16", ("moe_act",), 1728.0),  # routed fc2 inputs 2 x 2 f_e
        ("fp8", ("moe_act",), 1440.0),  # 2 x f_e
        ("bf16", ("moe",), 896.0),  # every expert tensor: 512 + 384
        ("bf16", ("shared_experts",), 1536.0),
        ("bf16", ("layernorm", "moe_act"), 1472.0),
        ("bf16", ("mlp",), 1856.0),  # mlp recomputes dense layers only
    ],
)
def test_moe_layer_bytes_per_token(catalog: Catalog, precision: str, modules: tuple[str, ...], expected: float) -> None:
    recompute = "selective" if modules else "none"
    dense, moe = _bytes(_small_moe(catalog), precision=precision, recompute=recompute, recompute_modules=modules)
    assert moe == expected
    if precision == "bf16":  # the leading dense layer is the small dense model's layer
        assert dense == (768.0 if "mlp" in modules else 1856.0)


def test_mla_up_proj_and_layernorm_on_mla(catalog: Catalog) -> None:
    # MLA: q = k = 4 x (16 + 8) = 96 wide, v = 4 x 16 = 64: attention 2 x 96 + 4 x 96 + 2 x 64 = 704
    model = _small_moe(catalog, mla=True)
    _, moe = _bytes(model)
    assert moe == 512 + 704 + 960
    _, up = _bytes(model, recompute="selective", recompute_modules=("mla_up_proj",))
    assert up == moe - (2 * 96 + 4 * 96)
    # MLA's input norm is a module of its own: layernorm also frees the QKV input 2h
    dense, ln = _bytes(model, recompute="selective", recompute_modules=("layernorm",))
    assert ln == moe - 128 - 128 - 128
    assert dense == 4 * 64 + 128 + 704 + 6 * 160


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_recompute_layers_interpolates_between_none_and_full(catalog: Catalog, layers: int) -> None:
    model = catalog.model("llama3.1-70b")  # 80 layers, pp 4 x v 2: 10 per chunk
    cluster = build_cluster(catalog, "p5.48xlarge", 4)
    base = TrainConfig(tp=8, pp=4, dp=1, virtual_stages=2, global_batch=16, seq_len=4096, sequence_parallel=True)
    none = estimate_training(model, cluster, base).memory.activations_gib
    full = estimate_training(model, cluster, base.with_(recompute="full")).memory.activations_gib
    part = estimate_training(model, cluster, base.with_(recompute_layers=layers)).memory.activations_gib
    assert part == pytest.approx(none + layers / 10 * (full - none), rel=1e-12)
    assert estimate_training(model, cluster, base.with_(recompute_layers=10)).memory.activations_gib == pytest.approx(
        full, rel=1e-12
    )


def _hfu_minus_mfu_flops(catalog: Catalog, model: str, nodes: int, cfg: TrainConfig) -> tuple[float, float]:
    cluster = build_cluster(catalog, "p5.48xlarge", nodes)
    est = estimate_training(catalog.model(model), cluster, cfg)
    peak = cluster.gpu.bf16_dense_tflops * 1e12
    # HFU counts the attention core as FlashAttention runs it (causal half), mfu_causal likewise: the rest is recompute
    return (est.hfu - est.mfu_causal) * est.step_time_s * cluster.num_gpus * peak, est.tokens_per_step


def test_hfu_counts_the_recomputed_mlp_of_a_dense_model(catalog: Catalog) -> None:
    # Llama 3.1 8B: 32 layers x 2 x 3 x 4096 x 14336 FLOPs per token
    cfg = TrainConfig(dp=8, global_batch=16, seq_len=4096, recompute="selective", recompute_modules=("mlp",))
    extra, tokens = _hfu_minus_mfu_flops(catalog, "llama3.1-8b", 1, cfg)
    assert extra == pytest.approx(tokens * 32 * 2 * 3 * 4096 * 14336, rel=1e-9)
    none, _ = _hfu_minus_mfu_flops(catalog, "llama3.1-8b", 1, cfg.with_(recompute_modules=("layernorm",)))
    assert none == pytest.approx(0.0, abs=1e-6 * extra)  # a norm is no GEMM


def test_hfu_counts_the_recomputed_moe_layer(catalog: Catalog) -> None:
    # Qwen3-30B-A3B, 48 MoE layers: router 2 x 2048 x 128 + 8 routed experts x 2 x 3 x 2048 x 768, per token
    per_layer = 2 * 2048 * 128 + 8 * 2 * 3 * 2048 * 768
    cfg = TrainConfig(ep=8, dp=8, global_batch=16, seq_len=4096, recompute="selective", recompute_modules=("moe",))
    extra, tokens = _hfu_minus_mfu_flops(catalog, "qwen3-30b-a3b", 1, cfg)
    assert extra == pytest.approx(tokens * 48 * per_layer, rel=1e-9)
    act, _ = _hfu_minus_mfu_flops(catalog, "qwen3-30b-a3b", 1, cfg.with_(recompute_modules=("moe_act",)))
    assert act == pytest.approx(0.0, abs=1e-6 * extra)


def test_hfu_counts_n_fully_recomputed_layers(catalog: Catalog) -> None:
    # pp 4 x v 2 chunks of 10 layers, 3 recomputed in each: 24 of 80 layers' forward (no LM head)
    model = catalog.model("llama3.1-70b")
    cfg = TrainConfig(tp=8, pp=4, dp=1, virtual_stages=2, global_batch=16, seq_len=4096, sequence_parallel=True)
    full, tokens = _hfu_minus_mfu_flops(catalog, "llama3.1-70b", 4, cfg.with_(recompute="full"))
    part, _ = _hfu_minus_mfu_flops(catalog, "llama3.1-70b", 4, cfg.with_(recompute_layers=3))
    assert part == pytest.approx(full * 24 / 80, rel=1e-9)
    assert model.num_layers == 80 and tokens == 16 * 4096


STEPS = [
    ("llama3.1-8b", 1, TrainConfig(dp=8, global_batch=64, seq_len=4096, precision="fp8")),
    ("llama3.1-70b", 4, TrainConfig(tp=8, pp=4, dp=1, virtual_stages=2, global_batch=16, seq_len=4096)),
    ("qwen3-30b-a3b", 2, TrainConfig(ep=8, dp=16, global_batch=256, seq_len=4096, overlap_ep=True)),
    ("deepseek-v3", 32, TrainConfig(pp=4, ep=64, dp=64, virtual_stages=4, global_batch=1024, seq_len=4096)),
]


@pytest.mark.parametrize(("model", "nodes", "cfg"), STEPS)
def test_step_time_does_not_fall_when_recompute_is_added(
    catalog: Catalog, model: str, nodes: int, cfg: TrainConfig
) -> None:
    arch = catalog.model(model)
    cluster = build_cluster(catalog, "p5.48xlarge", nodes)
    moe = ["layernorm", "moe_act", "shared_experts", "moe"] if arch.moe else []
    ladder = ["core_attn", "mlp", *moe, *(["mla_up_proj"] if arch.mla else [])]
    if arch.moe and not arch.moe.num_shared_experts:
        ladder.remove("shared_experts")
    last = estimate_training(arch, cluster, cfg)
    for i in range(1, len(ladder) + 1):
        est = estimate_training(arch, cluster, cfg.with_(recompute="selective", recompute_modules=tuple(ladder[:i])))
        assert est.step_time_s >= last.step_time_s, ladder[:i]
        assert est.memory.activations_gib <= last.memory.activations_gib, ladder[:i]
        last = est
    per_chunk = -(-arch.num_layers // (cfg.pp * cfg.virtual_stages))
    last = estimate_training(arch, cluster, cfg)
    for n in range(1, per_chunk + 1):
        est = estimate_training(arch, cluster, cfg.with_(recompute_layers=n))
        assert est.step_time_s >= last.step_time_s, n
        last = est
    assert last.step_time_s == pytest.approx(
        estimate_training(arch, cluster, cfg.with_(recompute="full")).step_time_s, rel=1e-12
    )
