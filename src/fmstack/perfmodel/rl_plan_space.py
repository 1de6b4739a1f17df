"""What `fmstack plan rl` searches: placements, rollout TP degrees and training layouts of one RL step.

Every point is one :func:`fmstack.perfmodel.rl.estimate_rl` configuration (:class:`RLPoint`); the grids are kept
small and valid for the model so the whole space stays in the thousands (:mod:`fmstack.perfmodel.rl_plan` prunes
it further with a bound).
"""

from __future__ import annotations

from dataclasses import dataclass

from fmstack.catalog.schema import ModelArch
from fmstack.catalog.topology import Cluster
from fmstack.perfmodel.rl_config import Placement as RLPlacement

PP_CHOICES = (1, 2, 4, 8)
"""Pipeline stages searched for the trained models (veRL / NeMo RL Megatron recipes use 1-8)."""
CP_MIN_TOKENS = 4096
"""Context parallel degree cp > 1 is searched only while each rank keeps at least this many of the sequence's tokens
(ring attention pays off for long sequences: NeMo RL enables CP for 16k+ token recipes)."""
PLACEMENT_KINDS = ("colocated", "split", "async")
"""What ``plan_rl`` may choose: colocated (offload off and on), split on-policy, split asynchronous."""
MAX_ROLLOUT_DOMAINS = 2
"""Rollout TP may span this many whole NVLink domains (vLLM / SGLang TP 16 over two 8-GPU nodes) beyond one."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Placement:
    """Where rollout and training run on a cluster's nodes."""

    placement: RLPlacement
    """``colocated`` or ``split``."""
    offload: bool = False
    """Colocated: trained models parked in host memory during generation."""
    rollout_nodes: int | None = None
    async_split: bool = False
    max_trajectory_age: int = 1

    @property
    def kind(self) -> str:
        """One of ``PLACEMENT_KINDS``."""
        return "async" if self.async_split else self.placement

    @property
    def label(self) -> str:
        if self.placement == "colocated":
            return "colocated + offload" if self.offload else "colocated"
        if not self.async_split:
            return f"split {self.rollout_nodes}r"
        age = f" age {self.max_trajectory_age}" if self.max_trajectory_age > 1 else ""
        return f"async{age} {self.rollout_nodes}r"

    def train_nodes(self, nodes: int) -> int:
        return nodes if self.rollout_nodes is None else nodes - self.rollout_nodes


@dataclass(frozen=True, kw_only=True, slots=True)
class Layout:
    """The trained models' parallel layout (sharding by estimate_rl's default rules)."""

    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1

    @property
    def label(self) -> str:
        words = [f"tp{self.tp}"] + [f"{k}{v}" for k, v in (("pp", self.pp), ("cp", self.cp), ("ep", self.ep)) if v > 1]
        return " ".join(words)


@dataclass(frozen=True, kw_only=True, slots=True)
class RLPoint:
    """One configuration of the search: the cluster (index into the plan's clusters), placement, rollout TP and
    training layout."""

    cluster: int
    placement: Placement
    rollout_tp: int
    layout: Layout


def placements(nodes: int, max_age: int) -> list[Placement]:
    """Colocated with and without host offload; split with 1 .. nodes - 1 rollout nodes, on-policy, asynchronous one
    step apart and (``max_age`` > 1) asynchronous with trajectories up to ``max_age`` steps old."""
    out = [Placement(placement="colocated"), Placement(placement="colocated", offload=True)]
    for r in range(1, nodes):
        out.append(Placement(placement="split", rollout_nodes=r))
        out.append(Placement(placement="split", rollout_nodes=r, async_split=True))
        if max_age > 1:
            out.append(Placement(placement="split", rollout_nodes=r, async_split=True, max_trajectory_age=max_age))
    return out


def _heads_ok(model: ModelArch, tp: int) -> bool:
    """The serving model's TP rule (``inference_kv.check_tp``) without the domain part: heads divisible."""
    if model.num_heads % tp:
        return False
    return model.mla is not None or model.num_kv_heads % tp == 0 or tp % model.num_kv_heads == 0


def rollout_tps(model: ModelArch, cluster: Cluster, rollout_gpus: int) -> list[int]:
    """Powers of two that divide the heads and ``rollout_gpus``, inside one NVLink domain or spanning up to
    ``MAX_ROLLOUT_DOMAINS`` whole domains (what the serving model accepts)."""
    domain = cluster.gpus_per_domain
    out: list[int] = []
    tp = 1
    while tp <= min(rollout_gpus, domain * MAX_ROLLOUT_DOMAINS):
        if rollout_gpus % tp == 0 and _heads_ok(model, tp) and (tp <= domain or tp % domain == 0):
            out.append(tp)
        tp *= 2
    return out


def train_layouts(model: ModelArch, cluster: Cluster, seq_len: int) -> list[Layout]:
    """tp (powers of two in one NVLink domain, heads divisible) x pp (``PP_CHOICES`` up to the layers) x cp (while
    each rank keeps ``CP_MIN_TOKENS``) x ep (MoE: powers of two dividing the experts, up to 64). Whether a layout
    divides a given cluster's GPUs is the estimate's to say (a shape rejection)."""
    tps = [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= cluster.gpus_per_domain and _heads_ok(model, t)]
    pps = [p for p in PP_CHOICES if p <= model.num_layers]
    cps = [c for c in (1, 2, 4, 8) if c == 1 or seq_len // c >= CP_MIN_TOKENS]
    eps = [1]
    if model.moe is not None:
        eps = [e for e in (1, 2, 4, 8, 16, 32, 64) if model.moe.num_experts % e == 0]
    return [Layout(tp=t, pp=p, cp=c, ep=e) for t in tps for p in pps for c in cps for e in eps]
