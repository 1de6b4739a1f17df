"""Slurm multifactor priority: age, fair share, job size, partition, QOS; billing; usage decay.

Formulas from Slurm doc/html/priority_multifactor.shtml and doc/html/classic_fair_share.shtml:

- priority = sum over factors of weight x factor - nice, every factor in [0, 1], every weight 0 by default;
- age factor = min(wait / PriorityMaxAge, 1), PriorityMaxAge 7 days;
- job size factor = nodes / total nodes (PriorityFavorSmall=NO), or its complement for YES;
- QOS and partition factors are normalised to the largest configured value;
- classic fair share F = 2^(-U / S / d), d = FairShareDampeningFactor (default 1);
- usage decays with PriorityDecayHalfLife (7 days): u(t + dt) = u(t) * 2^(-dt / half_life);
- billing = sum of TRESBillingWeights x TRES, or the largest term with PriorityFlags=MAX_TRES.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from fmstack.errors import InputError
from fmstack.orchestration.policies.fairtree import Assoc, fair_tree_factors

DAY_S = 86400.0


def fair_share_factor(usage: float, shares: float, dampening: float = 1.0) -> float:
    """Classic fair share F = 2^(-U/S/d): no usage -> 1, usage equal to share -> 0.5, twice -> 0.25."""
    if shares <= 0:
        raise InputError("shares", f"normalised shares must be > 0, got {shares}")
    if dampening <= 0:
        raise InputError("FairShareDampeningFactor", f"must be > 0, got {dampening}")
    return float(2.0 ** (-usage / shares / dampening))


def decay(usage: float, dt_s: float, half_life_s: float = 7 * DAY_S) -> float:
    """Usage after ``dt_s`` of PriorityDecayHalfLife decay (half_life 0 = no decay)."""
    if half_life_s <= 0:
        return usage
    return float(usage * 2.0 ** (-dt_s / half_life_s))


def billing(tres: Mapping[str, float], weights: Mapping[str, float], *, max_tres: bool = False) -> float:
    """TRES billing: sum (default) or max (PriorityFlags=MAX_TRES) of weight x amount.

    Slurm's example: weights CPU=1.0, Mem=0.25G and a job with 1 CPU and 60 GiB -> 16 (sum) or 15 (max).
    Memory amounts are in GiB, as the ``G`` suffix of the weight means "per GiB".
    """
    unknown = sorted(set(tres) - set(weights))
    if unknown:
        raise InputError("TRESBillingWeights", f"no weight for {', '.join(unknown)}; weights for {sorted(weights)}")
    terms = [weights[k] * v for k, v in tres.items()]
    return max(terms, default=0.0) if max_tres else sum(terms)


@dataclass(frozen=True, kw_only=True, slots=True)
class PriorityWeights:
    """PriorityWeight* of slurm.conf (all default 0) and the knobs of the factors."""

    age: float = 0.0
    fair_share: float = 0.0
    job_size: float = 0.0
    partition: float = 0.0
    qos: float = 0.0
    max_age_s: float = 7 * DAY_S
    """PriorityMaxAge: age factor saturates here (7-0)."""
    favor_small: bool = False
    """PriorityFavorSmall."""


@dataclass(frozen=True, kw_only=True, slots=True)
class QOS:
    """A quality of service: its priority (normalised to the largest) and GPU limit per user (0 = none)."""

    name: str
    priority: int = 0
    max_gpus_per_user: int = 0


def age_factor(wait_s: float, max_age_s: float = 7 * DAY_S) -> float:
    return min(max(wait_s, 0.0) / max_age_s, 1.0)


def job_size_factor(num_nodes: int, total_nodes: int, *, favor_small: bool = False) -> float:
    if total_nodes <= 0:
        raise InputError("nodes", f"total nodes must be > 0, got {total_nodes}")
    frac = min(num_nodes / total_nodes, 1.0)
    if favor_small:
        return 1.0 - (min(num_nodes, total_nodes) - 1) / total_nodes
    return frac


def normalised(value: float, largest: float) -> float:
    return value / largest if largest > 0 else 0.0


def multifactor_priority(
    weights: PriorityWeights,
    *,
    wait_s: float,
    fair_share: float,
    num_nodes: int,
    total_nodes: int,
    partition_factor: float = 0.0,
    qos_factor: float = 0.0,
    nice: float = 0.0,
) -> float:
    """Sum of weight x factor minus nice (priority_multifactor.shtml)."""
    for name, f in (("fair_share", fair_share), ("partition_factor", partition_factor), ("qos_factor", qos_factor)):
        if not 0.0 <= f <= 1.0 or math.isnan(f):
            raise InputError(name, f"factor must be in [0, 1], got {f}")
    return (
        weights.age * age_factor(wait_s, weights.max_age_s)
        + weights.fair_share * fair_share
        + weights.job_size * job_size_factor(num_nodes, total_nodes, favor_small=weights.favor_small)
        + weights.partition * partition_factor
        + weights.qos * qos_factor
        - nice
    )


class FairShareLedger:
    """Decayed usage per user and the classic fair-share factor (an instance per simulation, no globals)."""

    def __init__(self, shares: Mapping[str, float], half_life_s: float = 7 * DAY_S) -> None:
        total = sum(shares.values())
        if total <= 0:
            raise InputError("shares", "at least one user needs a positive share")
        self.shares = {u: s / total for u, s in shares.items()}
        self.half_life_s = half_life_s
        self.usage: dict[str, float] = dict.fromkeys(shares, 0.0)
        self.last_s = 0.0

    def advance(self, now_s: float) -> None:
        dt = now_s - self.last_s
        if dt > 0:
            f = 2.0 ** (-dt / self.half_life_s) if self.half_life_s > 0 else 1.0
            for u in self.usage:
                self.usage[u] *= f
            self.last_s = now_s

    def charge(self, user: str, amount: float) -> None:
        self.usage[user] = self.usage.get(user, 0.0) + amount

    def factor(self, user: str) -> float:
        total = sum(self.usage.values())
        u = self.usage.get(user, 0.0) / total if total > 0 else 0.0
        return fair_share_factor(u, self.shares.get(user, min(self.shares.values())))


SITE_WEIGHTS = PriorityWeights(age=1000.0, fair_share=100000.0, job_size=1000.0)
"""[D] Weights of a typical fair-share site (fair share dominant, then age and size); Slurm's own defaults are
all 0, which orders jobs by submit time (see ``fifo`` in the simulator)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MultifactorSettings:
    """priority/multifactor as a simulated cluster runs it."""

    weights: PriorityWeights = SITE_WEIGHTS
    half_life_s: float = 7 * DAY_S
    """PriorityDecayHalfLife (default 7-0)."""
    calc_period_s: float = 300.0
    """PriorityCalcPeriod (default 5 min): usage is charged and priorities recomputed this often."""

    def __post_init__(self) -> None:
        if self.calc_period_s <= 0:
            raise InputError("PriorityCalcPeriod", f"must be > 0 s, got {self.calc_period_s}")
        if self.weights.max_age_s <= 0:
            raise InputError("PriorityMaxAge", f"must be > 0 s, got {self.weights.max_age_s}")


