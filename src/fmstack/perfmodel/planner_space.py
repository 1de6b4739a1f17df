"""The planner's search space: what it may choose, and every shape-valid candidate row of one cluster.

The space per cluster: tp (powers of two within the NVLink domain, dividing the heads), pp, virtual stages,
cp, dp (the rest), ep (MoE), micro-batch, recomputation (for MoE models also selective module sets), sharding,
precision, and for MoE models the expert all-to-all overlap. Shape rules are applied as NumPy masks over the
Cartesian product; :mod:`fmstack.perfmodel.planner` evaluates the survivors.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from fmstack.catalog.schema import ModelArch
from fmstack.catalog.topology import Cluster
from fmstack.perfmodel.columns import (
    MASTER_CODE,
    OPT_STATE_CODE,
    PRECISION_CODE,
    RECOMPUTE_CODE,
    RECOMPUTE_MODULE_BIT,
    SHARDING_CODE,
    Columns,
)
from fmstack.perfmodel.config import GradDtype, MasterWeights, OptimizerStateDtype, wire_bytes, wire_fields
from fmstack.perfmodel.num import FloatArray

DEFAULT_GLOBAL_BATCH_TOKENS = 4 * 1024 * 1024
"""Default global batch when none is given: 4M tokens (Llama 3's initial batch, Llama 3 paper sec. 3.4.1)."""
MAX_PP = 64
_T = TypeVar("_T")


@dataclass(frozen=True, kw_only=True, slots=True)
class SearchSpace:
    """What the planner may choose. Empty tuples mean 'the default candidates'."""

    seq_len: int = 8192
    global_batch: int | None = None
    """Sequences per step; None = about DEFAULT_GLOBAL_BATCH_TOKENS, rounded to a multiple of dp * mb."""
    precisions: tuple[str, ...] = ("bf16",)
    recompute: tuple[str, ...] = ("none", "selective", "full")
    sharding: tuple[str, ...] = ("zero1", "fsdp")
    micro_batches: tuple[int, ...] = (1, 2, 4, 8)
    virtual_stages: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 8)
    cp: tuple[int, ...] = (1, 2, 4, 8)
    max_pp: int = MAX_PP
    flash_attention: bool = True
    overlap_tp: bool = True
    """Overlap the tensor-parallel all-gather / reduce-scatter with the GEMMs on rows with tp > 1 (sequence parallel:
    Megatron-LM ``--tp-comm-overlap``, Transformer Engine userbuffers; on in Megatron-Bridge's Llama recipes)."""
    overlap_ep: bool = True
    """MoE: overlap the expert all-to-all with another micro-batch's compute where ep > 1 and there are several
    micro-batches (Megatron-Core >= 0.14 ``--overlap-moe-expert-parallel-comm --delay-wgrad-compute``)."""
    optimizer_state_dtype: OptimizerStateDtype = "fp32"
    """Adam's m and v on every row (fixed, not searched; TrainConfig.optimizer_state_dtype)."""
    master_weights: MasterWeights = "fp32"
    """The master copy on every row (fixed, not searched; TrainConfig.master_weights)."""
    fp8_param_gather: bool = False
    """FP8 parameters on the fp8 rows (fixed, not searched; TrainConfig.fp8_param_gather)."""
    grad_shard_buffer: bool = False
    """The separate reduce-scattered gradient shard (Apex DistributedFusedAdam) on the zero1 rows (fixed, not searched;
    TrainConfig.grad_shard_buffer, which only zero1 has)."""
    grad_dtype: GradDtype = "fp32"
    """Gradients on every row (fixed, not searched; ``--grad-dtype``: TrainConfig.grad_bytes by
    :func:`~fmstack.perfmodel.config.wire_fields`, reduce_bytes per row's precision by
    :func:`~fmstack.perfmodel.config.wire_bytes`)."""
    reduce_dtype: GradDtype | None = None
    """FSDP's reduce_dtype on every row under fp32-params (fixed, not searched; ``--reduce-dtype``; None: fp32)."""


def _pow2_upto(limit: int) -> list[int]:
    return [1 << i for i in range(int(math.log2(max(limit, 1))) + 1)]


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def _once(values: Sequence[_T]) -> list[_T]:
    """``values`` in order, each once."""
    return list(dict.fromkeys(values))


