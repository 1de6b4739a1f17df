"""Parameter counts computed from a model's architecture numbers.

Dense GPT (learned positions, biases, two-matrix MLP) follows Narayanan et al. 2021, sec. 5.1:
``P = 12 l h^2 (1 + 13/(12 h) + (V + s)/(12 l h))``. Llama-style models (SwiGLU, GQA, RoPE, no
biases) count q, k, v, o projections with ``head_dim`` and three MLP matrices. MoE models count
every expert for the total and ``top_k`` (plus shared) experts for the active count. MLA follows
DeepSeek-V3's projections (low-rank q and kv with a decoupled RoPE key).
"""

from __future__ import annotations

from dataclasses import dataclass

from fmstack.catalog.schema import ModelArch


@dataclass(frozen=True, kw_only=True, slots=True)
class ParamCounts:
    """Parameters of a model by part; ``active`` is what one token touches."""

    embedding: int
    attention_per_layer: int
    norms_per_layer: int
    dense_mlp_per_layer: int
    expert_per_expert: int
    router_per_layer: int
    num_dense_layers: int
    num_moe_layers: int
    total: int
    active: int


def attention_params(m: ModelArch) -> int:
    """Weights (and biases) of one attention block."""
    h = m.hidden_size
    if m.mla is not None:
        a = m.mla
        qk_head = a.qk_nope_head_dim + a.qk_rope_head_dim
        if a.q_lora_rank is not None:
            q = h * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * m.num_heads * qk_head
        else:
            q = h * m.num_heads * qk_head
        kv = h * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank
        kv += a.kv_lora_rank * m.num_heads * (a.qk_nope_head_dim + a.v_head_dim)
        o = m.num_heads * a.v_head_dim * h
        return q + kv + o
    d = m.head_dim_eff
    q_out = m.num_heads * d
    kv_out = m.num_kv_heads * d
    weights = h * q_out + 2 * h * kv_out + q_out * h
    biases = (q_out + 2 * kv_out + h) if m.biases else 0
    qk_norm = 2 * d if m.family == "qwen3" else 0
    return weights + biases + qk_norm


def mlp_params(m: ModelArch, ffn: int) -> int:
    """One MLP (or one expert) of inner width ``ffn``."""
    h = m.hidden_size
    if m.mlp == "swiglu":
        return 3 * h * ffn + ((2 * ffn + h) if m.biases else 0)
    return 2 * h * ffn + ((ffn + h) if m.biases else 0)


def count_params(m: ModelArch) -> ParamCounts:
    """Total and active parameters, by part."""
    h = m.hidden_size
    norm = (2 * h if m.biases else h) * 2  # two norms per layer (LayerNorm has a bias, RMSNorm not)
    attn = attention_params(m)
    emb = m.vocab_size * h + (m.max_seq_len * h if m.position == "learned" else 0)
    head = 0 if m.tied_embeddings else m.vocab_size * h
    final_norm = 2 * h if m.biases else h
    if m.moe is None:
        dense = mlp_params(m, m.ffn_hidden_size)
        per_layer = attn + norm + dense
        total = m.num_layers * per_layer + emb + head + final_norm
        return ParamCounts(
            embedding=emb + head,
            attention_per_layer=attn,
            norms_per_layer=norm,
            dense_mlp_per_layer=dense,
            expert_per_expert=0,
            router_per_layer=0,
            num_dense_layers=m.num_layers,
            num_moe_layers=0,
            total=total,
            active=total,
        )
    moe = m.moe
    n_dense = moe.first_dense_layers
    n_moe = m.num_layers - n_dense
    dense = mlp_params(m, moe.dense_ffn_hidden_size or m.ffn_hidden_size) if n_dense else 0
    expert = mlp_params(m, moe.expert_ffn_hidden_size)
    router = moe.num_experts * h
    common = m.num_layers * (attn + norm) + n_dense * dense + n_moe * router + emb + head + final_norm
    total = common + n_moe * (moe.num_experts + moe.num_shared_experts) * expert
    active = common + n_moe * (moe.top_k + moe.num_shared_experts) * expert
    return ParamCounts(
        embedding=emb + head,
        attention_per_layer=attn,
        norms_per_layer=norm,
        dense_mlp_per_layer=dense,
        expert_per_expert=expert,
        router_per_layer=router,
        num_dense_layers=n_dense,
        num_moe_layers=n_moe,
        total=total,
        active=active,
    )
