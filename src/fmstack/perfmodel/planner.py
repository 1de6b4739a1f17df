"""The planner: enumerate every training configuration, prune, evaluate vectorised, rank.

The space per cluster: tp (powers of two within the NVLink domain, dividing the heads), pp, virtual stages,
cp, dp (the rest), ep (MoE), micro-batch, recomputation (for MoE models also selective module sets), sharding,
precision, and for MoE models the expert all-to-all overlap. Shape rules are applied as
NumPy masks; survivors run through the same vectorised step model the single estimate uses
(:func:`fmstack.perfmodel.step.step_model`), so both paths give identical numbers. The ranking holds each layout
once, with its best virtual-stage count (:mod:`fmstack.perfmodel.plan_fold`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from fmstack.catalog.schema import ModelArch
from fmstack.catalog.topology import Cluster
from fmstack.errors import InputError
from fmstack.perfmodel.columns import (
    MASTER_CODE,
    OPT_STATE_CODE,
    PRECISION_CODE,
    RECOMPUTE_CODE,
    RECOMPUTE_MODULE_BIT,
    SHARDING_CODE,
    Columns,
    columns_from_configs,
)
from fmstack.perfmodel.config import (
    GRAD_DTYPE_BYTES,
    GradDtype,
    MasterWeights,
    OptimizerStateDtype,
    TrainConfig,
    check_search_layout,
    check_seq_len,
    describe_config,
    wire_bytes,
    wire_fields,
)
from fmstack.perfmodel.efficiency import Efficiency, default_efficiency
from fmstack.perfmodel.memory import (
    ADAM_STATE_BYTES,
    DEFAULT_RESERVE_GIB,
    FP32_PARAM_BYTES,
    GIB,
    MASTER_BYTES,
    OPTIMIZER_BYTES_PER_PARAM,
    WEIGHT_BYTES,
)
from fmstack.perfmodel.modelconsts import model_consts
from fmstack.perfmodel.num import FloatArray
from fmstack.perfmodel.plan_fold import best_per_layout
from fmstack.perfmodel.pricing import priced_name
from fmstack.perfmodel.step import StepArrays, step_model
from fmstack.perfmodel.training import TrainingEstimate, from_arrays

OBJECTIVES = ("time", "cost", "mfu")
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


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanResult:
    """Ranked configurations of one search, with what was pruned and why."""

    model: str
    objective: str
    considered: int
    rejected_shape: int
    rejected_memory: int
    ranked: list[TrainingEstimate]
    cost_usd: list[float | None]
    time_to_train_s: list[float | None]
    tokens: float | None
    closest_misfit: str = ""
    clusters: list[str] = field(default_factory=list)
    resilience: list[dict[str, Any]] | None = None
    """With objective time-with-failures: each ranked configuration's checkpoint / failure / goodput JSON."""
    included_rank: int | None = None
    """1-based rank of ``include`` among all configurations that fit, every virtual-stage variant counted (None: not
    enumerated or does not fit)."""
    num_nodes: list[int] = field(default_factory=list)
    """Each ranked configuration's nodes (instances; an UltraServer counts its instances)."""
    cost_per_hour_usd: list[float | None] = field(default_factory=list)
    """Each ranked configuration's cluster price: the catalog's per-instance ``price_per_hour_usd`` x ``num_nodes``
    (None: the catalog has no price). ``cost_usd`` = time to train in hours x this."""
    vpp_variants: list[int] = field(default_factory=list)
    """Each ranked configuration's count of virtual-stage variants that fit: rows that differ only in virtual
    stages are one layout, ranked once by its best count (plan_fold.py); 1 = nothing folded."""

    @property
    def best(self) -> TrainingEstimate:
        return self.ranked[0]


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
    wire = {"grad_bytes": 4, **wire_fields(space.grad_dtype, space.master_weights)}
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


def evaluate(
    model: ModelArch,
    cluster: Cluster,
    cols: Columns[FloatArray],
    efficiency: Efficiency | None = None,
    chunk: int = 200_000,
) -> StepArrays[FloatArray]:
    """The step model over every row (in chunks, to bound memory)."""
    eff = efficiency or default_efficiency(cluster.gpu)
    mc = model_consts(model)
    if len(cols) <= chunk:
        return step_model(mc, cluster, eff, cols)
    parts = [
        step_model(mc, cluster, eff, cols.take(np.arange(i, min(i + chunk, len(cols)))))
        for i in range(0, len(cols), chunk)
    ]
    return _concat(parts)


def _concat(parts: Sequence[StepArrays[FloatArray]]) -> StepArrays[FloatArray]:
    from dataclasses import fields

    from fmstack.perfmodel.memory import MemoryArrays

    values: dict[str, object] = {}
    for f in fields(StepArrays):
        if f.name == "memory":
            values["memory"] = MemoryArrays(
                *(np.concatenate([getattr(p.memory, g.name) for p in parts]) for g in fields(MemoryArrays))
            )
        else:
            values[f.name] = np.concatenate([getattr(p, f.name) for p in parts])
    return StepArrays(**values)  # type: ignore[arg-type]