def _recompute_choices(model: ModelArch, space: SearchSpace) -> list[tuple[float, float]]:
    """(recompute code, rc_modules mask) pairs: none, selective (Megatron's default core_attn), full, and for MoE
    models the cheap selective sets Megatron-Core's MoE recipes use (``layernorm``, ``moe_act``, and with MLA
    ``mla_up_proj``: no extra GEMM, or MLA's small up-projections, for most of an MoE layer's activations)."""
    sets: list[tuple[str, ...]] = [()]
    if model.moe is not None:
        sets.append(("layernorm", "moe_act"))
        if model.mla is not None:
            sets.append(("layernorm", "mla_up_proj", "moe_act"))
    out: list[tuple[float, float]] = []
    for name in space.recompute:
        code = float(RECOMPUTE_CODE[name])  # type: ignore[index]
        for modules in sets if name == "selective" else [()]:
            out.append((code, sum(RECOMPUTE_MODULE_BIT[m] for m in modules)))
    return out


def enumerate_space(model: ModelArch, cluster: Cluster, space: SearchSpace) -> tuple[Columns[FloatArray], int]:
    """All candidate rows (shape-valid) and the number considered before the shape masks.

    MoE rows with ep > 1 and more than one micro-batch overlap the expert all-to-all (``overlap_ep``) when
    ``space.overlap_ep``; with ep = 1 or one micro-batch the overlap changes nothing (step.py).
    """
    n = cluster.num_gpus
    tps = [t for t in _pow2_upto(cluster.gpus_per_domain) if n % t == 0]
    pps = _divisors(n, min(space.max_pp, model.num_layers))
    eps = [1] if model.moe is None else _divisors(model.moe.num_experts, n)
    # a value named twice (--precision bf16,bf16) is one candidate: it was enumerated, counted and ranked twice
    prec = _once([PRECISION_CODE[p] for p in space.precisions])  # type: ignore[index]
    rec_pairs = _once(_recompute_choices(model, space))
    shard = _once([SHARDING_CODE[s] for s in space.sharding])  # type: ignore[index]
    cps, vpps, mbs = _once(space.cp), _once(space.virtual_stages), _once(space.micro_batches)
    axes = (tps, pps, cps, eps, vpps, mbs, prec, range(len(rec_pairs)), shard)
    # the Cartesian product in itertools.product's order (last axis fastest), built by NumPy
    grid = [g.ravel() for g in np.meshgrid(*(np.asarray(a, dtype=np.float64) for a in axes), indexing="ij")]
    considered = int(grid[0].shape[0])
    tp, pp, cp, ep, vpp, mb, pr, ri, sh = grid
    pairs = np.asarray(rec_pairs, dtype=np.float64)
    rc, rcm = pairs[ri.astype(np.int64)].T
    mp = tp * pp * cp
    dp = np.floor(n / mp)
    ok = (n % mp == 0) & (dp >= 1)
    ok &= (model.num_heads % tp == 0) & ((model.num_kv_heads % tp == 0) | (tp % model.num_kv_heads == 0))
    ok &= model.num_layers >= pp * vpp
    ok &= (vpp == 1) | (pp > 1)
    ok &= (cp == 1) | (space.seq_len % (2 * cp) == 0)
    ok &= ((dp * cp * tp) % ep == 0) if model.moe is not None else ep == 1
    if space.global_batch is None:
        # about 4M tokens, rounded up to whole micro-batches per replica; at most twice the target
        target = max(1, round(DEFAULT_GLOBAL_BATCH_TOKENS / space.seq_len))
        gb = np.ceil(target / np.maximum(dp * mb, 1)) * dp * mb
        ok &= gb <= 2 * target
    else:
        gb = np.full_like(dp, float(space.global_batch))
        ok &= space.global_batch % np.maximum(dp * mb, 1) == 0
    m = gb / np.maximum(dp * mb, 1)
    ok &= (vpp == 1) | (m % pp == 0)
    idx = np.nonzero(ok)[0]
    # the expert all-to-all overlap never costs memory and never slows a step (step.py: exposed time
    # ((m - 1) * excess + link) / m <= link), so where it is allowed and can hide anything (ep > 1, m > 1) the row is
    # evaluated with it: the row without it is dominated, and would only repeat in the ranking
    can_overlap = space.overlap_ep and model.moe is not None
    # with pp > 1 Megatron-Core allows it only on an interleaved schedule (config.validate_config)
    overlap = ((ep[idx] > 1) & (m[idx] > 1) & ((pp[idx] == 1) | (vpp[idx] > 1)) & can_overlap).astype(np.float64)
    # the same holds for TP overlap (step.py: exposed (1 - h) link plus the overlap slowdown 0.189 h link), which
    # Megatron-LM allows only with sequence parallelism, on for every tp > 1 row here
    overlap_tp = ((tp[idx] > 1) & space.overlap_tp).astype(np.float64)
    ones = np.ones(idx.shape[0])
    fp8_params = (pr[idx] == PRECISION_CODE["fp8"]) & space.fp8_param_gather
    # the Apex gradient shard on the zero1 rows; left out (None: off everywhere) by default
    grad_shard = (sh[idx] == SHARDING_CODE["zero1"]).astype(np.float64) if space.grad_shard_buffer else None
    wire = {"grad_bytes": 4, **wire_fields(space.grad_dtype, space.master_weights, space.reduce_dtype)}
    # the gradients' own wire (config.wire_bytes: 2 B under fp16 compute) unless the layout names one (fp32-params)
    fp16 = pr[idx] == PRECISION_CODE["fp16"]
    own = np.where(fp16, wire_bytes("fp16", wire["grad_bytes"]), wire_bytes("bf16", wire["grad_bytes"]))
    reduce_bytes = ones * wire["reduce_bytes"] if "reduce_bytes" in wire else own.astype(np.float64)
    cols = Columns(
        tp=tp[idx], pp=pp[idx], dp=dp[idx], cp=cp[idx], ep=ep[idx], etp=ones.copy(), sp=(tp[idx] > 1).astype(np.float64),
        vpp=vpp[idx], mb=mb[idx], gb=gb[idx], seq=ones * space.seq_len, precision=pr[idx], recompute=rc[idx],
        sharding=sh[idx], hsdp=ones * 8, overlap_dp=ones.copy(), overlap_tp=overlap_tp, flash=ones * float(space.flash_attention),
        grad_bytes=ones * wire["grad_bytes"], reduce_bytes=reduce_bytes, rc_modules=rcm[idx], rc_layers=ones * 0.0, overlap_ep=overlap,
        opt_state=ones * OPT_STATE_CODE[space.optimizer_state_dtype], master=ones * MASTER_CODE[space.master_weights],
        fp8_params=fp8_params.astype(np.float64), grad_shard=grad_shard,
    )  # fmt: skip
    return cols, considered


