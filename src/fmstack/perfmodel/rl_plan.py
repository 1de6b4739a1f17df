"""`plan_rl`: the fastest (or cheapest) way to run one PPO / GRPO step on given nodes.

The space (:mod:`fmstack.perfmodel.rl_plan_space`): per cluster, every placement (colocated with and without host
offload; split with each count of rollout nodes, on-policy or asynchronous) x rollout TP x training layout. Every
point is priced by :func:`fmstack.perfmodel.rl.estimate_rl` itself, so a row's numbers are exactly what its
``fmstack estimate rl`` command prints.

Pruning (sound, exact top rows): estimate_rl's rollout part depends only on the rollout side (cluster, placement,
rollout TP, trajectory age) and its forward and training parts only on the training side (training nodes, layout).
One estimate per rollout side and one per training side (each a real point of the space) give both parts; a point's
step is at least ``rollout + rest`` on-policy and ``max(rollout, rest)`` asynchronous (weight sync and the colocated
switch are >= 0). Points are then estimated in the order of that bound times the objective's per-cluster factor,
and the search stops once the bound exceeds the ``top``-th best row that fits: no point left can enter the ranking.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from fmstack.catalog.schema import ModelArch
from fmstack.catalog.topology import Cluster
from fmstack.errors import InputError
from fmstack.perfmodel.efficiency import EfficiencyFor
from fmstack.perfmodel.rl import RLConfig, RLEstimate, estimate_rl
from fmstack.perfmodel.rl_config import check_context, check_critic, train_master_weights, train_sharding
from fmstack.perfmodel.rl_plan_space import (
    PLACEMENT_KINDS,
    Layout,
    Placement,
    RLPoint,
    placements,
    rollout_tps,
    train_layouts,
)

OBJECTIVES = ("time", "throughput", "cost")
CAVEAT = (
    "estimate rl is optimistic against NVIDIA NeMo RL's published GRPO step times (median -50 %, fmstack validate "
    "--only rlcheck): read the step times as lower bounds; the ranking between placements and layouts is what the "
    "plan offers"
)
_NOT_REST = ("rollout", "weight_sync", "colocated_switch")
_SLACK = 1e-12
"""Relative slack on the bound: the parts are summed in another order than estimate_rl's (last-bit rounding)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RLPlanRow:
    """One ranked configuration."""

    point: RLPoint
    cluster: Cluster
    estimate: RLEstimate
    value: float
    """The objective as ranked, lower is better: step s (time), step s x GPUs (throughput), USD per step (cost)."""
    cost_per_step_usd: float | None

    @property
    def samples_per_s(self) -> float:
        cfg = self.estimate.config
        return cfg.prompts_per_step * cfg.samples_per_prompt / self.estimate.step_time_s


@dataclass(frozen=True, kw_only=True, slots=True)
class RLPlan:
    """Ranked configurations of one search and what was left out, and why."""

    model: str
    objective: str
    considered: int
    """Points in the space."""
    evaluated: int
    """Points priced with estimate_rl (the rest were rejected with their side or pruned by the bound)."""
    pruned: int
    rejected_shape: int
    """Layouts that do not divide the GPUs, or rollout engines that cannot hold their weights."""
    rejected_memory: int
    """Estimated points over GPU memory in some phase (``evaluated + pruned + rejected_shape = considered``)."""
    ranked: list[RLPlanRow]
    notes: list[str] = field(default_factory=list)

    @property
    def best(self) -> RLPlanRow:
        return self.ranked[0]


