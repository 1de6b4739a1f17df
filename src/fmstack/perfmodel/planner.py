"""The planner: enumerate every training configuration, prune, evaluate vectorised, rank.

The space (:mod:`fmstack.perfmodel.planner_space`, re-exported here): tp, pp, virtual stages, cp, dp, ep,
micro-batch, recomputation, sharding, precision, with its shape rules as NumPy masks; survivors run through the same vectorised step model the single
estimate uses (:func:`fmstack.perfmodel.step.step_model`), so both paths give identical numbers. The ranking holds each layout
once, with its best virtual-stage count (:mod:`fmstack.perfmodel.plan_fold`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fmstack.catalog.schema import ModelArch
from fmstack.catalog.topology import Cluster
from fmstack.errors import InputError
from fmstack.perfmodel.batch_limits import check_batch, check_tokens
from fmstack.perfmodel.columns import (
    RECOMPUTE_MODULE_BIT,
    Columns,
    columns_from_configs,
)
from fmstack.perfmodel.config import (
    GRAD_DTYPE_BYTES,
    TrainConfig,
    check_search_layout,
    check_seq_len,
    describe_config,
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
from fmstack.perfmodel.planner_space import SearchSpace, batch_limit, enumerate_space
from fmstack.perfmodel.pricing import priced_name
from fmstack.perfmodel.step import StepArrays, step_model
from fmstack.perfmodel.training import TrainingEstimate, from_arrays

OBJECTIVES = ("time", "cost", "mfu")
__all__ = [
    "OBJECTIVES",
    "PlanResult",
    "SearchSpace",
    "enumerate_space",
    "evaluate",
    "plan_training",
]


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
    check_tokens(tokens)
    if top < 1:
        raise InputError("top", f"must be >= 1, got {top}")
    space = space or SearchSpace()
    if space.seq_len <= 0:
        raise InputError("seq_len", f"must be > 0, got {space.seq_len}")
    check_seq_len(space.seq_len, model)
    if space.global_batch is not None:
        check_batch("global_batch", space.global_batch)
    check_search_layout(space.precisions, space.optimizer_state_dtype, space.master_weights, space.fp8_param_gather,
                        grad_shard_buffer=space.grad_shard_buffer, shardings=space.sharding,
                        grad_dtype=space.grad_dtype, reduce_dtype=space.reduce_dtype)  # fmt: skip
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
    if not candidates and best_misfit is None and clusters:  # no row had a valid shape: the batch limited them all
        others = "; the other clusters searched are limited likewise" if len(clusters) > 1 else ""
        raise InputError("global_batch", f"no layout of {model.name} has a valid shape: "
                         f"{batch_limit(model, clusters[0], spaces[0])}{others}")  # fmt: skip
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