def batch_limit(model: ModelArch, cluster: Cluster, space: SearchSpace) -> str:
    """Why ``cluster`` has no shape-valid row, and what to change: the global batch, since every other shape rule
    holds for tp = pp = cp = 1. Data parallelism cannot exceed it (dp x micro-batch divides the global batch), and the
    most model parallelism the space allows leaves dp = GPUs / (tp x pp x cp) replicas; the message gives both."""
    n = cluster.num_gpus
    layouts = [
        (tp * pp * cp, tp, pp, cp)
        for tp in _pow2_upto(cluster.gpus_per_domain)
        for pp in _divisors(n, min(space.max_pp, model.num_layers))
        for cp in _once(space.cp)
        if n % (tp * pp * cp) == 0
        and model.num_heads % tp == 0
        and (model.num_kv_heads % tp == 0 or tp % model.num_kv_heads == 0)
        and (cp == 1 or space.seq_len % (2 * cp) == 0)
    ]
    if not layouts:
        return f"no tp x pp x cp the space allows divides {n:,} GPUs"
    mp, tp, pp, cp = max(layouts)
    dp, mb = n // mp, min(space.micro_batches, default=1)
    most = f"the most model parallelism searched (tp {tp} x pp {pp} x cp {cp} = {mp:,} GPUs per replica)"
    if space.global_batch is None:
        target = max(1, round(DEFAULT_GLOBAL_BATCH_TOKENS / space.seq_len))
        cap = 2 * target // mb
        return (
            f"data parallelism cannot exceed the global batch: the default, about 4M tokens = {target:,} sequences of "
            f"{space.seq_len:,} tokens, allows dp <= {cap:,}, but on {n:,} {cluster.name} GPUs {most} leaves dp = "
            f"{dp:,}: use at most {cap * mp:,} GPUs, or give --global-batch as a multiple of {dp * mb:,}"
        )
    batch = space.global_batch
    if dp * mb > batch:
        return (
            f"data parallelism cannot exceed the global batch of {batch:,} sequences, but on {n:,} {cluster.name} GPUs "
            f"{most} leaves dp = {dp:,}: use at most {batch // mb * mp:,} GPUs, or a --global-batch that is a multiple "
            f"of {dp * mb:,}"
        )
    return (
        f"dp x micro-batch must divide the global batch of {batch:,} sequences, and no layout on {n:,} {cluster.name} "
        f"GPUs has such a dp: {most} leaves dp = {dp:,}; give a --global-batch that is a multiple of {dp * mb:,}"
    )
