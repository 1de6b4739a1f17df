"""The Kueue-like policy the fleet twin runs: one ClusterQueue per queue in a shared cohort, DRS fair-sharing
admission order, gang (all-or-nothing) admission with topology placement from the capacity, and classic
preemption (within a queue by priority, reclaim within the cohort).

Nominal quota: the fleet's GPUs split evenly among the queues (remainder to the first); a documented default
([D]) a user changes with ``nominal_gpus``.

Order (kueue concepts/cluster_queue.md "Queueing strategy", fair_sharing.md): within a ClusterQueue, workloads by
priority then creation time (here: when the job became eligible, as Kueue's requeuingTimestamp Eviction); across
queues, each queue's head is taken in order of the DRS share its queue would have with that head admitted (lowest
first, recomputed after every admission, as Kueue's fair-sharing iterator), then priority, then creation time.
With ``BestEffortFIFO`` (the default) a head that can neither be admitted nor preempt is set aside for this pass
and the next workload of its queue becomes the head; with ``StrictFIFO`` it holds its queue.

A pass takes heads in that order; each is admitted if it fits the quota and the capacity places it, set aside if
it fits but cannot be placed, or, if it does not fit, preempts the classic targets (the pass ends there; the plan
names it as ``preemptor``, and the caller gives it the capacity the victims free) or is set aside when no targets
exist. A workload admitted in this pass is never a target (Kueue computes targets from the snapshot of the
cycle, before the cycle admits anyone), so a pass cannot undo its own admissions.

Workloads of one (queue, priority, size) group get the same answer until the pass admits something, so the pass
works on groups: a group's status (fits / can preempt / neither) comes from the quota arithmetic of
:func:`fmstack.orchestration.policies.kueue.max_fit` on the GPUs in use per queue (kept up to date as the pass
admits) and the running workloads per (queue, priority) at the pass start (kept by :class:`RunningSet`). The targets
themselves come from :meth:`KueueState.preemption_targets`.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from heapq import merge

from fmstack.errors import InputError
from fmstack.orchestration.policies.base import (
    Capacity,
    PendingJob,
    Plan,
    PreemptKey,
    RunningJob,
    RunningSet,
    preempt_key,
)
from fmstack.orchestration.policies.fifo import group_pending
from fmstack.orchestration.policies.kueue import ClusterQueue, CohortQuota, KueueState, Quota, Workload, drs_share

RES = "gpu"
QUEUEING_STRATEGIES = ("BestEffortFIFO", "StrictFIFO")
_FIT, _PREEMPT, _NONE = range(3)
_OrderKey = tuple[float, tuple[float, float, int]]
"""(DRS share of the head's queue with the head admitted, (-priority, submit_s, job_id))."""


_Candidate = tuple[bool, int, float, int, str, int]


def _stream(
    flag: bool,
    queue: str,
    keys: Sequence[PreemptKey],
    jobs: Sequence[RunningJob],
    end: int,
) -> Iterator[_Candidate]:
    """One queue's candidates (the first ``end`` running jobs) in order."""
    return ((flag, *keys[i], queue, jobs[i].num_gpus) for i in range(end))


class _Queues:
    """The ClusterQueues of one fleet size, their cohort members and quota arithmetic (fixed for a run)."""

    def __init__(self, queues: dict[str, ClusterQueue]) -> None:
        self.queues = queues
        self.quota = CohortQuota(queues, RES)
        helper = KueueState(queues=queues)
        self.member_queues = {name: helper.members(cq) for name, cq in queues.items()}
        self.members = {name: [m.name for m in ms] for name, ms in self.member_queues.items()}


class _Pass:
    """Quota state of one pass: GPUs in use per queue, updated as the pass admits workloads, and the running
    workloads per (queue, priority) at the pass start (the preemption candidates: a workload admitted in this
    pass is never one, as Kueue computes targets when it nominates the heads, before the cycle admits any)."""

    def __init__(self, policy: KueuePolicy, qs: _Queues, now_s: float, running: Collection[RunningJob]) -> None:
        self.qs = qs
        self.queues = qs.queues
        self.quota = qs.quota
        self.members = qs.members
        self.now_s = now_s
        self.running = running
        self.by_qp: dict[tuple[str, int], int] = {}
        self.order: Callable[[str], tuple[Sequence[PreemptKey], Sequence[RunningJob]]]
        if isinstance(running, RunningSet):
            items = list(running.gpus_by_queue_priority.items())
            self.order = running.preemption_order
        else:
            items = [((r.queue, r.priority), r.num_gpus) for r in running]
            by_queue: dict[str, list[RunningJob]] = {}
            for r in sorted(running, key=preempt_key):
                by_queue.setdefault(r.queue, []).append(r)
            self.order = lambda q: ([preempt_key(r) for r in by_queue.get(q, [])], by_queue.get(q, []))
        for (q, p), n in items:
            self.by_qp[(q, int(p))] = self.by_qp.get((q, int(p)), 0) + n
        self.use: dict[str, int] = {}
        for (q, _), n in self.by_qp.items():
            self.use[q] = self.use.get(q, 0) + n
        # LowerOrNewerEqualPriority also takes same-priority workloads admitted after the preemptor (now)
        self.newer: dict[tuple[str, int], int] = {}
        if policy.within_cluster_queue == "LowerOrNewerEqualPriority":
            for r in running:
                if r.start_s > now_s:
                    self.newer[(r.queue, int(r.priority))] = self.newer.get((r.queue, int(r.priority)), 0) + r.num_gpus
        self.admitted: list[Workload] = []
        self._fit: dict[str, int] | None = None
        self._borrow: dict[str, bool] = {}
        self._preempt: dict[tuple[str, int], int] = {}
        self._share: dict[tuple[str, int], float] = {}

    def share(self, q: str, n: int) -> float:
        """DRS share of queue ``q`` with ``n`` more GPUs at its usage now, this pass's admissions included (as
        KueueState.share; Kueue's fair-sharing iterator computes it on the snapshot that each admission updates)."""
        s = self._share.get((q, n))
        if s is None:
            u = self.use.get(q, 0)
            s = self._share[(q, n)] = drs_share(
                self.queues[q], self.qs.member_queues[q], lambda res: u if res == RES else 0, {RES: n}
            )
        return s

    def status(self, q: str, p: int, n: int) -> int:
        """Whether ``n`` GPUs of priority ``p`` fit queue ``q`` now, or would after the preemptions of
        :meth:`targets` (exactly: :meth:`targets` finds targets iff this says _PREEMPT)."""
        if self._fit is None:
            self._fit = self.quota.max_fits(lambda m: self.use.get(m, 0))
        if n <= self._fit.get(q, -1):
            return _FIT
        pre = self._preempt.get((q, p))
        if pre is None:
            cq = self.queues[q]
            own = self._own_removable(cq, p)
            # own candidates only, borrowing allowed (the first and last heuristics of preemption.md)
            pre = self.quota.max_fit(q, lambda m: self.use.get(m, 0) - (own if m == q else 0))
            nominal = self.quota.nominal.get(q, 0)
            if self.use.get(q, 0) < nominal:
                # every candidate, the preemptor within its nominal quota: the greedy pass takes from another
                # queue only while it borrows, which depends on that queue alone, so what it can take at most is
                # that queue's walk on its own; fitting is monotone in what is taken, so this bound is exact
                gone = {q: own}
                for m in self.members[q]:
                    stream = self._queue_stream(cq, m, p) if m != q else None
                    if stream is None:
                        continue
                    u, nom, take = self.use.get(m, 0), self.quota.nominal.get(m, 0), 0
                    for *_, g in stream:
                        if u - take <= nom:
                            break
                        take += g
                    if take:
                        gone[m] = take
                if len(gone) > 1:
                    bound = self.quota.max_fit(q, lambda m: self.use.get(m, 0) - gone.get(m, 0))
                    pre = max(pre, min(bound, nominal - self.use.get(q, 0) + own))
            self._preempt[(q, p)] = pre
        return _PREEMPT if n <= pre else _NONE

    def _borrowing(self, name: str) -> bool:
        b = self._borrow.get(name)
        if b is None:
            u = self.use.get(name, 0)
            b = self._borrow[name] = any(
                (u if r == RES else 0) > q.nominal for r, q in self.queues[name].quotas.items()
            )
        return b

    def _lower(self, q: str, p: int) -> int:
        return sum(n for (qq, pp), n in self.by_qp.items() if qq == q and pp < p)

    def _own_removable(self, cq: ClusterQueue, p: int) -> int:
        """GPUs of the classic candidates of a priority-``p`` workload in its own queue ``cq``."""
        if cq.within_cluster_queue == "Never":
            return 0
        return self._lower(cq.name, p) + self.newer.get((cq.name, p), 0)

    def _workload(self, job: PendingJob) -> Workload:
        return Workload(
            wid=job.job_id, queue=job.queue, request={RES: job.num_gpus}, priority=int(job.priority),
            admitted_s=self.now_s,
        )  # fmt: skip

    def admit(self, job: PendingJob) -> None:
        wl = self._workload(job)
        self.admitted.append(wl)
        self.use[job.queue] = self.use.get(job.queue, 0) + job.num_gpus
        self._fit = None
        self._borrow.clear()
        self._preempt.clear()
        self._share.clear()

    def _queue_stream(self, cq: ClusterQueue, m: str, p: int) -> Iterator[_Candidate] | None:
        """Queue ``m``'s classic candidates for a priority-``p`` workload of ``cq`` (its workloads running at the
        pass start), in order; None if none can be."""
        if m == cq.name:
            mode = "LowerPriority" if cq.within_cluster_queue == "LowerPriority" else "Never"
        elif cq.cohort is not None and self.queues[m].cohort == cq.cohort and self._borrowing(m):
            mode = cq.reclaim_within_cohort
        else:
            mode = "Never"
        if mode == "Never":
            return None
        keys, jobs = self.order(m)
        end = bisect_left(keys, (p,)) if mode == "LowerPriority" else len(keys)
        return _stream(m == cq.name, m, keys, jobs, end)

    def _candidates(self, cq: ClusterQueue, p: int, *, own: bool = True, others: bool = True) -> Iterator[_Candidate]:
        """Classic candidates as (own queue, priority, -admitted_s, wid, queue, GPUs), in Kueue's order: other
        queues' (those borrowing at the pass's current usage) first, then by priority, newest first."""
        streams: list[Iterator[_Candidate]] = []
        for m in self.queues:
            if (own if m == cq.name else others) and (stream := self._queue_stream(cq, m, p)) is not None:
                streams.append(stream)
        return merge(*streams)

    def targets(self, job: PendingJob) -> list[int] | None:
        """As :meth:`KueueState.preemption_targets` for ``job``: with candidates of other queues and the queue
        under its nominal quota, candidates in classic order until it fits without borrowing; failing that (or
        with none), only its own queue's candidates, borrowing allowed; each minimised walking back."""
        cq = self.queues[job.queue]
        if cq.within_cluster_queue == "LowerOrNewerEqualPriority":
            return self._reference_targets(job)
        q, n, p = job.queue, job.num_gpus, int(job.priority)
        if n <= self.quota.max_fit(q, lambda m: self.use.get(m, 0)):
            return []
        if next(self._candidates(cq, p, own=False), None) is not None and self.use.get(q, 0) < self.quota.nominal[q]:
            targets = self._minimal(q, n, self._candidates(cq, p), borrow=False)
            if targets:
                return targets
        return self._minimal(q, n, self._candidates(cq, p, others=False), borrow=True)

    def _minimal(self, q: str, n: int, cands: Iterator[_Candidate], *, borrow: bool) -> list[int] | None:
        """Kueue's ``minimalPreemptions``: take candidates until ``n`` GPUs fit ``q`` (skipping one of another
        queue that no longer borrows), then drop, walking back, each one not needed."""
        nominal = self.quota.nominal
        gone: dict[str, int] = {}

        def use(m: str) -> int:
            return self.use.get(m, 0) - gone.get(m, 0)

        def fits() -> bool:
            return n <= self.quota.max_fit(q, use) and (borrow or use(q) + n <= nominal[q])

        chosen: list[tuple[int, str, int]] = []
        for _, _, _, wid, m, g in cands:
            if m != q and use(m) <= nominal[m]:
                continue
            chosen.append((wid, m, g))
            gone[m] = gone.get(m, 0) + g
            if fits():
                break
        else:
            return None
        for c in reversed(list(chosen)):
            gone[c[1]] -= c[2]
            if fits():
                chosen.remove(c)
            else:
                gone[c[1]] += c[2]
        return [c[0] for c in chosen]

    def _reference_targets(self, job: PendingJob) -> list[int] | None:
        state = KueueState(queues=self.queues)
        for r in self.running:
            state.admitted.append(
                Workload(wid=r.job_id, queue=r.queue, request={RES: r.num_gpus}, priority=int(r.priority),
                         admitted_s=r.start_s)
            )  # fmt: skip
        state.admitted.extend(self.admitted)
        wl = self._workload(job)
        now = {w.wid for w in self.admitted}
        return state.preemption_targets(wl, [w for w in state.classic_candidates(wl) if w.wid not in now])


@dataclass(frozen=True, kw_only=True, slots=True)
class KueuePolicy:
    """Kueue-like admission with quotas, cohort borrowing, fair sharing and preemption."""

    queues: tuple[str, ...] = ("default",)
    nominal_gpus: Mapping[str, int] = field(default_factory=dict)
    """Nominal GPU quota per queue; empty: an even split of the fleet."""
    borrowing_limit_gpus: int | None = None
    within_cluster_queue: str = "LowerPriority"
    reclaim_within_cohort: str = "Any"
    queueing_strategy: str = "BestEffortFIFO"
    """ClusterQueue ``queueingStrategy``: ``BestEffortFIFO`` (Kueue's default: a head that cannot be admitted is
    set aside and the next workload of the queue is tried) or ``StrictFIFO`` (it holds the whole queue)."""
    name: str = "kueue"
    interval_s: float = 0.0
    _quotas: dict[int, _Queues] = field(default_factory=dict, init=False, repr=False, compare=False)
    """ClusterQueues and their quota arithmetic per fleet size (they depend on nothing else)."""

    def __post_init__(self) -> None:
        if self.queueing_strategy not in QUEUEING_STRATEGIES:
            raise InputError(
                "queueing_strategy", f"{self.queueing_strategy!r}; allowed: {', '.join(QUEUEING_STRATEGIES)}"
            )

    def cluster_queues(self, total_gpus: int) -> dict[str, ClusterQueue]:
        n = len(self.queues)
        out: dict[str, ClusterQueue] = {}
        for i, q in enumerate(self.queues):
            nominal = self.nominal_gpus.get(q, total_gpus // n + (total_gpus % n if i == 0 else 0))
            out[q] = ClusterQueue(
                name=q,
                quotas={RES: Quota(nominal=nominal, borrowing_limit=self.borrowing_limit_gpus)},
                cohort="fleet",
                within_cluster_queue=self.within_cluster_queue,
                reclaim_within_cohort=self.reclaim_within_cohort,
            )
        return out

    def schedule(
        self,
        now_s: float,
        pending: Collection[PendingJob],
        running: Collection[RunningJob],
        capacity: Capacity,
        *,
        periodic: bool = False,
    ) -> Plan:
        qs = self._quotas.get(capacity.total_gpus)
        if qs is None:
            qs = self._quotas[capacity.total_gpus] = _Queues(self.cluster_queues(capacity.total_gpus))
        pas = _Pass(self, qs, now_s, running)
        groups = [(q, int(p), n, g) for (q, p, n), g in group_pending(pending).items() if q in qs.queues]
        by_queue: dict[str, list[int]] = {}
        for i, grp in enumerate(groups):
            by_queue.setdefault(grp[0], []).append(i)
        at = len(groups) * [0]
        cursor: dict[str, tuple[float, float, int]] = {}  # each queue's last workload taken in this pass
        blocked: set[str] = set()  # StrictFIFO queues whose head can do nothing in this pass
        strict = self.queueing_strategy == "StrictFIFO"
        starts: list[int] = []
        no_room: set[int] = set()  # sizes the capacity could not place in this pass (it only shrinks)

        def idle(q: str, p: int, n: int) -> bool:
            st = pas.status(q, p, n)
            return st == _NONE or (st == _FIT and n in no_room)

        while True:
            best: _OrderKey | None = None
            pick = -1
            for q, members in by_queue.items():
                if q in blocked:
                    continue
                head: tuple[tuple[float, float, int], int] | None = None
                last = cursor.get(q)
                for i in members:
                    _, p, n, g = groups[i]
                    k = at[i]
                    if last is not None and k < len(g.keys) and g.keys[k] <= last:
                        k = at[i] = bisect_right(g.keys, last, lo=k)
                    if k >= len(g.keys) or (not strict and idle(q, p, n)):
                        continue
                    if head is None or g.keys[k] < head[0]:
                        head = (g.keys[k], i)
                if head is None:
                    continue
                _, p, n, _ = groups[head[1]]
                if strict and idle(q, p, n):
                    blocked.add(q)  # the head neither fits nor can preempt: it holds the queue (StrictFIFO)
                    continue
                key = (pas.share(q, n), head[0])
                if best is None or key < best:
                    best, pick = key, head[1]
            if best is None:
                return Plan(starts)
            q, p, n, g = groups[pick]
            job = g.jobs[at[pick]]
            cursor[q] = g.keys[at[pick]]
            at[pick] += 1
            if pas.status(q, p, n) == _FIT:
                if capacity.try_start(job):
                    pas.admit(job)
                    starts.append(job.job_id)
                    continue
                no_room.add(n)
            else:
                targets = pas.targets(job)
                # gang admission needs a placement: preempt only if the job can then be placed (a capacity that
                # can tell, as the fleet twin's); otherwise a job that fits the quota but not the topology would
                # evict the same small jobs over and over, each coming straight back
                can_place = getattr(capacity, "can_place_after", None)
                if targets and (can_place is None or can_place(job.num_gpus, targets)):
                    return Plan(starts, preempt=targets, preemptor=job.job_id)
            if strict:
                blocked.add(q)