def config_of(base: RLConfig, point: RLPoint) -> RLConfig:
    """``base`` with the point's placement, rollout TP and training layout (sharding by estimate_rl's rules; the
    storage layout's separate gradient shard only where that sharding is zero1, as ``plan train`` applies it; a given
    fp32-params, and ``reduce_dtype``, only where it is FSDP)."""
    pl = point.placement
    colocated = pl.placement == "colocated"
    cfg = replace(
        base, placement=pl.placement, offload=pl.offload if colocated else None, rollout_nodes=pl.rollout_nodes,
        async_split=pl.async_split, max_trajectory_age=pl.max_trajectory_age, rollout_tp=point.rollout_tp,
        train_tp=point.layout.tp, train_pp=point.layout.pp, train_cp=point.layout.cp, train_ep=point.layout.ep,
    )  # fmt: skip
    if cfg.grad_shard_buffer and train_sharding(cfg) != "zero1":
        cfg = replace(cfg, grad_shard_buffer=False)
    if cfg.master_weights == "fp32-params" and train_sharding(cfg) not in ("fsdp", "hsdp"):
        cfg = replace(cfg, master_weights=None)  # FSDP's layout on the FSDP rows; the others keep their backend's
    if cfg.reduce_dtype is not None and train_master_weights(cfg) != "fp32-params":
        cfg = replace(cfg, reduce_dtype=None)  # FSDP's reduce_dtype, likewise on the FSDP rows only
    return cfg


def checked_base(base: RLConfig) -> RLConfig:
    """``base`` as ``plan rl`` checks it before searching: FSDP-only layout flags (``--master-weights fp32-params``,
    ``--reduce-dtype``) apply to the search's FSDP rows (:func:`config_of`), so with no fixed ``--train-sharding``
    they are checked at train tp = pp = 1, where veRL's FSDP backend runs; a fixed sharding is checked as given."""
    fsdp_only = base.master_weights == "fp32-params" or base.reduce_dtype is not None
    return replace(base, train_tp=1, train_pp=1) if fsdp_only and base.train_sharding is None else base


def _factor(cluster: Cluster, objective: str) -> float:
    if objective == "throughput":
        return float(cluster.num_gpus)
    if objective == "cost":
        return (cluster.instance.price_per_hour_usd or 0.0) * cluster.num_nodes / 3600.0
    return 1.0


def _rest_s(est: RLEstimate) -> float:
    return sum(v for k, v in est.parts_s.items() if k not in _NOT_REST)


def _rollout_side(pl: Placement) -> tuple[int | None, int]:
    """What the rollout part depends on besides the cluster and TP: the rollout nodes (None: colocated, all) and
    whether it is streamed (asynchronous with trajectories older than one step)."""
    return pl.rollout_nodes, pl.max_trajectory_age if pl.async_split else 1


class _Search:
    """The estimates of one search, each point priced at most once."""

    def __init__(self, actor: ModelArch, clusters: Sequence[Cluster], base: RLConfig, critic: ModelArch | None,
                 progress: Callable[[str], None] | None, efficiency_for: EfficiencyFor | None = None) -> None:  # fmt: skip
        self.actor, self.clusters, self.base, self.critic, self.progress = actor, clusters, base, critic, progress
        self.efficiency_for = efficiency_for
        self.done: dict[RLPoint, RLEstimate | InputError] = {}

    def estimate(self, point: RLPoint) -> RLEstimate | InputError:
        if point not in self.done:
            try:
                cluster = self.clusters[point.cluster]
                eff = None if self.efficiency_for is None else self.efficiency_for(cluster)
                self.done[point] = estimate_rl(
                    self.actor, cluster, config_of(self.base, point), critic=self.critic, efficiency=eff
                )
            except InputError as exc:
                self.done[point] = exc
            if self.progress is not None and len(self.done) % 20 == 0:
                self.progress(f"plan rl: {len(self.done):,} configurations estimated")
        return self.done[point]


