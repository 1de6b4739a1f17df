"""FLOPs of a transformer, per token, by operator (2 FLOPs per multiply-accumulate).

Per layer and token, forward (Narayanan et al. 2021, sec. 5.1, generalised to GQA, SwiGLU and MoE):
- QKV projection: 2 h (a d + 2 k d); output projection 2 a d h (a heads, k kv heads, head dim d);
- attention scores Q K^T and context softmax(.) V: 2 * 2 s a d, of which causal kernels (FlashAttention)
  execute half; the *model* FLOPs count them in full, as PaLM (Chowdhery et al. 2022, app. B) and
  Megatron's MFU/HFU do;
- MLP: 2 * 3 h f (SwiGLU) or 2 * 2 h f (GELU); MoE: router 2 h E plus top_k (and shared) experts;
- LM head 2 h V per token (once per model).
Backward is twice the forward. Model FLOPs per token for MFU: 3 x forward (weights + full attention);
hardware FLOPs (HFU) add the recomputed forward.
"""

from __future__ import annotations

from dataclasses import dataclass

from fmstack.catalog.params import count_params
from fmstack.catalog.schema import ModelArch


@dataclass(frozen=True, kw_only=True, slots=True)
class LayerFlops:
    """Forward FLOPs per token of one layer (attention core at full, non-causal size)."""

    qkv: float
    attn_out: float
    attn_core_per_seq_token: float
    """Scores + context FLOPs per token per token of context: multiply by the context length s."""
    mlp: float
    """Dense MLP (or, on MoE layers, the active experts: top_k + shared)."""
    router: float

    def linear(self) -> float:
        return self.qkv + self.attn_out + self.mlp + self.router


def attn_dims(m: ModelArch) -> tuple[int, int, int]:
    """(q width, kv width, value/output width) of one attention block."""
    if m.mla is not None:
        a = m.mla
        q_width = m.num_heads * (a.qk_nope_head_dim + a.qk_rope_head_dim)
        return q_width, q_width, m.num_heads * a.v_head_dim
    d = m.head_dim_eff
    return m.num_heads * d, m.num_kv_heads * d, m.num_heads * d


def layer_flops(m: ModelArch, *, moe_layer: bool) -> LayerFlops:
    """Forward FLOPs per token of one dense or MoE layer."""
    h = m.hidden_size
    counts = count_params(m)
    q_width, _, v_width = attn_dims(m)
    proj = counts.attention_per_layer  # every attention weight is used once per token
    out_proj = v_width * h
    qkv = 2.0 * (proj - out_proj)
    core = 2.0 * q_width + 2.0 * v_width  # Q K^T (q width per key) + P V (v width per key)
    if moe_layer and m.moe is not None:
        mlp = 2.0 * (m.moe.top_k + m.moe.num_shared_experts) * counts.expert_per_expert
        router = 2.0 * h * m.moe.num_experts
    else:
        mlp = 2.0 * counts.dense_mlp_per_layer
        router = 0.0
    return LayerFlops(qkv=qkv, attn_out=2.0 * out_proj, attn_core_per_seq_token=core, mlp=mlp, router=router)


def mla_up_proj_flops(m: ModelArch) -> float:
    """Forward FLOPs per token of one layer's MLA up-projections: what Megatron-Core's ``mla_up_proj`` recompute
    runs again (``multi_latent_attention.py``, ``qkv_up_proj_and_rope_apply``: ``linear_q_up_proj`` from the
    q latent, or ``linear_q_proj`` from the hidden state without one, and ``linear_kv_up_proj``); 0 without MLA."""
    if m.mla is None:
        return 0.0
    a = m.mla
    q_in = a.q_lora_rank if a.q_lora_rank is not None else m.hidden_size
    q = q_in * m.num_heads * (a.qk_nope_head_dim + a.qk_rope_head_dim)
    kv = a.kv_lora_rank * m.num_heads * (a.qk_nope_head_dim + a.v_head_dim)
    return 2.0 * float(q + kv)


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelFlops:
    """Forward FLOPs per token of the whole model at a context length."""

    dense_layer: LayerFlops
    moe_layer: LayerFlops | None
    num_dense_layers: int
    num_moe_layers: int
    lm_head: float

    def linear_per_token(self) -> float:
        total = self.num_dense_layers * self.dense_layer.linear() + self.lm_head
        if self.moe_layer is not None:
            total += self.num_moe_layers * self.moe_layer.linear()
        return total

    def attn_core_per_token(self, seq_len: float) -> float:
        """Full (non-causal) attention core FLOPs per token at context ``seq_len``."""
        return (self.num_dense_layers + self.num_moe_layers) * self.dense_layer.attn_core_per_seq_token * seq_len

    def forward_per_token(self, seq_len: float) -> float:
        return self.linear_per_token() + self.attn_core_per_token(seq_len)

    def model_flops_per_token(self, seq_len: float) -> float:
        """Training model FLOPs per token (forward + backward = 3 x forward), for MFU."""
        return 3.0 * self.forward_per_token(seq_len)


def model_flops(m: ModelArch) -> ModelFlops:
    counts = count_params(m)
    return ModelFlops(
        dense_layer=layer_flops(m, moe_layer=False),
        moe_layer=layer_flops(m, moe_layer=True) if m.moe is not None else None,
        num_dense_layers=counts.num_dense_layers,
        num_moe_layers=counts.num_moe_layers,
        lm_head=2.0 * m.hidden_size * m.vocab_size,
    )


def six_n_flops_per_token(m: ModelArch) -> float:
    """6N (Kaplan et al. 2020), N = active parameters used as matmuls: all but the embedding lookups."""
    counts = count_params(m)
    positions = m.max_seq_len * m.hidden_size if m.position == "learned" else 0
    input_table = 0 if m.tied_embeddings else m.vocab_size * m.hidden_size
    return 6.0 * (counts.active - positions - input_table)
