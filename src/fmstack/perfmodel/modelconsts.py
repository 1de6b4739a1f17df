"""Per-model numbers the step model needs, computed once from the architecture (scalars)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fmstack.catalog.params import count_params
from fmstack.catalog.schema import ModelArch
from fmstack.perfmodel.flops import attn_dims, mla_up_proj_flops, model_flops

if TYPE_CHECKING:
    from numpy.typing import NDArray


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelConsts:
    """Dimensions, parameter counts and FLOPs per token of one model."""

    name: str
    h: float
    ffn: float
    expert_ffn: float
    heads: float
    kv_heads: float
    q_width: float
    kv_width: float
    v_width: float
    vocab: float
    layers: float
    moe_layers: float
    dense_layers: float
    experts: float
    top_k: float
    shared_experts: float
    swiglu: bool
    dropout: bool
    params_total: float
    params_active: float
    params_expert: float
    """All routed-expert weights (split by ep)."""
    params_layers_nonexpert: float
    """Attention, norms, dense MLPs, routers, shared experts (split by tp and pp)."""
    params_embedding: float
    """Input embedding plus untied LM head."""
    fwd_linear_per_token: float
    """Forward FLOPs per token of every linear layer incl. the LM head (active experts only)."""
    fwd_head_per_token: float
    fwd_core_per_token_per_ctx: float
    """Forward attention-core FLOPs per token per context token, all layers, non-causal."""
    fwd_expert_per_token: float
    """Forward FLOPs per token of the active routed experts, all MoE layers (part of linear)."""
    mla: bool = False
    """Multi-head latent attention (its input norm is a module of its own in Megatron-Core's TE spec)."""
    fwd_mla_up_per_layer: float = 0.0
    """Forward FLOPs per token of one layer's MLA up-projections (recompute module mla_up_proj)."""
    fwd_dense_mlp_per_layer: float = 0.0
    """Forward FLOPs per token of one dense layer's MLP (recompute module mlp)."""
    fwd_shared_per_moe_layer: float = 0.0
    """Forward FLOPs per token of one MoE layer's shared experts (recompute modules shared_experts, moe)."""
    fwd_router_per_moe_layer: float = 0.0
    """Forward FLOPs per token of one MoE layer's router (recompute module moe)."""


def model_consts(m: ModelArch) -> ModelConsts:
    counts = count_params(m)
    flops = model_flops(m)
    q_width, kv_width, v_width = attn_dims(m)
    moe = m.moe
    expert_ffn = float(moe.expert_ffn_hidden_size) if moe else 0.0
    top_k = float(moe.top_k) if moe else 0.0
    params_expert = float(counts.num_moe_layers * (moe.num_experts if moe else 0) * counts.expert_per_expert)
    params_embedding = float(counts.embedding)
    params_layers = float(counts.total) - params_expert - params_embedding
    expert_fwd = 2.0 * counts.num_moe_layers * top_k * counts.expert_per_expert
    return ModelConsts(
        name=m.name,
        h=float(m.hidden_size),
        ffn=float(m.ffn_hidden_size),
        expert_ffn=expert_ffn,
        heads=float(m.num_heads),
        kv_heads=float(m.num_kv_heads),
        q_width=float(q_width),
        kv_width=float(kv_width),
        v_width=float(v_width),
        vocab=float(m.vocab_size),
        layers=float(m.num_layers),
        moe_layers=float(counts.num_moe_layers),
        dense_layers=float(counts.num_dense_layers),
        experts=float(moe.num_experts) if moe else 0.0,
        top_k=top_k,
        shared_experts=float(moe.num_shared_experts) if moe else 0.0,
        swiglu=m.mlp == "swiglu",
        dropout=m.dropout,
        params_total=float(counts.total),
        params_active=float(counts.active),
        params_expert=params_expert,
        params_layers_nonexpert=params_layers,
        params_embedding=params_embedding,
        fwd_linear_per_token=flops.linear_per_token(),
        fwd_head_per_token=flops.lm_head,
        fwd_core_per_token_per_ctx=flops.attn_core_per_token(1.0),
        fwd_expert_per_token=expert_fwd,
        mla=m.mla is not None,
        fwd_mla_up_per_layer=mla_up_proj_flops(m),
        fwd_dense_mlp_per_layer=2.0 * counts.dense_mlp_per_layer,
        fwd_shared_per_moe_layer=2.0 * (moe.num_shared_experts if moe else 0) * counts.expert_per_expert,
        fwd_router_per_moe_layer=2.0 * m.hidden_size * moe.num_experts if moe else 0.0,
    )


def expert_gemm_flops(mc: ModelConsts, tokens: Any, ep: Any, width_split: Any) -> NDArray[np.float64]:
    """FLOPs of one routed expert's GEMM as a kernel sees it (m x k x n = tokens routed to that expert x hidden x
    ``expert_ffn / width_split``), the size the GEMM efficiency curve is read at. Each of the ``ep`` GPUs of the
    expert-parallel group brings ``tokens`` tokens, each routed to ``top_k`` of the experts uniformly (GShard,
    Lepikhin et al. 2020, sec. 2.2), so one expert receives ``tokens * top_k * ep / experts``; an expert's width
    is split ``width_split`` ways (expert tensor parallelism). Training (``step.py``) and serving
    (``inference_step.py``) both price the routed experts at this size."""
    return np.asarray(2.0 * tokens * mc.top_k * ep / np.maximum(mc.experts, 1.0) * mc.h * mc.expert_ffn / width_split)