def plan_rl(
    actor: ModelArch,
    clusters: Sequence[Cluster],
    base: RLConfig,
    *,
    critic: ModelArch | None = None,
    objective: str = "time",
    top: int = 10,
    max_trajectory_age: int = 1,
    kinds: Sequence[str] = PLACEMENT_KINDS,
    prune: bool = True,
    progress: Callable[[str], None] | None = None,
    efficiency_for: EfficiencyFor | None = None,
) -> RLPlan:
    """Rank every placement x rollout TP x training layout of ``base``'s step on each cluster by ``objective``
    (``prune=False``: estimate every point, for checking the bound; ``efficiency_for``: each cluster's efficiency,
    a calibration profile's, None: the default curves)."""
    if objective not in OBJECTIVES:
        raise InputError("objective", f"{objective!r} unknown; allowed: {', '.join(OBJECTIVES)}")
    if top < 1:
        raise InputError("top", f"must be >= 1, got {top}")
    if max_trajectory_age < 1:
        raise InputError("max-trajectory-age", f"must be >= 1, got {max_trajectory_age}")
    for kind in kinds:
        if kind not in PLACEMENT_KINDS:
            raise InputError("placement", f"{kind!r} unknown; allowed: {', '.join(PLACEMENT_KINDS)}")
    if not kinds:
        raise InputError("placement", f"give at least one of {', '.join(PLACEMENT_KINDS)}")
    if max_trajectory_age > 1 and "async" not in kinds:
        raise InputError("max-trajectory-age", f"{max_trajectory_age} steps of lag apply to async rows; add async to "
                         f"--placement (searched: {', '.join(kinds)})")  # fmt: skip
    check_critic(base, critic is not None)
    check_context(base, actor)
    if "colocated" not in kinds and all(c.num_nodes < 2 for c in clusters):
        raise InputError("nodes", "split and async placements put rollout and training on nodes of their own: they "
                         "need --nodes 2 or more (or add colocated to --placement)")  # fmt: skip
    notes: list[str] = []
    if objective == "cost":
        unpriced = [c for c in clusters if c.instance.price_per_hour_usd is None]
        if len(unpriced) == len(clusters):
            raise InputError("objective", f"cost needs a price for {clusters[0].instance.name}: set "
                             "price_per_hour_usd in a --catalog file, or rank by time or throughput")  # fmt: skip
        clusters = [c for c in clusters if c.instance.price_per_hour_usd is not None]
        notes += [f"{c.instance.name} skipped: no price (cost)" for c in unpriced]
    search = _Search(actor, clusters, base, critic, progress, efficiency_for)
    seq_len = base.prompt_len + base.response_len
    points: list[RLPoint] = []
    roll: dict[tuple[int, Any, int], float] = {}
    rest: dict[tuple[int, int, Layout], float] = {}
    dead: set[tuple[int, Any, int]] = set()
    for ci, cluster in enumerate(clusters):
        layouts = train_layouts(actor, cluster, seq_len)
        pls = [p for p in placements(cluster.num_nodes, max_trajectory_age) if p.kind in kinds]
        probe_rtp: dict[int, tuple[Placement, int]] = {}  # training nodes -> a placement and rollout TP that work
        for pl in pls:
            r_gpus = (pl.rollout_nodes or cluster.num_nodes) * cluster.gpus_per_node
            for rtp in rollout_tps(actor, cluster, r_gpus):
                points += [RLPoint(cluster=ci, placement=pl, rollout_tp=rtp, layout=lay) for lay in layouts]
                key = (ci, _rollout_side(pl), rtp)
                if key in dead:
                    continue
                if key in roll:
                    probe_rtp.setdefault(pl.train_nodes(cluster.num_nodes), (pl, rtp))
                    continue
                for lay in layouts:  # the rollout side's part from the first layout that prices
                    est = search.estimate(RLPoint(cluster=ci, placement=pl, rollout_tp=rtp, layout=lay))
                    if isinstance(est, RLEstimate):
                        roll[key] = est.parts_s["rollout"]
                        probe_rtp.setdefault(pl.train_nodes(cluster.num_nodes), (pl, rtp))
                        break
                else:
                    dead.add(key)
        for t_nodes, (pl, rtp) in probe_rtp.items():
            for lay in layouts:
                est = search.estimate(RLPoint(cluster=ci, placement=pl, rollout_tp=rtp, layout=lay))
                if isinstance(est, RLEstimate):
                    rest[(ci, t_nodes, lay)] = _rest_s(est)
    order: list[tuple[float, int, RLPoint]] = []
    for i, p in enumerate(points):
        c = clusters[p.cluster]
        r = roll.get((p.cluster, _rollout_side(p.placement), p.rollout_tp))
        t = rest.get((p.cluster, p.placement.train_nodes(c.num_nodes), p.layout))
        if r is not None and t is not None:
            bound = max(r, t) if p.placement.async_split else r + t
            order.append((bound * (1.0 - _SLACK) * _factor(c, objective), i, p))
    order.sort(key=lambda x: (x[0], x[1]))
    fits: list[tuple[float, int, RLPlanRow]] = []
    misses: list[tuple[float, RLEstimate]] = []
    pruned = 0
    for n, (bound, i, p) in enumerate(order):
        if prune and len(fits) >= top and bound > fits[top - 1][0]:
            pruned = sum(1 for _, _, q in order[n:] if q not in search.done)  # probes are priced already
            break
        est = search.estimate(p)
        assert isinstance(est, RLEstimate)  # both sides priced on their own
        if not est.fits:
            mem = est.memory
            misses.append((max(mem["phases_gib"].values()) - mem["usable_gib"], est))
            continue
        c = clusters[p.cluster]
        price = c.instance.price_per_hour_usd
        row = RLPlanRow(point=p, cluster=c, estimate=est, value=est.step_time_s * _factor(c, objective),
                        cost_per_step_usd=None if price is None else est.step_time_s / 3600.0 * price * c.num_nodes)  # fmt: skip
        fits.append((row.value, i, row))
        fits.sort(key=lambda x: (x[0], x[1]))
    rejected_shape = len(points) - len(order)
    if not fits:
        raise _nothing_fits(actor, clusters, search, misses)
    ranked = [row for _, _, row in fits[:top]]
    considered = len(points)
    evaluated = sum(1 for v in search.done.values() if isinstance(v, RLEstimate))
    if pruned:
        notes.append(
            f"{evaluated:,} of {considered:,} configurations estimated: {pruned:,} more have a lower bound (rollout + "
            f"training, without weight sync and switch) above the {_ordinal(top)} best row, so none of them can rank"
        )
    if len(clusters) == 1:
        notes.append("one instance and node count: time, throughput and cost rank alike (the step's batch is fixed)")
    best = ranked[0].estimate.config
    if best.async_split:
        notes.append(
            f"the best row is asynchronous: it trains on trajectories up to {best.max_trajectory_age} step(s) old "
            "(off-policy); rank only on-policy rows with --placement colocated,split"
        )
    notes.append(CAVEAT)
    return RLPlan(
        model=actor.name, objective=objective, considered=considered, evaluated=evaluated, pruned=pruned,
        rejected_shape=rejected_shape, rejected_memory=sum(1 for v in search.done.values()
                                                           if isinstance(v, RLEstimate) and not v.fits),
        ranked=ranked, notes=notes,
    )  # fmt: skip