def _score(objective: str, arrays: StepArrays[FloatArray], cluster: Cluster, tokens: float) -> NDArray[np.float64]:
    """Lower is better: seconds to train, dollars to train, or minus MFU."""
    if objective == "mfu":
        peak = cluster.num_gpus * cluster.gpu.bf16_dense_tflops * 1e12
        return np.asarray(-arrays.model_flops / (arrays.step_s * peak), dtype=np.float64)
    seconds = tokens * arrays.step_s / arrays.tokens
    if objective == "cost":
        price = cluster.instance.price_per_hour_usd or 0.0
        return np.asarray(seconds / 3600.0 * price * cluster.num_nodes, dtype=np.float64)
    return np.asarray(seconds, dtype=np.float64)


STATE_BYTES_PER_PARAM = WEIGHT_BYTES + 4.0 + OPTIMIZER_BYTES_PER_PARAM
"""bf16 weight, fp32 gradient (the planner's ``grad_bytes``), fp32 master weight and Adam moments: 18 B per parameter,
held once across all GPUs when every copy is sharded (ZeRO-3 / FSDP with tp x pp x ep)."""


def _state_floor(model: ModelArch, clusters: Sequence[Cluster], reserve_gib: float, space: SearchSpace) -> str:
    """When even perfectly sharded weights, gradients and optimizer state overflow every cluster tried: the GPU
    count they need at the least (activations need more), so that "try more GPUs" says how many."""
    per_param = STATE_BYTES_PER_PARAM - OPTIMIZER_BYTES_PER_PARAM + ADAM_STATE_BYTES[space.optimizer_state_dtype]
    per_param += MASTER_BYTES[space.master_weights] + GRAD_DTYPE_BYTES[space.grad_dtype] - 4.0
    if space.master_weights == "fp32-params":
        per_param += FP32_PARAM_BYTES - WEIGHT_BYTES  # the fp32 parameter is the weight
    state_bytes = model_consts(model).params_total * per_param
    floors = {c.gpu.name: math.ceil(state_bytes / ((c.gpu.hbm_gib - reserve_gib) * GIB)) for c in clusters}
    if all(c.num_gpus >= floors[c.gpu.name] for c in clusters):
        return ""
    need = " or ".join(f"{n:,} {gpu}" for gpu, n in floors.items())
    return (
        f"; its weights, gradients and Adam state alone ({state_bytes / 1e9:,.0f} GB: {per_param:.0f} B "
        f"per parameter) need at least {need} GPUs before activations"
    )


def _unsearched_levers(space: SearchSpace) -> str:
    """The memory levers the search was not allowed to use (full recomputation, FSDP), or that it used both."""
    off = [name for name, on in (("--recompute full", "full" in space.recompute), ("FSDP", "fsdp" in space.sharding))
           if not on]  # fmt: skip
    return f", or allow {' and '.join(off)}" if off else "; the search already tried full recomputation and FSDP"


