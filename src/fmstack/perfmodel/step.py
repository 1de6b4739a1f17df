"""The vectorised training-step model: one formula for one configuration or millions.

Per micro-batch and pipeline stage (the slowest, last stage with the LM head), forward and backward
time is GEMM FLOPs at the GPU's peak times a size-dependent efficiency, attention-core FLOPs at the
attention efficiency (causal half with FlashAttention), memory-bound bytes over HBM bandwidth, and the
exposed tensor / context / expert parallel communication. The pipeline runs (m + (p - 1) / v) such
stage-steps (Narayanan et al. 2021, sec. 2.2: bubble fraction (p - 1) / (v m)); the data-parallel
gradient reduction (or FSDP gathers) adds what compute does not hide; the compute that runs beside hidden
communication is slowed (the collective's kernels take SMs and HBM bandwidth); the optimizer step is
memory-bound. Every term is an array over configuration rows, or a float for one configuration (the
helpers of :mod:`fmstack.perfmodel.num` take both).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, overload

import numpy as np
from numpy.typing import NDArray

from fmstack.catalog.topology import Cluster
from fmstack.perfmodel.columns import PRECISION_CODE, RECOMPUTE_CODE, SHARDING_CODE, Columns, V
from fmstack.perfmodel.efficiency import Efficiency
from fmstack.perfmodel.memory import MemoryArrays, layout_bytes_per_param, local_params, memory_per_gpu
from fmstack.perfmodel.modelconsts import ModelConsts, expert_gemm_flops
from fmstack.perfmodel.num import Num, any_true, ceil, full_like, gcd, logical_not, maximum, minimum, where
from fmstack.perfmodel.optimizer_step import optimizer_step_bytes_per_param
from fmstack.perfmodel.recompute import modules_bytes_per_token, modules_flops_per_token, modules_gemm_s, recompute_of
from fmstack.perfmodel.step_comm import comm, placement_per_domain

F = NDArray[np.float64]

TP_OVERLAP_HIDDEN = 0.7
"""Fraction of TP communication hidden by GEMM overlap (Transformer Engine userbuffers) when enabled
(fmstack default; Wang et al. 2023, 'Overlap communication with dependent computation', report most of it
hidden)."""
MOE_LAYER_OVERHEAD_S = 250e-6
"""Per MoE layer and pass: router softmax / top-k, token histogram with its device-to-host synchronisation
(Megatron-Core dropless dispatcher), permute and unpermute launches (fmstack default)."""
OVERLAP_COMPUTE_SLOWDOWN = 0.189
"""Extra compute time per second of communication hidden under it: compute kernels run beside a collective were
18.9 % slower on average (max 40 %) than alone, over GPT and Llama layers with NCCL collectives on 4 A100s, H100s,
MI250s and MI210s (Lee et al., "Characterizing Compute-Communication Overlap in GPU-Accelerated Distributed Deep
Learning: Performance and Power Implications", arXiv:2507.03114, 2025, abstract and sec. 5). The collective's
kernels hold SMs (NCCL's channels) and share HBM bandwidth."""
PER_LAYER_OVERHEAD_S = 30e-6
"""Kernel launch and framework time per layer per micro-batch pass that no kernel is busy (fmstack
default; about 30 kernels of ~1 us launch gap each)."""


@dataclass(frozen=True, slots=True)
class StepArrays(Generic[V]):
    """Every time in seconds per optimizer step (``*_s``), per configuration row (floats for one configuration)."""

    step_s: V
    gemm_s: V
    attention_s: V
    memory_bound_s: V
    recompute_s: V
    overhead_s: V
    tp_link_s: V
    tp_exposed_s: V
    cp_link_s: V
    cp_exposed_s: V
    ep_link_s: V
    ep_exposed_s: V
    pp_link_s: V
    pp_exposed_s: V
    dp_link_s: V
    dp_exposed_s: V
    bubble_s: V
    optimizer_s: V
    overlap_s: V
    """Compute slowed by the communication hidden under it: OVERLAP_COMPUTE_SLOWDOWN x the hidden link time."""
    model_flops: V
    attention_core_flops: V
    """The attention core's share of model_flops, counted in full (non-causal) like model_flops."""
    hardware_flops: V
    tokens: V
    memory: MemoryArrays[V]


@overload
def step_model(mc: ModelConsts, cluster: Cluster, eff: Efficiency, c: Columns[float]) -> StepArrays[float]: ...
@overload
def step_model(mc: ModelConsts, cluster: Cluster, eff: Efficiency, c: Columns[F]) -> StepArrays[F]: ...
def step_model(mc: ModelConsts, cluster: Cluster, eff: Efficiency, c: Columns[Any]) -> StepArrays[Any]:
    """Step time, its breakdown, FLOPs and memory for every configuration row of ``c`` (floats for floats)."""
    gpu = cluster.gpu
    gpd = float(cluster.gpus_per_domain)
    h = mc.h
    t, p, v, cp, ep = c.tp, c.pp, c.vpp, c.cp, c.ep
    m = c.gb / (c.mb * c.dp)
    tokens_mb = c.mb * c.seq / cp  # tokens of one micro-batch on one GPU's sequence shard
    fp8 = c.precision == PRECISION_CODE["fp8"]
    peak_lin = where(fp8, gpu.fp8_dense_tflops or gpu.bf16_dense_tflops, gpu.bf16_dense_tflops) * 1e12
    peak_attn = gpu.bf16_dense_tflops * 1e12
    hbm_bps = gpu.hbm_bw_gbps * 1e9 * eff.memory

    # GEMM FLOPs per micro-batch on one GPU of the last stage (its share of layers + the LM head)
    layer_linear = (mc.fwd_linear_per_token - mc.fwd_head_per_token - mc.fwd_expert_per_token) / mc.layers
    # uneven splits are allowed: the slowest stage holds ceil(L / (p v)) layers in each of its v chunks
    stage_layers = ceil(mc.layers / (p * v)) * v
    dense_lin_tok = stage_layers * layer_linear / t
    expert_lin_tok = (mc.fwd_expert_per_token / mc.layers * stage_layers) / t
    # representative GEMM size: an MLP / projection GEMM of this micro-batch
    mlp_call = 2.0 * tokens_mb * h * max(mc.ffn, mc.q_width) / t
    expert_call = expert_gemm_flops(mc, tokens_mb, ep, t)
    eff_dense = _gemm_eff(eff, c, mlp_call)
    eff_expert = _gemm_eff(eff, c, maximum(expert_call, 1.0)) if mc.experts > 0 else 1.0
    # the LM head runs in BF16 under FP8 too: Megatron-Core's output layer is its own ColumnParallelLinear, not a
    # Transformer Engine module, so fp8_autocast leaves it alone; at its own (vocab-wide) call size
    head_call = 2.0 * tokens_mb * h * mc.vocab / t
    head_fwd = tokens_mb * mc.fwd_head_per_token / t / (gpu.bf16_dense_tflops * 1e12 * eff.gemm_at("bf16", head_call))
    gemm_fwd = (
        tokens_mb * dense_lin_tok / (peak_lin * eff_dense)
        + tokens_mb * expert_lin_tok / (peak_lin * eff_expert)
        + head_fwd
    )

    causal = where(c.flash > 0, 0.5, 1.0)
    core_flops = tokens_mb * (mc.fwd_core_per_token_per_ctx / mc.layers * stage_layers) * c.seq / t  # full, non-causal
    core_call = 2.0 * tokens_mb * c.seq * mc.q_width / t
    attn_eff = _attention_eff(eff, c, core_call)
    attn_fwd = core_flops * causal / (peak_attn * attn_eff)

    mem_fwd = tokens_mb * stage_layers * _elementwise_bytes_per_token_layer(mc, c) / hbm_bps
    fwd_compute = gemm_fwd + attn_fwd + mem_fwd
    overhead_fwd = (
        stage_layers * PER_LAYER_OVERHEAD_S + stage_layers * (mc.moe_layers / mc.layers) * MOE_LAYER_OVERHEAD_S
    )
    rc = recompute_of(mc, c)
    modules = modules_gemm_s(mc, c, rc, tokens_mb, stage_layers, peak_lin * eff_dense, peak_lin * eff_expert)
    modules = rc.core_attn * attn_fwd + modules + tokens_mb * modules_bytes_per_token(mc, c, rc, stage_layers) / hbm_bps
    recompute = rc.full * fwd_compute + (1.0 - rc.full) * modules
    # collectives of recomputed forwards: a dense MLP or an MoE layer redoes one of a layer's two TP collectives
    # and (MoE) the dispatch + combine all-to-all
    moe_frac = mc.moe_layers / mc.layers
    tp_again = rc.full + (1.0 - rc.full) * 0.5 * ((1.0 - moe_frac) * rc.mlp + moe_frac * rc.moe)
    ep_again = rc.full + (1.0 - rc.full) * rc.moe

    # tensor parallel: 2 all-reduces (or all-gather + reduce-scatter with SP) per layer per pass
    tp_pd = placement_per_domain(t, full_like(t, 1.0), gpd)
    act_bytes = tokens_mb * h * 2.0
    tp_one = comm("all_reduce", act_bytes, t, tp_pd, cluster)
    tp_passes = 2.0 + tp_again  # forward, backward (input grads), recomputed forward
    tp_link = 2.0 * stage_layers * tp_one * tp_passes
    tp_exposed = tp_link * where(c.overlap_tp > 0, 1.0 - TP_OVERLAP_HIDDEN, 1.0)

    # context parallel: ring attention passes K and V chunks, overlapped with the attention core
    cp_pd = placement_per_domain(cp, t, gpd)
    kv_bytes = tokens_mb * 2.0 * mc.kv_width * 2.0 / t
    cp_step = comm("send_recv", kv_bytes, where(cp > 1, 2.0, 1.0), where((cp > 1) & (cp_pd >= cp), 2.0, 1.0), cluster)
    cp_fwd = stage_layers * (cp - 1.0) * cp_step
    cp_link = cp_fwd * 3.0
    attn_core_total = attn_fwd * 3.0
    cp_exposed = maximum(0.0, cp_link - attn_core_total)

    # expert parallel: dispatch + combine all-to-all per MoE layer, forward and backward
    ep_pd = placement_per_domain(ep, t, gpd)
    a2a_bytes = tokens_mb / t * mc.top_k * h * 2.0
    ep_one = comm("all_to_all", a2a_bytes, ep, ep_pd, cluster)  # nccl-tests size: bytes each rank sends
    # expert tensor parallelism: after the dispatch all-to-all the etp ranks of an expert all-gather its tokens, and
    # reduce-scatter the outputs before the combine (Megatron-Core's MoEAlltoAllTokenDispatcher, the expert TP group
    # innermost in its rank order); each exchange is charged half to dispatch, half to combine
    etp = c.etp
    if any_true(etp > 1):
        etp_pd = placement_per_domain(etp, full_like(etp, 1.0), gpd)
        etp_bytes = a2a_bytes * etp  # nccl-tests size: the gathered buffer
        ep_one = ep_one + 0.5 * (
            comm("all_gather", etp_bytes, etp, etp_pd, cluster)
            + comm("reduce_scatter", etp_bytes, etp, etp_pd, cluster)
        )
    ep_link = (mc.moe_layers / mc.layers * stage_layers) * 2.0 * ep_one * (2.0 + ep_again)
    # with EP overlap (Megatron-Core's combined 1F1B) the forward of micro-batch i + 1 runs beside the backward of
    # micro-batch i, layer by layer, and each all-to-all hides only behind the node of the other micro-batch it is
    # paired with (_ep_pair_excess). The first forward and the last backward have no partner: of m micro-batches,
    # m - 1 pair and one micro-batch's link is exposed in full, so the mean is ((m - 1) * excess + link) / m; with
    # m = 1 nothing is hidden. With pp > 1 the schedule needs virtual stages (Megatron-Core's transformer_config.py
    # asserts it): without them nothing is hidden either
    overlap_ep = c.overlap_ep if c.overlap_ep is not None else full_like(ep, 0.0)
    paired = (overlap_ep > 0) & (m > 1) & ((p == 1) | (v > 1))
    if mc.moe_layers > 0 and any_true(paired & (ep > 1)):
        ep_excess = (mc.moe_layers / mc.layers * stage_layers) * _ep_pair_excess(
            mc, c, ep_one, ep_again, tokens_mb, peak_lin * eff_dense, peak_lin * eff_expert, peak_attn * attn_eff,
            hbm_bps, causal, recompute / maximum(3.0 * fwd_compute, 1e-30),
        )  # fmt: skip
    else:
        ep_excess = full_like(ep_link, 0.0)
    ep_exposed = where(paired, ((m - 1.0) * ep_excess + ep_link) / maximum(m, 1.0), ep_link)

    # pipeline point-to-point: activations to the next stage, gradients back
    pp_stride = t * cp * c.dp
    pp_pd = placement_per_domain(p, pp_stride, gpd)
    p2p_bytes = tokens_mb * h * 2.0 / where(c.sp > 0, t, 1.0)
    pp_one = comm("send_recv", p2p_bytes, where(p > 1, 2.0, 1.0), where((p > 1) & (pp_pd >= p), 2.0, 1.0), cluster)
    pp_link_mb = 2.0 * v * pp_one * where(p > 1, 1.0, 0.0)

    t_f = fwd_compute + overhead_fwd
    t_b = 2.0 * fwd_compute + recompute + 2.0 * overhead_fwd
    t_comm = tp_exposed + cp_exposed + ep_exposed
    t_mb = t_f + t_b + t_comm + pp_link_mb
    bubble = (p - 1.0) / v * (t_f + t_b + t_comm)
    pipeline = m * t_mb + bubble

    # data parallel gradient reduction / FSDP gathers
    nonexpert, expert = local_params(mc, c)
    dp_group = c.dp * cp
    dp_pd = placement_per_domain(dp_group, t, gpd)
    expert_dp = dp_group * t / (ep * c.etp)
    exp_pd = placement_per_domain(expert_dp, ep * c.etp, gpd) if mc.params_expert > 0 else full_like(expert_dp, 1.0)
    hsdp = c.sharding == SHARDING_CODE["hsdp"]
    full_shard = (c.sharding >= SHARDING_CODE["zero3"]) & logical_not(hsdp)
    any_full = any_true(full_shard)
    none_bytes = full_like(nonexpert, 0.0)
    grad_ar = comm("all_reduce", nonexpert * c.reduce_bytes, dp_group, dp_pd, cluster) + comm(
        "all_reduce", expert * c.reduce_bytes, expert_dp, exp_pd, cluster
    )
    layout = layout_bytes_per_param(c)
    gather = layout.gather  # bytes per gathered parameter: 2, 1 with FP8 parameters
    # ZeRO-1/2: the all-reduce's halves are the gradient reduce-scatter (reduce_bytes) and the parameter all-gather
    # (gather bytes: 1 with FP8 parameters; Apex's bf16 param sync beside its fp32 grad sync); priced as the
    # all-reduce scaled by the bytes both move, so that the algorithm stays the all-reduce's
    halves = where(c.sharding >= SHARDING_CODE["zero1"], (c.reduce_bytes + gather) / (2.0 * c.reduce_bytes), 1.0)
    grad_ar = grad_ar * where(c.sharding >= SHARDING_CODE["zero3"], 1.0, halves)
    # fp32-params: each gather first casts the local fp32 shard to bf16 (read 4, write 2: FSDP2 all_gather_inputs,
    # run by foreach_all_gather on the all-gather's copy-in stream), so the cast is priced with the gather
    cast = layout.cast / hbm_bps
    ag = comm("all_gather", nonexpert * gather if any_full else none_bytes, dp_group, dp_pd, cluster) + comm(
        "all_gather", expert * gather if any_full else none_bytes, expert_dp, exp_pd, cluster
    )
    ag = ag + cast * (nonexpert / dp_group + expert / expert_dp)
    rs = comm("reduce_scatter", nonexpert * c.reduce_bytes if any_full else none_bytes, dp_group, dp_pd, cluster)
    rs = rs + comm("reduce_scatter", expert * c.reduce_bytes if any_full else none_bytes, expert_dp, exp_pd, cluster)
    shard = where(hsdp, gcd(c.hsdp, dp_group), 1.0)
    replicas = dp_group / shard
    if any_true(hsdp):
        hsdp_ag = comm("all_gather", nonexpert * gather, shard, placement_per_domain(shard, t, gpd), cluster)
        hsdp_ag = hsdp_ag + cast * nonexpert / shard
        hsdp_ar = comm(
            "all_reduce",
            nonexpert * c.reduce_bytes / shard,
            replicas,
            placement_per_domain(replicas, t * shard, gpd),
            cluster,
        )
    else:
        hsdp_ag = hsdp_ar = full_like(nonexpert, 0.0)
    # zero3 / fsdp: parameters gathered for forward and backward of every micro-batch, grads reduced once. The
    # last micro-batch's backward is one window on one link for both its gather and the gradient reduction, so
    # they hide together (max(0, ag + rs - t_b)), not each behind the whole backward
    fsdp_link = m * 2.0 * ag + rs
    fsdp_exposed = where(
        c.overlap_dp > 0,
        m * maximum(0.0, ag - t_f) + (m - 1.0) * maximum(0.0, ag - t_b) + maximum(0.0, ag + rs - t_b),
        fsdp_link,
    )
    hsdp_link = m * 2.0 * hsdp_ag + hsdp_ar
    hsdp_exposed = where(
        c.overlap_dp > 0,
        m * maximum(0.0, hsdp_ag - t_f)
        + (m - 1.0) * maximum(0.0, hsdp_ag - t_b)
        + maximum(0.0, hsdp_ag + hsdp_ar - t_b),
        hsdp_link,
    )
    window = t_b + where(c.sharding >= SHARDING_CODE["zero1"], t_f, 0.0)
    ddp_exposed = where(c.overlap_dp > 0, maximum(0.0, grad_ar - window), grad_ar)
    dp_link = where(hsdp, hsdp_link, where(full_shard, fsdp_link, grad_ar))
    dp_exposed = where(hsdp, hsdp_exposed, where(full_shard, fsdp_exposed, ddp_exposed))

    # optimizer step on the local (sharded) parameters
    opt_shard = where(c.sharding >= SHARDING_CODE["zero1"], where(hsdp, shard, dp_group), 1.0)
    exp_shard = where(c.sharding >= SHARDING_CODE["zero1"], where(hsdp, minimum([shard, expert_dp]), expert_dp), 1.0)
    opt_params = nonexpert / opt_shard + expert / exp_shard
    optimizer = opt_params * optimizer_step_bytes_per_param(c).total / hbm_bps  # optimizer_step.py: 38 B by default

    # hidden communication (on the link, not exposed) runs beside compute and slows it
    hidden = m * ((tp_link - tp_exposed) + (cp_link - cp_exposed) + (ep_link - ep_exposed)) + (dp_link - dp_exposed)
    overlap = OVERLAP_COMPUTE_SLOWDOWN * hidden

    step = pipeline + dp_exposed + optimizer + overlap

    tokens = c.gb * c.seq
    model_flops = tokens * (3.0 * (mc.fwd_linear_per_token + mc.fwd_core_per_token_per_ctx * c.seq))
    core_model_flops = tokens * 3.0 * mc.fwd_core_per_token_per_ctx * c.seq
    # hardware FLOPs: what the GPUs execute, so the attention core as the kernel runs it (FlashAttention skips the
    # masked half, `causal`; unfused attention computes the full product and masks it) plus the recomputed FLOPs
    # over the whole model: the fully recomputed share of all layers (N of every chunk of p v)
    hw_core = causal * mc.fwd_core_per_token_per_ctx * c.seq
    full_share = where(c.recompute == RECOMPUTE_CODE["full"], 1.0, minimum([c.rc_layers * p * v / mc.layers, 1.0]))
    full_flops = mc.fwd_linear_per_token - mc.fwd_head_per_token + hw_core
    module_flops = rc.core_attn * hw_core + modules_flops_per_token(mc, rc)
    recompute_model = tokens * (full_share * full_flops + (1.0 - full_share) * module_flops)
    hardware_flops = tokens * 3.0 * (mc.fwd_linear_per_token + hw_core) + recompute_model
    return StepArrays(
        step_s=step,
        gemm_s=m * 3.0 * gemm_fwd,
        attention_s=m * 3.0 * attn_fwd,
        memory_bound_s=m * 3.0 * mem_fwd,
        recompute_s=m * recompute,
        overhead_s=m * 3.0 * overhead_fwd,
        tp_link_s=m * tp_link,
        tp_exposed_s=m * tp_exposed,
        cp_link_s=m * cp_link,
        cp_exposed_s=m * cp_exposed,
        ep_link_s=m * ep_link,
        ep_exposed_s=m * ep_exposed,
        pp_link_s=m * pp_link_mb,
        pp_exposed_s=m * pp_link_mb,
        dp_link_s=dp_link,
        dp_exposed_s=dp_exposed,
        bubble_s=bubble,
        optimizer_s=optimizer,
        overlap_s=overlap,
        model_flops=model_flops,
        attention_core_flops=core_model_flops,
        hardware_flops=hardware_flops,
        tokens=tokens,
        memory=memory_per_gpu(mc, c),
    )


def _ep_pair_excess(
    mc: ModelConsts, c: Columns[Any], a2a: Num, again: Num, tokens: Num, dense_fps: Num, expert_fps: Num,
    attn_fps: Num, hbm_bps: float, causal: Num, rc_share: Num,
) -> Any:  # fmt: skip
    """Time one MoE layer of a forward / backward pair under EP overlap adds to its compute (Megatron-Core's
    combined 1F1B, ``docs/user-guide/features/moe_a2a_overlap.md``). The layer is cut into nodes on two streams:
    ``attn`` (attention, pre-MLP norm, router, shared experts, permute) and ``mlp`` (chunk sort, routed experts,
    unsort) on the compute stream; ``moe_dispatch`` (all-to-all) and ``moe_combine`` (all-to-all, unpermute and the
    MLP residual add, ``fine_grained_callables.py``) on the communication stream. The pair issues F.attn | B.combine,
    then B.expert | F.dispatch, F.expert | B.dispatch, B.attn | F.combine, each waiting on the other stream's
    previous node, so each phase lasts as long as the longer of its two nodes: an all-to-all hides only behind the
    node it is paired with, not behind the layer's whole compute."""
    h, k, tp = mc.h, mc.top_k, c.tp
    moe_mem = _elementwise_bytes_per_token_layer(mc, c, moe=1.0)
    several_local = where(mc.experts / maximum(c.ep, 1.0) > 1.0, 1.0, 0.0)
    glu = 6.0 if mc.swiglu else 4.0
    fp8 = where(c.precision == PRECISION_CODE["fp8"], 3.0 * k * (h + mc.expert_ffn), 0.0)
    x_bytes = (glu * k * mc.expert_ffn + fp8 + 8.0 * k * h * several_local) / tp
    # unpermute (read top_k copies, write one) and the MLP's bias-dropout-add (read two, write one)
    split = where(c.sp > 0, tp, 1.0)
    u_bytes = (2.0 * k * h + 2.0 * h) / tp + (6.0 * h + ((5.0 * h) if mc.dropout else 0.0)) / split
    nonexpert = mc.fwd_linear_per_token - mc.fwd_head_per_token - mc.fwd_expert_per_token
    moe_side = mc.fwd_router_per_moe_layer + mc.fwd_shared_per_moe_layer
    attn_lin = (nonexpert - mc.dense_layers * mc.fwd_dense_mlp_per_layer - mc.moe_layers * moe_side) / mc.layers
    core = mc.fwd_core_per_token_per_ctx / mc.layers * c.seq / tp * causal
    attn = tokens * ((attn_lin + moe_side) / tp / dense_fps + core / attn_fps + (moe_mem - x_bytes - u_bytes) / hbm_bps)
    expert = tokens * (mc.fwd_expert_per_token / mc.moe_layers / tp / expert_fps + x_bytes / hbm_bps)
    unperm = tokens * u_bytes / hbm_bps
    back = 2.0 + 3.0 * rc_share  # backward compute per forward: dgrad + wgrad, plus its share of recompute
    a_back = a2a * (1.0 + again)  # a recomputed forward (full, or the moe module) repeats dispatch and combine
    phases = (
        maximum(attn, a_back + 2.0 * unperm)  # F.attn | B.combine
        + maximum(back * expert, a2a)  # B.expert | F.dispatch
        + maximum(expert, a_back)  # F.expert | B.dispatch
        + maximum(back * attn, a2a + unperm)  # B.attn | F.combine
    )
    return maximum(0.0, phases - (1.0 + back) * (attn + expert) - 3.0 * unperm)


def _gemm_eff(eff: Efficiency, c: Columns[Any], flops_per_call: Num) -> Num:
    fp8 = c.precision == PRECISION_CODE["fp8"]
    if isinstance(fp8, bool):  # one configuration: read only the curve it uses
        return eff.gemm_at("fp8" if fp8 else "bf16", flops_per_call)
    return np.where(fp8, eff.gemm_at("fp8", flops_per_call), eff.gemm_at("bf16", flops_per_call))


def _attention_eff(eff: Efficiency, c: Columns[Any], core_flops_per_call: Num) -> Num:
    """Fused attention at the attention efficiency; unfused score / context matmuls on the BF16 GEMM curve."""
    flash = c.flash > 0
    if isinstance(flash, bool):  # one configuration: read only the curve it uses
        return eff.attention if flash else eff.gemm_at("bf16", core_flops_per_call)
    return np.where(flash, eff.attention, eff.gemm_at("bf16", core_flops_per_call))


def _elementwise_bytes_per_token_layer(mc: ModelConsts, c: Columns[Any], moe: float | None = None) -> Any:
    """HBM bytes per token per layer (forward, averaged over dense and MoE layers) of norms, residual adds,
    activation function, dropout, FP8 casts and the MoE router, permutations and weighted combine."""
    h = mc.h
    split = where(c.sp > 0, c.tp, 1.0)
    moe = mc.moe_layers / mc.layers if moe is None else moe  # fraction of layers that are MoE
    units = mc.top_k + mc.shared_experts  # expert MLPs each token passes through on an MoE layer
    norms = 2.0 * (2.0 * h + 2.0 * h)  # read and write h in 2 B, two norms
    residual = 2.0 * 3.0 * 2.0 * h  # read two, write one
    dropout = (2.0 * (2.0 * h + 2.0 * h + h)) if mc.dropout else 0.0
    glu = 6.0 if mc.swiglu else 4.0
    act = glu * ((1.0 - moe) * mc.ffn + moe * units * mc.expert_ffn) / c.tp
    softmax = where(c.flash > 0, 0.0, mc.heads * c.seq * (6.0 + (5.0 if mc.dropout else 0.0)) / c.tp)
    # FP8: 3 B per element of every GEMM input (amax, cast): QKV reads h, the output projection q_width (heads x
    # head_dim, not always h: Qwen3-30B-A3B has 4096 vs h 2048), the MLP h (twice: gate and up) and ffn; on MoE
    # layers the inputs of every routed copy
    attn_inputs = h + mc.q_width
    gemm_inputs = (1.0 - moe) * (attn_inputs + 2.0 * h + mc.ffn) + moe * (attn_inputs + units * (h + mc.expert_ffn))
    fp8_casts = where(c.precision == PRECISION_CODE["fp8"], 3.0 * gemm_inputs / c.tp, 0.0)
    # MoE (Megatron-Core all-to-all dispatcher): permute into expert order (read + write top_k copies of h in
    # 2 B), sort received chunks by local expert and back (only with several local experts), unpermute with
    # the router weights (read top_k copies, write one); router softmax / top-k over E fp32 logits
    several_local = where(mc.experts / maximum(c.ep, 1.0) > 1.0, 1.0, 0.0)
    permute = moe * (mc.top_k * h * 2.0 * (2.0 + 4.0 * several_local + 1.0) + 2.0 * h + 12.0 * mc.experts) / c.tp
    return (norms + residual + dropout) / split + act + softmax + fp8_casts + permute