def _ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _nothing_fits(
    actor: ModelArch, clusters: Sequence[Cluster], search: _Search, misses: list[tuple[float, RLEstimate]]
) -> InputError:
    where = " or ".join(f"{c.num_nodes} x {c.instance.name}" for c in clusters)
    helps = "more --nodes, an instance with more GPU memory, --rollout-precision fp8, or a smaller --critic"
    if not misses:
        errors = [(pt, v) for pt, v in search.done.items() if isinstance(v, InputError)]
        if not errors:
            return InputError("model", f"no placement of {actor.name} to search on {where}")
        pt, err = max(errors, key=lambda e: e[0].rollout_tp)  # the first error at the largest rollout TP tried
        return InputError(
            "model", f"no placement and layout of {actor.name} is valid on {where}; at rollout tp {pt.rollout_tp} "
            f"({pt.placement.label}, train {pt.layout.label}): {err.field}: {err.message}; {helps} would help",
        )  # fmt: skip
    over, est = min(misses, key=lambda m: m[0])
    p = next(pt for pt, v in search.done.items() if v is est)
    return InputError(
        "model", f"nothing fits in GPU memory on {where}: the closest is {p.placement.label}, rollout tp "
        f"{p.rollout_tp}, train {p.layout.label}, {over:.1f} GiB per GPU over ({est.memory['verdict']}); "
        f"{helps} would help",
    )  # fmt: skip
