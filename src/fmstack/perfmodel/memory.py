"""Memory per GPU: weights, gradients, optimizer state, activations, temporary buffers.

Activations follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
Models", sec. 4, eqs. 1-5), written per token so that GQA, SwiGLU, MoE and FlashAttention fit:
per layer, bytes per token = R + P / t (+ the s^2 attention part / t), with
  R = 4h (two norm inputs) + 2h (QKV input) + 2h (MLP input) + 2h (dropout masks, if dropout) -> 10h for GPT,
  P = 2q + 2*2kv + 2v (Q, K, V, projection input) + MLP (GELU 4f, SwiGLU 6f) -> 24h for GPT,
  s^2 part = a s (2 softmax + 1 mask + 2 dropout) -> 5as for GPT; 0 with FlashAttention.
Sequence parallelism divides R by t too (34h/t for GPT); selective recompute drops the s^2 part; full
recompute keeps only each layer's input (2h, /t with SP). Tensor by tensor, FP8's 1 B saved Linear inputs
and Megatron-Core's selective recompute modules / N fully recomputed layers: :func:`activation_bytes_per_token_layer`
and :mod:`fmstack.perfmodel.recompute`. The first pipeline stage holds min(p, m)
micro-batches in flight (1F1B), times (1 + (p-1)/(p v)) with v interleaved chunks (Korthikanti sec. 4.2.3).
Mixed-precision Adam keeps 2 B weights, ``grad_bytes`` gradients and 12 B of fp32 master weights and
moments per parameter (Rajbhandari et al. 2020, ZeRO, sec. 3.1), sharded by ZeRO stage over the data-
parallel group. Other storage layouts (:func:`layout_bytes_per_param`): bf16 moments, 16-bit master remainders or no
master copy, fp32 parameters as their own master (PyTorch FSDP mixed precision), FP8 parameters, and Apex
DistributedFusedAdam's separate gradient shard.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, cast

import numpy as np
from numpy.typing import NDArray

from fmstack.perfmodel.columns import MASTER_CODE, OPT_STATE_CODE, PRECISION_CODE, SHARDING_CODE, Columns, V
from fmstack.perfmodel.modelconsts import ModelConsts
from fmstack.perfmodel.num import Cond, Num, ceil, minimum, where
from fmstack.perfmodel.recompute import recompute_of

F = NDArray[np.float64]
GIB = float(2**30)

OPTIMIZER_BYTES_PER_PARAM = 12.0
"""fp32 master weights + Adam m and v (ZeRO, Rajbhandari et al. 2020, sec. 3.1)."""
WEIGHT_BYTES = 2.0
FP8_WEIGHT_EXTRA_BYTES = 1.0
"""Transformer Engine keeps an fp8 copy of each weight next to the bf16 one."""
FP8_PARAM_BYTES = 1.0
"""FP8 parameters (Megatron-Core ``fp8_param_gather``): the weight is the FP8 tensor, no bf16 copy."""
ADAM_STATE_BYTES = {"fp32": 8.0, "bf16": 4.0}
"""Adam's m and v per parameter by dtype (Megatron-Core ``exp_avg_dtype`` / ``exp_avg_sq_dtype``; Apex
DistributedFusedAdam ``dtype``: ``exp_avg_shard`` and ``exp_avg_sq_shard`` are allocated in it)."""
MASTER_BYTES = {"fp32": 4.0, "remainder": 2.0, "none": 0.0, "fp32-params": 0.0}
"""The optimizer's copy of a weight: fp32; the int16 remainder (Apex ``param_remainders_shard``, ``torch.int16``;
Megatron-Core's ``master_param`` as ``torch.int16`` with ``store_param_remainders`` and bf16); none; fp32-params
(the weight itself is the fp32 master: :data:`FP32_PARAM_BYTES`)."""
FP32_PARAM_BYTES = 4.0
"""fp32-params: the sharded parameter is fp32 and is the master (PyTorch FSDP mixed precision keeps no 16-bit copy
between gathers; FSDP2 ``FSDPParam.all_gather_inputs`` casts the shard to ``param_dtype`` just before the all-gather)."""
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
    """(dense layer, MoE layer) activation bytes per token per layer stored for backward.

    Korthikanti's terms, tensor by tensor, as Megatron-Core with Transformer Engine (its TE layer spec,
    ``megatron/core/models/gpt/gpt_layer_specs.py``) keeps them:

    - replicated (/ t only with SP): the two norm inputs 4h (bf16: the norms' backward reads them); the QKV
      input h (the input norm's output, saved by TE ``LayerNormLinear`` as ``ln_out``); the MLP input h (dense:
      TE ``LayerNormMLP``'s ``ln_out``; MoE: the pre-MLP ``TENorm`` output, the router's bf16 input: 2h);
      dropout masks 2h;
    - per tensor-parallel rank (/ t): Q, K, V 2q + 4kv and the attention output 2v (bf16, saved by the fused
      attention; the output projection reuses that output: Megatron-Core ``attention.py`` calls
      ``set_save_original_input(self.linear_proj)`` for fp8 recipes other than delayed scaling); the MLP's fc1
      output (bf16, read by the activation's backward: 4f SwiGLU, 2f GELU) and fc2 input f; per routed or shared
      expert the same with f_e, and its fc1 input h; the s^2 attention part without FlashAttention.

    FP8 (Transformer Engine ``module/linear.py``: the input is quantized and kept for the weight-gradient GEMM,
    "Discard row-wise data since it is not needed in backward pass", ``saved_inputmat = inputmat``; the same in
    ``layernorm_linear.py`` (``ln_out``), ``layernorm_mlp.py`` (``ln_out``, ``act_out``) and
    ``grouped_linear.py``): every Linear input saved for the weight gradient is 1 B per element, not 2: the QKV
    input, the dense MLP's fc1 and fc2 inputs, every expert's fc1 and fc2 inputs. Norm inputs, Q / K / V / O and
    fc1 outputs stay bf16.

    Megatron-Core selective recompute modules (``transformer_config.py``, ``recompute_modules``) remove:
    ``core_attn`` the s^2 part (``attention.py``: ``checkpoint_core_attention``); ``layernorm`` the outputs of
    the norms that are modules of their own (``transformer_layer.py``: not ``IdentityOp``; TE fuses the input
    norm into ``linear_qkv`` and a dense layer's pre-MLP norm into ``linear_fc1``, so only the pre-MLP norm of MoE
    layers (2h, and the shared experts' fc1 input it feeds) and MLA's input norm (the QKV input) are discarded
    and recomputed); ``moe_act`` the routed experts' fc2 input (``moe/experts.py``: the activation's output is
    discarded, ``set_save_original_input(self.linear_fc2)`` under fp8); ``mla_up_proj`` MLA's Q, K, V
    (``multi_latent_attention.py``: ``qkv_up_checkpoint`` discards the up-projection and RoPE outputs);
    ``mlp`` a dense layer's whole MLP and its input (``transformer_layer.py``: ``recompute_mlp`` only when not an
    MoE layer; the checkpoint keeps the residual, already counted as a norm input); ``moe`` every expert's saved
    tensors (``moe/moe_layer.py``: ``moe_layer_recompute``; the router input stays as the checkpoint's input);
    ``shared_experts`` the shared experts' saved tensors.
    """
    h = mc.h
    t = c.tp
    r = recompute_of(mc, c)
    lin = where(c.precision == PRECISION_CODE["fp8"], 1.0, 2.0)  # bytes per element of a saved Linear input
    fc1_out = 4.0 if mc.swiglu else 2.0  # bytes per ffn unit: SwiGLU's 2f gate + up outputs, GELU's f, bf16
    mla = 1.0 if mc.mla else 0.0
    qkv_in = lin * h * (1.0 - r.layernorm * mla)
    norms_and_dropout = 4.0 * h + (2.0 * h if mc.dropout else 0.0)
    split = where(c.sp > 0, t, 1.0)
    replicated_dense = (norms_and_dropout + qkv_in + lin * h * (1.0 - r.mlp)) / split
    replicated_moe = (norms_and_dropout + qkv_in + 2.0 * h * (1.0 - r.layernorm)) / split
    attn = (2.0 * mc.q_width + 4.0 * mc.kv_width) * (1.0 - r.mla_up_proj) + 2.0 * mc.v_width
    mlp_dense = (fc1_out + lin) * mc.ffn * (1.0 - r.mlp)
    routed = lin * h + fc1_out * mc.expert_ffn + lin * mc.expert_ffn * (1.0 - r.moe_act)
    shared = (lin * h * (1.0 - r.layernorm) + (fc1_out + lin) * mc.expert_ffn) * (1.0 - r.shared_experts)
    mlp_moe = (mc.top_k * routed + mc.shared_experts * shared) * (1.0 - r.moe)
    s2_local = c.seq  # keys each query attends to
    s2 = mc.heads * s2_local * (5.0 if mc.dropout else 2.0)
    s2 = where((c.flash > 0) | (r.core_attn > 0), 0.0, s2)
    dense = replicated_dense + (attn + mlp_dense + s2) / t
    moe = replicated_moe + (attn + s2) / t + mlp_moe / t
    full = 2.0 * h / split  # a fully recomputed layer keeps its input
    dense = r.full * full + (1.0 - r.full) * dense
    moe = r.full * full + (1.0 - r.full) * moe
    return dense, moe


def _code(column: Any, default: float = 0.0) -> Any:
    """An optional layout column, or its default where it was left out (the planner's default layout)."""
    return default if column is None else column


@dataclass(frozen=True, slots=True)
class LayoutBytes(Generic[V]):
    """Bytes per parameter of one storage layout, before any sharding."""

    weights: V
    """Model weights: bf16 2 B (+1 B FP8 copy under fp8), the FP8 parameter's 1 B, or the fp32 parameter's 4 B."""
    optimizer: V
    """Adam m + v and the master copy (sharded from zero1 on)."""
    gather: V
    """Bytes per parameter of a data-parallel parameter all-gather: 2 (bf16, fp32 parameters cast to bf16 first), 1 with
    FP8 parameters."""
    grad_shard: V
    """0 or 1: the gradient shard is a separate buffer (Apex DistributedFusedAdam)."""
    cast: V
    """HBM bytes per local parameter to cast the shard before each gather: fp32-params read 4, write 2; else 0."""


def layout_bytes_per_param(c: Columns[Any]) -> LayoutBytes[Any]:
    """The storage layout of every row: weights, optimizer state and gathered bytes per parameter.

    Default (all columns at their defaults): weights 2 B (+1 B under fp8), optimizer 4 + 4 + 4 = 12 B, gathers 2 B.
    fp32-params (PyTorch FSDP mixed precision): weights 4 B, optimizer 4 + 4 = 8 B, gathers 2 B after a 4 + 2 B cast.
    """
    state = where(_code(c.opt_state) == OPT_STATE_CODE["bf16"], ADAM_STATE_BYTES["bf16"], ADAM_STATE_BYTES["fp32"])
    master_code = _code(c.master)
    fp32_params = master_code == MASTER_CODE["fp32-params"]
    master = where(
        (master_code == MASTER_CODE["none"]) | fp32_params,
        MASTER_BYTES["none"],
        where(master_code == MASTER_CODE["remainder"], MASTER_BYTES["remainder"], MASTER_BYTES["fp32"]),
    )
    fp8 = c.precision == PRECISION_CODE["fp8"]
    fp8_params = fp8 & (_code(c.fp8_params) > 0)
    weights = where(fp8_params, FP8_PARAM_BYTES, WEIGHT_BYTES + where(fp8, FP8_WEIGHT_EXTRA_BYTES, 0.0))
    weights = where(fp32_params, FP32_PARAM_BYTES, weights)
    gather = where(fp8_params, FP8_PARAM_BYTES, WEIGHT_BYTES)
    grad_shard = where(_code(c.grad_shard) > 0, 1.0, 0.0)
    cast = where(fp32_params, FP32_PARAM_BYTES + WEIGHT_BYTES, 0.0)
    return LayoutBytes(weights=weights, optimizer=state + master, gather=gather, grad_shard=grad_shard, cast=cast)


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

    layout = layout_bytes_per_param(c)
    weights = sharded(layout.weights, shard_weights)
    # Apex DistributedFusedAdam with contiguous_grad_buffer: the full buffer stays, the reduce-scattered shard is a
    # second buffer (distributed_fused_adam.py: sync_grads_shard = torch.empty([shard_size]), kept as grads_shard)
    grads = sharded(c.grad_bytes, shard_grads) + layout.grad_shard * sharded(c.grad_bytes, shard_opt)
    optimizer = sharded(layout.optimizer, shard_opt)

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
    gather_buffers = where(shard_weights, 2.0 * layer_params * layout.gather, 0.0)  # current + prefetched layer
    temporary = (
        gather_buffers
        if isinstance(params, float)
        else np.broadcast_to(gather_buffers, params.shape).astype(np.float64)
    )
    return MemoryArrays(weights=weights, grads=grads, optimizer=optimizer, activations=activations, temporary=temporary)
