"""What backward recomputes: Megatron-Core's selective recompute modules and N fully recomputed layers.

Megatron-Core (``megatron/core/transformer/transformer_config.py``, ``recompute_granularity``,
``recompute_method``, ``recompute_num_layers``, ``recompute_modules``): with granularity "selective" the listed
modules are recomputed in every layer (default ``["core_attn"]``); with granularity "full" and method "block" the
first ``recompute_num_layers`` layers of every pipeline (virtual) stage keep only their input and run their
forward again in backward, the others keep everything. Which saved tensors each module frees is in
:func:`fmstack.perfmodel.memory.activation_bytes_per_token_layer`; what each runs again (GEMM FLOPs at the GEMM
efficiency, memory-bound bytes at HBM bandwidth) is here. Every function takes floats or arrays
(:mod:`fmstack.perfmodel.num`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fmstack.perfmodel.columns import PRECISION_CODE, RECOMPUTE_CODE, RECOMPUTE_MODULE_BIT, Columns
from fmstack.perfmodel.modelconsts import ModelConsts
from fmstack.perfmodel.num import Num, ceil, floor, maximum, where


@dataclass(frozen=True, slots=True)
class Recompute:
    """What is recomputed, per configuration row: 1.0 / 0.0 per Megatron-Core selective module (the effective set:
    recompute=selective without modules is Megatron's default ``["core_attn"]``), and ``full``, the fraction of
    the slowest stage's layers fully recomputed (1 with recompute=full; recompute_layers / layers per chunk)."""

    core_attn: Any
    layernorm: Any
    moe_act: Any
    mla_up_proj: Any
    mlp: Any
    moe: Any
    shared_experts: Any
    full: Any


def recompute_of(mc: ModelConsts, c: Columns[Any]) -> Recompute:
    """The effective recompute modules and the fully recomputed fraction of layers of every row."""
    selective = c.recompute == RECOMPUTE_CODE["selective"]
    given = c.rc_modules
    mask = where(selective, where(given > 0, given, RECOMPUTE_MODULE_BIT["core_attn"]), 0.0)

    def bit(name: str) -> Any:
        return floor(mask / RECOMPUTE_MODULE_BIT[name]) % 2.0

    per_chunk = ceil(mc.layers / (c.pp * c.vpp))
    full = where(c.recompute == RECOMPUTE_CODE["full"], 1.0, c.rc_layers / per_chunk)
    return Recompute(
        core_attn=bit("core_attn"), layernorm=bit("layernorm"), moe_act=bit("moe_act"),
        mla_up_proj=bit("mla_up_proj"), mlp=bit("mlp"), moe=bit("moe"), shared_experts=bit("shared_experts"),
        full=full,
    )  # fmt: skip


def _nonrouted_flops_per_token(mc: ModelConsts, rc: Recompute) -> Any:
    """Dense-GEMM FLOPs per token, all layers, that the selective modules run again: ``mlp`` a dense layer's
    MLP, ``moe`` the router and the shared experts, ``shared_experts`` the shared experts, ``mla_up_proj`` MLA's
    up-projections (``layernorm``, ``moe_act``: no GEMM)."""
    shared = (rc.moe + (1.0 - rc.moe) * rc.shared_experts) * mc.fwd_shared_per_moe_layer
    return (
        mc.dense_layers * rc.mlp * mc.fwd_dense_mlp_per_layer
        + mc.moe_layers * (rc.moe * mc.fwd_router_per_moe_layer + shared)
        + mc.layers * rc.mla_up_proj * mc.fwd_mla_up_per_layer
    )


def modules_flops_per_token(mc: ModelConsts, rc: Recompute) -> Any:
    """Linear-layer FLOPs per token, all layers, that the selective modules run again in backward: the dense
    GEMMs above and, with ``moe``, the routed experts."""
    return _nonrouted_flops_per_token(mc, rc) + rc.moe * mc.fwd_expert_per_token


def modules_gemm_s(
    mc: ModelConsts,
    c: Columns[Any],
    rc: Recompute,
    tokens: Num,
    stage_layers: Num,
    dense_flops_s: Num,
    expert_flops_s: Num,
) -> Any:
    """GEMM seconds per micro-batch of the stage redone by the selective modules (``dense_flops_s``,
    ``expert_flops_s``: achieved FLOP/s of the dense and the expert GEMMs)."""
    per_layer = stage_layers / mc.layers
    routed = rc.moe * mc.fwd_expert_per_token * per_layer / c.tp
    dense = _nonrouted_flops_per_token(mc, rc) * per_layer / c.tp
    return tokens * (dense / dense_flops_s + routed / expert_flops_s)


def modules_bytes_per_token(mc: ModelConsts, c: Columns[Any], rc: Recompute, stage_layers: Num) -> Any:
    """HBM bytes per token of the stage's memory-bound kernels redone by the selective modules, priced as in
    ``step._elementwise_bytes_per_token_layer``: ``layernorm`` the norms that are modules of their own (the pre-MLP
    norm of MoE layers, MLA's input norm) 4h each; ``moe_act`` the routed experts' activation; ``mlp`` a dense
    layer's fused norm, activation and FP8 casts; ``shared_experts`` their activation and casts; ``moe`` the
    experts' activations, casts, permute / unpermute and router softmax."""
    h = mc.h
    moe_frac = mc.moe_layers / mc.layers
    fp8 = where(c.precision == PRECISION_CODE["fp8"], 3.0, 0.0)  # cast bytes per GEMM-input element
    glu = 6.0 if mc.swiglu else 4.0
    norm = 4.0 * h / where(c.sp > 0, c.tp, 1.0)
    unit = (glu * mc.expert_ffn + fp8 * (h + mc.expert_ffn)) / c.tp  # one expert MLP's activation and casts
    several_local = where(mc.experts / maximum(c.ep, 1.0) > 1.0, 1.0, 0.0)
    permute = (mc.top_k * h * 2.0 * (3.0 + 4.0 * several_local) + 2.0 * h + 12.0 * mc.experts) / c.tp
    moe = (mc.top_k + mc.shared_experts) * unit + permute
    partial = rc.shared_experts * mc.shared_experts * unit + rc.moe_act * mc.top_k * glu * mc.expert_ffn / c.tp
    mlp = norm + (glu * mc.ffn + fp8 * (2.0 * h + mc.ffn)) / c.tp
    per_layer = (
        (1.0 - moe_frac) * rc.mlp * mlp
        + moe_frac * (rc.moe * moe + (1.0 - rc.moe) * partial)
        + rc.layernorm * (moe_frac + (1.0 if mc.mla else 0.0)) * norm
    )
    return stage_layers * per_layer
