"""Memory per GPU: weights, gradients, optimizer state, activations, temporary buffers.

Activations follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
Models", sec. 4, eqs. 1-5), written per token so that GQA, SwiGLU, MoE and FlashAttention fit:
per layer, bytes per token = R + P / t (+ the s^2 attention part / t), with
  R = 4h (two norm inputs) + 2h (QKV input) + 2h (MLP input) + 2h (dropout masks, if dropout) -> 10h for GPT,
  P = 2q + 2*2kv + 2v (Q, K, V, projection input) + MLP (GELU 4f, SwiGLU 6f) -> 24h for GPT,
  s^2 part = a s (2 softmax + 1 mask + 2 dropout) -> 5as for GPT; 0 with FlashAttention.
Sequence parallelism divides R by t too (34h/t for GPT); selective recompute drops the s^2 part; full
recompute keeps only each layer's input (2h, /t with SP). The first pipeline stage holds min(p, m)
micro-batches in flight (1F1B), times (1 + (p-1)/(p v)) with v interleaved chunks (Korthikanti sec. 4.2.3).
Mixed-precision Adam keeps 2 B weights, ``grad_bytes`` gradients and 12 B of fp32 master weights and
moments per parameter (Rajbhandari et al. 2020, ZeRO, sec. 3.1), sharded by ZeRO stage over the data-
parallel group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, cast

import numpy as np
from numpy.typing import NDArray

from fmstack.perfmodel.columns import SHARDING_CODE, Columns, V
from fmstack.perfmodel.modelconsts import ModelConsts
from fmstack.perfmodel.num import Cond, Num, ceil, minimum, where

F = NDArray[np.float64]
GIB = float(2**30)

OPTIMIZER_BYTES_PER_PARAM = 12.0
"""fp32 master weights + Adam m and v (ZeRO, Rajbhandari et al. 2020, sec. 3.1)."""
WEIGHT_BYTES = 2.0
FP8_WEIGHT_EXTRA_BYTES = 1.0
"""Transformer Engine keeps an fp8 copy of each weight next to the bf16 one."""
LOGIT_BYTES = 4.0
"""fp32 logits for the cross-entropy on the last stage (Korthikanti et al. 2022, sec. 4.3: 4sbv/t)."""
DEFAULT_RESERVE_GIB = 3.0
"""CUDA context, NCCL buffers, cuBLAS workspace and allocator fragmentation kept free (fmstack default)."""


@dataclass(frozen=True, slots=True)
class MemoryArrays(Generic[V]):
    """Bytes per GPU by part (the most loaded pipeline stage); floats for one configuration."""

    weights: V
    grads: V
    optimizer: V
    activations: V
    temporary: V

    @property
    def total(self) -> V:
        weights: Any = self.weights  # float or array alike
        return cast(V, weights + self.grads + self.optimizer + self.activations + self.temporary)


def local_params(mc: ModelConsts, c: Columns[Any]) -> tuple[Any, Any]:
    """(non-expert, expert) parameters held by one GPU of the most loaded stage, before ZeRO sharding."""
    share = ceil(mc.layers / (c.pp * c.vpp)) * c.vpp / mc.layers  # the slowest stage's share of layers
    nonexpert = mc.params_layers_nonexpert * share / c.tp + mc.params_embedding / minimum([c.pp, 2.0]) / c.tp
    expert = mc.params_expert * share / (c.ep * c.etp)
    return nonexpert, expert


def activation_bytes_per_token_layer(mc: ModelConsts, c: Columns[Any]) -> tuple[Any, Any]:
    """(dense layer, MoE layer) activation bytes per token per layer stored for backward."""
    h = mc.h
    t = c.tp
    replicated_tok = 8.0 * h + (2.0 * h if mc.dropout else 0.0)
    replicated = where(c.sp > 0, replicated_tok / t, replicated_tok)
    attn = 2.0 * mc.q_width + 4.0 * mc.kv_width + 2.0 * mc.v_width
    mlp_dense = (6.0 if mc.swiglu else 4.0) * mc.ffn
    expert_unit = 2.0 * h + (6.0 if mc.swiglu else 4.0) * mc.expert_ffn
    mlp_moe = mc.top_k * expert_unit + mc.shared_experts * expert_unit
    s2_local = c.seq  # keys each query attends to
    s2 = mc.heads * s2_local * (5.0 if mc.dropout else 2.0)
    s2 = where((c.flash > 0) | (c.recompute >= 1), 0.0, s2)
    dense = replicated + (attn + mlp_dense + s2) / t
    moe = replicated + (attn + s2) / t + mlp_moe / t
    full = where(c.sp > 0, 2.0 * h / t, 2.0 * h)
    dense = where(c.recompute == 2, full, dense)
    moe = where(c.recompute == 2, full, moe)
    return dense, moe


def memory_per_gpu(mc: ModelConsts, c: Columns[Any]) -> MemoryArrays[Any]:
    """Memory of the most loaded GPU for every configuration row."""
    nonexpert, expert = local_params(mc, c)
    params = nonexpert + expert
    dp_group = c.dp * c.cp
    expert_dp = dp_group * c.tp / (c.ep * c.etp)
    hsdp = c.sharding == SHARDING_CODE["hsdp"]
    shard_group = where(hsdp, minimum([c.hsdp, dp_group]), dp_group)
    expert_shard = where(hsdp, minimum([c.hsdp, expert_dp]), expert_dp)
    shard_opt = c.sharding >= SHARDING_CODE["zero1"]
    shard_grads = c.sharding >= SHARDING_CODE["zero2"]
    shard_weights = c.sharding >= SHARDING_CODE["zero3"]  # zero3, fsdp and hsdp shard the weights

    def sharded(bytes_per_param: Num, on: Cond) -> Any:
        ne = nonexpert * bytes_per_param / where(on, shard_group, 1.0)
        ex = expert * bytes_per_param / where(on, expert_shard, 1.0)
        return ne + ex

    weight_bytes = WEIGHT_BYTES + where(c.precision == 2, FP8_WEIGHT_EXTRA_BYTES, 0.0)
    weights = sharded(weight_bytes, shard_weights)
    grads = sharded(c.grad_bytes, shard_grads)
    optimizer = sharded(OPTIMIZER_BYTES_PER_PARAM, shard_opt)

    dense_tok, moe_tok = activation_bytes_per_token_layer(mc, c)
    tokens_mb = c.mb * c.seq / c.cp
    stage_layers = ceil(mc.layers / (c.pp * c.vpp)) * c.vpp
    layers_per_stage_dense = stage_layers * mc.dense_layers / mc.layers
    layers_per_stage_moe = stage_layers * mc.moe_layers / mc.layers
    per_mb = tokens_mb * (layers_per_stage_dense * dense_tok + layers_per_stage_moe * moe_tok)
    m = c.gb / (c.mb * c.dp)
    in_flight = minimum([c.pp, m])
    interleave = where(c.vpp > 1, 1.0 + (c.pp - 1.0) / (c.pp * c.vpp), 1.0)
    acts = per_mb * in_flight * interleave
    logits = where(c.pp == 1, tokens_mb * mc.vocab * LOGIT_BYTES / c.tp, 0.0)
    activations = acts + logits

    layer_params = (mc.params_layers_nonexpert / mc.layers) / c.tp + (mc.params_expert / max(mc.layers, 1.0)) / (
        c.ep * c.etp
    )
    gather_buffers = where(shard_weights, 2.0 * layer_params * WEIGHT_BYTES, 0.0)  # current + prefetched layer
    temporary = (
        gather_buffers
        if isinstance(params, float)
        else np.broadcast_to(gather_buffers, params.shape).astype(np.float64)
    )
    return MemoryArrays(weights=weights, grads=grads, optimizer=optimizer, activations=activations, temporary=temporary)