class MultifactorPriority:
    """Job priorities from age, classic fair share (equal shares per user, usage in GPU-seconds decayed with
    the half-life) and job size; a job's own ``site`` priority (a trace's priority column) is added as Slurm's
    site factor. One instance per simulation.

    ``accounts`` (user -> account) switches the fair-share factor to Fair Tree
    (:func:`fmstack.orchestration.policies.fairtree.fair_tree_factors`) over root -> accounts -> users, equal shares
    at each level, on the same decayed usage."""

    def __init__(
        self,
        settings: MultifactorSettings,
        users: list[str],
        total_nodes: int,
        accounts: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.accounts = dict(accounts) if accounts is not None else None
        self.ledger = FairShareLedger(dict.fromkeys(users, 1.0), settings.half_life_s)
        self.total_nodes = total_nodes
        self.fair: dict[str, float] = dict.fromkeys(users, 1.0)
        self.last_charge_s = 0.0

    def recalc(self, now_s: float, running: Iterable[tuple[str, int, float]]) -> None:
        """Decay usage to ``now_s``, charge (user, GPUs, start s) of running jobs since the last call, and
        update every user's fair-share factor."""
        ledger = self.ledger
        ledger.advance(now_s)
        since = self.last_charge_s
        acc: dict[str, float] = {}
        for user, gpus, start_s in running:
            acc[user] = acc.get(user, 0.0) + gpus * (now_s - (start_s if start_s > since else since))
        for user, gpu_s in acc.items():
            ledger.charge(user, gpu_s)
        self.last_charge_s = now_s
        if self.accounts is not None:
            self.fair = fair_tree_factors(self._tree())
            return
        total = sum(ledger.usage.values())
        for user, share in ledger.shares.items():
            u = ledger.usage.get(user, 0.0) / total if total > 0 else 0.0
            self.fair[user] = fair_share_factor(u, share)

    def _tree(self) -> Assoc:
        assert self.accounts is not None
        by_account: dict[str, list[Assoc]] = {}
        for user in sorted(self.ledger.shares):
            acct = self.accounts.get(user, "root")
            by_account.setdefault(acct, []).append(Assoc(name=user, usage=self.ledger.usage.get(user, 0.0)))
        return Assoc(name="root", children=[Assoc(name=a, children=u) for a, u in sorted(by_account.items())])

    def charge(self, user: str, gpu_s: float) -> None:
        """Usage of a job segment that ended between two calls (its part since the last call)."""
        self.ledger.charge(user, gpu_s)

    def priority(self, *, now_s: float, eligible_s: float, user: str, num_nodes: int, site: float = 0.0) -> float:
        """:func:`multifactor_priority` with the current fair-share factors (every factor is in [0, 1] here)."""
        w = self.settings.weights
        return site + (
            w.age * min(max(now_s - eligible_s, 0.0) / w.max_age_s, 1.0)
            + w.fair_share * self.fair.get(user, 1.0)
            + w.job_size * job_size_factor(num_nodes, self.total_nodes, favor_small=w.favor_small)
        )
