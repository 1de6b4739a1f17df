"""Kueue-like ClusterQueues: nominal quota per flavor, cohorts with borrowing and lending limits, preemption,
DRS fair sharing, waitForPodsReady backoff.

Sources (kubernetes-sigs/kueue site/content/en/docs/concepts/): cluster_queue.md (quota, borrowingLimit,
lendingLimit, preemption policies and their defaults Never), preemption.md (classic candidate order: other,
borrowing, queues first, then lowest priority, then most recently admitted; reclaim within the cohort only while
the preemptor fits its nominal quota; a queue stops being a source once it no longer borrows; minimise by walking
the targets in reverse; pkg/scheduler/preemption/preemption.go ``GetTargets``, ``minimalPreemptions``),
fair_sharing.md and pkg/cache/scheduler/fair_sharing.go (DRS: borrowed = usage - nominal if > 0,
ratio = borrowed x 1000 / lendable in the cohort, share = max ratio / weight), tasks/manage/
setup_wait_for_pods_ready.md (backoff 60 s doubling to 3,600 s).

Quota accounting: a queue's guaranteed part is ``nominal - lendingLimit`` (0 with no lending limit); the cohort
pool is the sum of what each queue may lend (``lendingLimit`` or ``nominal``); a queue fits a request when its
usage stays within ``nominal + borrowingLimit`` and the cohort pool covers every queue's usage above its
guaranteed part.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from fmstack.errors import InputError

PREEMPT_WITHIN = ("Never", "LowerPriority", "LowerOrNewerEqualPriority")
PREEMPT_RECLAIM = ("Never", "LowerPriority", "Any")


@dataclass(frozen=True, kw_only=True, slots=True)
class Quota:
    """Quota of one flavor-resource (e.g. ``"h100/gpu"``) in a ClusterQueue."""

    nominal: int
    borrowing_limit: int | None = None
    """None: may borrow up to everything the cohort lends."""
    lending_limit: int | None = None
    """None: lends all of its unused nominal quota."""

    @property
    def lendable(self) -> int:
        return self.nominal if self.lending_limit is None else min(self.lending_limit, self.nominal)

    @property
    def guaranteed(self) -> int:
        return self.nominal - self.lendable


@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterQueue:
    """A ClusterQueue with its quotas, cohort, preemption policy and fair-sharing weight."""

    name: str
    quotas: Mapping[str, Quota]
    cohort: str | None = None
    within_cluster_queue: str = "Never"
    reclaim_within_cohort: str = "Never"
    fair_weight: float = 1.0

    def __post_init__(self) -> None:
        if self.within_cluster_queue not in PREEMPT_WITHIN:
            raise InputError("withinClusterQueue", f"{self.within_cluster_queue!r}; allowed: {PREEMPT_WITHIN}")
        if self.reclaim_within_cohort not in PREEMPT_RECLAIM:
            raise InputError("reclaimWithinCohort", f"{self.reclaim_within_cohort!r}; allowed: {PREEMPT_RECLAIM}")


@dataclass(frozen=True, kw_only=True, slots=True)
class Workload:
    """A workload (all its pod sets summed per flavor-resource), admitted or pending."""

    wid: int
    queue: str
    request: Mapping[str, int]
    priority: int = 0
    admitted_s: float = 0.0


Usage = Callable[[str, str], int]
"""GPUs (or any resource) a ClusterQueue uses: ``use(queue, resource)``."""


def quota_fits(cq: ClusterQueue, members: Iterable[ClusterQueue], request: Mapping[str, int], use: Usage) -> bool:
    """Whether ``request`` fits ``cq``'s quota: within ``nominal + borrowingLimit``, and the cohort pool (what each
    member may lend) covers every member's usage above its guaranteed part, ``cq``'s including the request."""
    for res, req in request.items():
        q = cq.quotas.get(res)
        if q is None:
            return False
        mine = use(cq.name, res) + req
        if q.borrowing_limit is not None and mine > q.nominal + q.borrowing_limit:
            return False
        pool = 0
        drawn = 0
        for m in members:
            mq = m.quotas.get(res)
            if mq is None:
                continue
            pool += mq.lendable
            u = mine if m.name == cq.name else use(m.name, res)
            drawn += max(0, u - mq.guaranteed)
        if drawn > pool:
            return False
    return True


UNBOUNDED = 1 << 62


class CohortQuota:
    """:func:`quota_fits` for requests of one resource, as a bound: ``n`` GPUs fit ``queue`` iff
    ``n <= max_fit(queue, use)``. Both conditions are linear in ``n``: ``use + n <= nominal + borrowingLimit``, and
    ``max(0, use + n - guaranteed) <= pool - what the other members draw`` (nothing fits if that is negative)."""

    def __init__(self, queues: Mapping[str, ClusterQueue], res: str) -> None:
        self.res = res
        self.limit: dict[str, int] = {}
        self.guaranteed: dict[str, int] = {}
        self.cohort: dict[str, str] = {}
        self.members: dict[str, list[str]] = {}
        self.pool: dict[str, int] = {}
        self.nominal: dict[str, int] = {}
        for name, cq in queues.items():
            q = cq.quotas.get(res)
            if q is None:
                continue
            self.limit[name] = UNBOUNDED if q.borrowing_limit is None else q.nominal + q.borrowing_limit
            self.guaranteed[name] = q.guaranteed
            self.nominal[name] = q.nominal
        for name, cq in queues.items():
            if name not in self.limit:
                continue
            # a queue of no cohort is a cohort of its own (keyed by its name, which no cohort shares)
            key = cq.cohort if cq.cohort is not None else f"\0{name}"
            self.cohort[name] = key
            if key not in self.members:
                group = [cq] if cq.cohort is None else [m for m in queues.values() if m.cohort == cq.cohort]
                self.members[key] = [m.name for m in group if res in m.quotas]
                self.pool[key] = sum(m.quotas[res].lendable for m in group if res in m.quotas)

    def _drawn(self, key: str, use: Callable[[str], int]) -> int:
        g = self.guaranteed
        return sum(max(0, use(m) - g[m]) for m in self.members[key])

    def max_fit(self, name: str, use: Callable[[str], int]) -> int:
        """The largest request that fits queue ``name`` with usage ``use(queue)``; -1 if none does."""
        return self._bound(name, use, self._drawn(self.cohort[name], use) if name in self.limit else 0)

    def max_fits(self, use: Callable[[str], int]) -> dict[str, int]:
        """:meth:`max_fit` of every queue that has the resource."""
        drawn = {key: self._drawn(key, use) for key in self.members}
        return {name: self._bound(name, use, drawn[key]) for name, key in self.cohort.items()}

    def _bound(self, name: str, use: Callable[[str], int], drawn_all: int) -> int:
        limit = self.limit.get(name)
        if limit is None:
            return -1
        mine = use(name)
        g = self.guaranteed[name]
        room = self.pool[self.cohort[name]] - (drawn_all - max(0, mine - g))
        if room < 0:
            return -1
        return max(min(limit - mine, room + g - mine), -1)

    def borrowing(self, name: str, use: Callable[[str], int]) -> bool:
        """Whether ``name`` uses more than its nominal quota of the resource."""
        return use(name) > self.nominal.get(name, use(name))


def drs_share(
    cq: ClusterQueue, members: Iterable[ClusterQueue], use: Callable[[str], int], extra: Mapping[str, int] | None
) -> float:
    """DRS share of ``cq`` using ``use(resource)`` plus ``extra``: max over resources of borrowed x 1000 /
    lendable in the cohort, divided by the fair-sharing weight."""
    best = 0.0
    mem = list(members)
    for res, q in cq.quotas.items():
        u = use(res) + (extra.get(res, 0) if extra else 0)
        borrowed = max(0, u - q.nominal)
        lendable = sum(m.quotas[res].lendable for m in mem if res in m.quotas)
        if borrowed > 0:
            best = max(best, borrowed * 1000 / lendable if lendable else float("inf"))
    if best == 0:
        return 0.0
    return best / cq.fair_weight if cq.fair_weight > 0 else float("inf")


@dataclass(kw_only=True, slots=True)
class KueueState:
    """ClusterQueues and the admitted workloads; all queries are pure functions of this state."""

    queues: Mapping[str, ClusterQueue]
    admitted: list[Workload] = field(default_factory=list)

    def queue(self, name: str) -> ClusterQueue:
        try:
            return self.queues[name]
        except KeyError:
            raise InputError(
                "queue", f"unknown ClusterQueue {name!r}; known: {', '.join(sorted(self.queues))}"
            ) from None

    def members(self, cq: ClusterQueue) -> list[ClusterQueue]:
        if cq.cohort is None:
            return [cq]
        return [q for q in self.queues.values() if q.cohort == cq.cohort]

    _cache: dict[tuple[str, str], int] | None = None
    _by_id: dict[int, Workload] | None = None

    def admit(self, wl: Workload) -> None:
        """Record ``wl`` as admitted."""
        self.admitted.append(wl)
        if self._cache is not None and self._by_id is not None:
            self._by_id[wl.wid] = wl
            for r, n in wl.request.items():
                self._cache[(wl.queue, r)] = self._cache.get((wl.queue, r), 0) + n

    def usage(self, name: str, res: str, removed: frozenset[int] = frozenset()) -> int:
        if self._cache is None or self._by_id is None:
            self._cache, self._by_id = {}, {}
            for w in self.admitted:
                self._by_id[w.wid] = w
                for r, n in w.request.items():
                    self._cache[(w.queue, r)] = self._cache.get((w.queue, r), 0) + n
        total = self._cache.get((name, res), 0)
        for wid in removed:
            gone = self._by_id.get(wid)
            if gone is not None and gone.queue == name:
                total -= gone.request.get(res, 0)
        return total

    def fits(self, wl: Workload, removed: frozenset[int] = frozenset()) -> bool:
        """Quota check for admitting ``wl`` after removing the workloads ``removed``."""
        cq = self.queue(wl.queue)
        return quota_fits(cq, self.members(cq), wl.request, lambda name, res: self.usage(name, res, removed))

    def borrowing(self, name: str, removed: frozenset[int] = frozenset()) -> bool:
        cq = self.queue(name)
        return any(self.usage(name, r, removed) > q.nominal for r, q in cq.quotas.items())

    def share(self, name: str, extra: Workload | None = None, removed: frozenset[int] = frozenset()) -> float:
        """DRS: max over resources of borrowed x 1000 / lendable in the cohort, divided by the weight."""
        cq = self.queue(name)
        return drs_share(
            cq, self.members(cq), lambda res: self.usage(name, res, removed), extra.request if extra else None
        )

    def needs_preemption(self, wl: Workload, removed: frozenset[int] = frozenset()) -> frozenset[str]:
        """The resources of ``wl`` that do not fit its queue's quota on their own (Kueue's "resources requiring
        preemption"); borrowing and the nominal-quota test of classic preemption look only at these."""
        cq = self.queue(wl.queue)
        mem = self.members(cq)
        return frozenset(
            r
            for r, n in wl.request.items()
            if not quota_fits(cq, mem, {r: n}, lambda name, res: self.usage(name, res, removed))
        )

    def borrowing_in(self, name: str, resources: Iterable[str], removed: frozenset[int] = frozenset()) -> bool:
        """Whether queue ``name`` uses more than its nominal quota of any of ``resources``."""
        quotas = self.queue(name).quotas
        return any(r in quotas and self.usage(name, r, removed) > quotas[r].nominal for r in resources)

    def classic_candidates(self, wl: Workload) -> list[Workload]:
        """Preemption candidates in Kueue's classic order: workloads of the other (borrowing) queues of the cohort
        first, then the lowest priority, then the most recently admitted (preemption.go ``candidatesOrdering``).

        Within the preemptor's queue the ``withinClusterQueue`` policy decides; from another queue of the cohort a
        workload is a candidate only if that queue borrows one of the resources needing preemption, under the
        ``reclaimWithinCohort`` policy."""
        cq = self.queue(wl.queue)
        need = self.needs_preemption(wl)
        out: list[Workload] = []
        for w in self.admitted:
            if not any(r in need for r in w.request):
                continue
            if w.queue == cq.name:
                ok = (cq.within_cluster_queue == "LowerPriority" and w.priority < wl.priority) or (
                    cq.within_cluster_queue == "LowerOrNewerEqualPriority"
                    and (w.priority < wl.priority or (w.priority == wl.priority and w.admitted_s > wl.admitted_s))
                )
            else:
                same_cohort = cq.cohort is not None and self.queue(w.queue).cohort == cq.cohort
                ok = (
                    same_cohort
                    and self.borrowing_in(w.queue, need)
                    and (
                        cq.reclaim_within_cohort == "Any"
                        or (cq.reclaim_within_cohort == "LowerPriority" and w.priority < wl.priority)
                    )
                )
            if ok:
                out.append(w)
        return sorted(out, key=lambda w: (w.queue == cq.name, w.priority, -w.admitted_s, w.wid))

    def preemption_targets(self, wl: Workload, candidates: Iterable[Workload] | None = None) -> list[int] | None:
        """Kueue's classic targets for ``wl`` (concepts/preemption.md "Targets", preemption.go ``GetTargets``);
        None if it cannot fit, ``[]`` if it fits already.

        If every candidate is of ``wl``'s own queue, take them allowing ``wl`` to borrow. Otherwise, and only if
        the queue uses less than its nominal quota of the resources needing preemption, take candidates (other
        queues' first) until ``wl`` fits *without borrowing* (reclaimWithinCohort applies only to a workload that
        fits its nominal quota; borrowWithinCohort, which would lift that, is not modelled and is Never). Failing
        that, take only the own queue's candidates, allowing borrowing. Each pass skips a candidate whose queue no
        longer borrows once the earlier ones are removed, and is minimised walking back."""
        if self.fits(wl):
            return []
        cands = self.classic_candidates(wl) if candidates is None else list(candidates)
        if not cands:
            return None
        same = [w for w in cands if w.queue == wl.queue]
        if len(same) < len(cands):
            need = self.needs_preemption(wl)
            cq = self.queue(wl.queue)
            if all(r in cq.quotas and self.usage(cq.name, r) < cq.quotas[r].nominal for r in need):
                targets = self._minimal(wl, cands, need, borrow=False)
                if targets:
                    return targets
        return self._minimal(wl, same, frozenset(), borrow=True)

    def _fits_as(self, wl: Workload, removed: frozenset[int], borrow: bool) -> bool:
        if not borrow:
            quotas = self.queue(wl.queue).quotas
            for r, n in wl.request.items():
                if r in quotas and self.usage(wl.queue, r, removed) + n > quotas[r].nominal:
                    return False
        return self.fits(wl, removed)

    def _minimal(
        self, wl: Workload, cands: Iterable[Workload], need: frozenset[str], *, borrow: bool
    ) -> list[int] | None:
        """Kueue's ``minimalPreemptions``: greedy in order until ``wl`` fits (a candidate of another queue only
        while that queue still borrows), then walk back dropping each target not needed."""
        chosen: list[int] = []
        for w in cands:
            if w.queue != wl.queue and not self.borrowing_in(w.queue, need, frozenset(chosen)):
                continue
            chosen.append(w.wid)
            if self._fits_as(wl, frozenset(chosen), borrow):
                break
        else:
            return None
        for wid in reversed(list(chosen)):
            trial = frozenset(c for c in chosen if c != wid)
            if self._fits_as(wl, trial, borrow):
                chosen.remove(wid)
        return chosen

    def fair_preemption_allowed(self, wl: Workload, target: Workload) -> bool:
        """LessThanOrEqualToFinalShare: share(preemptor queue with wl) <= share(target queue without target),
        and the target queue borrows."""
        if target.queue == wl.queue or not self.borrowing(target.queue):
            return False
        return self.share(wl.queue, extra=wl) <= self.share(target.queue, removed=frozenset({target.wid}))


def requeue_backoff_s(attempt: int, base_s: float = 60.0, max_s: float = 3600.0) -> float:
    """waitForPodsReady requeue delay before the ``attempt``-th retry: base x 2^(attempt-1), capped."""
    if attempt < 1:
        raise InputError("attempt", f"must be >= 1, got {attempt}")
    return float(min(base_s * 2.0 ** (attempt - 1), max_s))