def plan_training(
    model: ModelArch,
    clusters: Sequence[Cluster],
    *,
    tokens: float,
    objective: str = "time",
    top: int = 10,
    space: SearchSpace | None = None,
    efficiency_for: Callable[[Cluster], Efficiency] | None = None,
    reserve_gib: float = DEFAULT_RESERVE_GIB,
    progress: Callable[[int, int], None] | None = None,
    include: TrainConfig | None = None,
) -> PlanResult:
    """Search every configuration on every cluster; rank by ``objective`` (time, cost or mfu)."""
    if objective not in OBJECTIVES:
        raise InputError("objective", f"unknown objective {objective!r}; allowed: {', '.join(OBJECTIVES)}")
    if not math.isfinite(tokens) or tokens <= 0:  # nan <= 0 is False: nan would pass a bare comparison
        raise InputError("tokens", f"must be > 0 and finite, got {tokens:g}")
    if top < 1:
        raise InputError("top", f"must be >= 1, got {top}")
    space = space or SearchSpace()
    if space.seq_len <= 0:
        raise InputError("seq_len", f"must be > 0, got {space.seq_len}")
    check_seq_len(space.seq_len, model)
    check_search_layout(space.precisions, space.optimizer_state_dtype, space.master_weights, space.fp8_param_gather,
                        grad_shard_buffer=space.grad_shard_buffer, shardings=space.sharding,
                        grad_dtype=space.grad_dtype)  # fmt: skip
    spaces = [_supported(space, c) for c in clusters]
    considered = rejected_shape = rejected_memory = 0
    candidates: list[tuple[float, int, int, Cluster, Columns[FloatArray], StepArrays[FloatArray], int]] = []
    all_scores: list[NDArray[np.float64]] = []
    include_score: float | None = None
    best_misfit: tuple[float, str] | None = None
    for ci, cluster in enumerate(clusters):
        if objective == "cost" and cluster.instance.price_per_hour_usd is None:
            raise InputError("objective", f"cost needs a price for {priced_name(cluster)} in a --catalog file")
        cols, n_considered = enumerate_space(model, cluster, spaces[ci])
        considered += n_considered
        rejected_shape += n_considered - len(cols)
        if len(cols) == 0:
            if progress:
                progress(ci + 1, len(clusters))
            continue
        eff = efficiency_for(cluster) if efficiency_for else None
        arrays = evaluate(model, cluster, cols, eff)
        usable = cluster.gpu.hbm_gib - reserve_gib
        mem_gib = arrays.memory.total / GIB
        fits = mem_gib <= usable
        rejected_memory += int((~fits).sum())
        if not fits.any():
            short = mem_gib - usable
            j = int(np.argmin(short))
            text = f"{cluster.name}: closest is {describe_config(cols.row(j))} needing {mem_gib[j]:.1f} GiB of {usable:.1f} GiB usable ({short[j]:.1f} GiB short)"
            if best_misfit is None or short[j] < best_misfit[0]:
                best_misfit = (float(short[j]), text)
        score = np.where(fits, _score(objective, arrays, cluster, tokens), np.inf)
        all_scores.append(score[np.isfinite(score)])
        if include is not None and ci == 0:
            include_score = _included_score(model, cluster, cols, score, include)
        for j, variants in zip(*best_per_layout(cols, score, top), strict=True):
            candidates.append((float(score[j]), ci, j, cluster, cols, arrays, variants))
        if progress:
            progress(ci + 1, len(clusters))
    if not candidates:
        hint = best_misfit[1] if best_misfit else "no configuration has a valid shape"
        raise InputError(
            "model",
            f"no configuration of {model.name} fits: {hint}{_state_floor(model, clusters, reserve_gib, space)}; try more "
            f"GPUs or an instance with more HBM per GPU (e.g. p5en.48xlarge, p6-b200.48xlarge){_unsearched_levers(space)}",
        )
    candidates.sort(key=lambda c: (c[0], c[1], c[2]))
    ranked: list[TrainingEstimate] = []
    costs: list[float | None] = []
    times: list[float | None] = []
    hourly: list[float | None] = []
    for _, _, j, cluster, cols, arrays, _ in candidates[:top]:
        est = from_arrays(model, cluster, cols.row(j), arrays, j, reserve_gib=reserve_gib)
        ranked.append(est)
        seconds = tokens / est.tokens_per_s
        times.append(seconds)
        price = cluster.instance.price_per_hour_usd
        hourly.append(None if price is None else price * cluster.num_nodes)
        costs.append(seconds / 3600.0 * price * cluster.num_nodes if price is not None else None)
    rank = None
    if include_score is not None and np.isfinite(include_score):
        everything = np.concatenate(all_scores)
        rank = int(np.sum(everything < include_score)) + 1
    return PlanResult(
        included_rank=rank,
        model=model.name,
        objective=objective,
        considered=considered,
        rejected_shape=rejected_shape,
        rejected_memory=rejected_memory,
        ranked=ranked,
        cost_usd=costs,
        time_to_train_s=times,
        tokens=tokens,
        closest_misfit=best_misfit[1] if best_misfit else "",
        clusters=[c.name for c in clusters],
        num_nodes=[candidates[i][3].num_nodes for i in range(len(ranked))],
        cost_per_hour_usd=hourly,
        vpp_variants=[c[6] for c in candidates[:top]],
    )


def _supported(space: SearchSpace, cluster: Cluster) -> SearchSpace:
    """``space`` with the precisions ``cluster``'s GPU has a peak for: ``--precision bf16,fp8`` over A100 and H100
    searches bf16 on the A100 and both on the H100 (the precisions are allowed, not required; the planner refused
    the whole search, and ``scale --axis gpu`` could not compare p4d with p5 at the precision each supports). A
    GPU with none of them raises the first one's InputError (field precision), naming the ones it has."""
    known: list[str] = []
    first_error: InputError | None = None
    for precision in space.precisions:
        try:
            cluster.gpu.peak_tflops(precision)
            known.append(precision)
        except InputError as e:
            first_error = first_error or e
    if first_error is not None and not known:
        raise first_error
    return space if len(known) == len(space.precisions) else replace(space, precisions=tuple(known))


def _included_score(
    model: ModelArch, cluster: Cluster, cols: Columns[FloatArray], score: NDArray[np.float64], cfg: TrainConfig
) -> float | None:
    """The score of the enumerated row equal to ``cfg`` (None when the search space does not contain it)."""
    target = columns_from_configs([cfg])
    keys = ("tp", "pp", "dp", "cp", "ep", "vpp", "mb", "gb", "precision", "recompute", "sharding", "sp", "rc_modules")
    match = np.ones(len(cols), dtype=bool)
    for key in keys:
        want = getattr(target, key)[0]
        if key == "rc_modules" and want == RECOMPUTE_MODULE_BIT["core_attn"]:
            want = 0.0  # the planner writes Megatron's default selective set (core_attn) as "none given"
        match &= getattr(cols, key) == want
    overlap = cols.overlap_ep if cols.overlap_ep is not None else np.zeros(len(cols))
    match &= overlap == float(cfg.overlap_ep)
    match &= cols.overlap_tp == float(cfg.overlap_tp)
    hits = np.nonzero(match)[0]
    return float(score[hits[0]]) if hits.size else None
