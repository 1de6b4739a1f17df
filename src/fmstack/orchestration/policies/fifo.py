"""Strict first-in-first-out by priority, and shortest-job-first (the PAI simulator's oracle SJF).

Slurm's main scheduler walks pending jobs in priority order and, "once any job in a partition is left pending,
no other job in that partition is scheduled" (Slurm doc/html/sched_config.shtml): head-of-line blocking.
The PAI simulator's SJF (alibaba/clusterdata cluster-trace-gpu-v2020/simulator/scheduler.py, ``alloc_job``) walks
the jobs shortest first and goes on past a job that cannot be placed (``try_allocate_job_to_cluster`` returns 0:
"try next"); it stops only when no GPU is free. Until session 17 ``sjf`` stopped at the first job that did not fit,
as ``fifo`` does.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Collection, Iterable, Iterator, KeysView, Sequence
from dataclasses import dataclass

from fmstack.orchestration.policies.base import Capacity, PendingJob, Plan, RunningJob


def _key(j: PendingJob) -> tuple[float, float, int]:
    return (-j.priority, j.submit_s, j.job_id)


GroupKey = tuple[str, float, int]
"""(queue, priority, num_gpus): pending jobs that a quota policy treats alike."""


class Group:
    """The pending jobs of one :data:`GroupKey`, in priority order, with their order keys."""

    __slots__ = ("jobs", "keys")

    def __init__(self) -> None:
        self.keys: list[tuple[float, float, int]] = []
        self.jobs: list[PendingJob] = []

    def add(self, job: PendingJob) -> None:
        key = _key(job)
        i = bisect_left(self.keys, key)
        self.keys.insert(i, key)
        self.jobs.insert(i, job)

    def remove(self, job: PendingJob) -> None:
        i = bisect_left(self.keys, _key(job))
        del self.keys[i]
        del self.jobs[i]


def group_key(j: PendingJob) -> GroupKey:
    return (j.queue, j.priority, j.num_gpus)


def group_pending(pending: Collection[PendingJob]) -> dict[GroupKey, Group]:
    """Pending jobs by (queue, priority, size), each group in priority order."""
    if isinstance(pending, PendingQueue):
        return pending.groups()
    return _grouped(sorted(pending, key=_key))


def _grouped(ordered: Iterable[PendingJob]) -> dict[GroupKey, Group]:
    """Jobs already in priority order, by (queue, priority, size): each group keeps that order."""
    out: dict[GroupKey, Group] = {}
    for j in ordered:
        g = out.get(group_key(j))
        if g is None:
            g = out[group_key(j)] = Group()
        g.keys.append(_key(j))
        g.jobs.append(j)
    return out


def priority_order(pending: Collection[PendingJob]) -> Sequence[PendingJob]:
    """Slurm's order among equals: priority (high first), then submit time, then job id."""
    if isinstance(pending, PendingQueue):
        return pending.ordered()
    return sorted(pending, key=_key)


class PendingQueue:
    """Pending jobs by id, kept in :func:`priority_order` as they come and go (a binary search per change), so
    a scheduling pass over hundreds of waiting jobs does not sort them again at every event."""

    def __init__(self) -> None:
        self._jobs: dict[int, PendingJob] = {}
        self._keys: list[tuple[float, float, int]] = []
        self._order: list[PendingJob] = []
        self._gpus: list[int] = []
        self._limits: list[float] = []
        """``num_gpus`` and ``time_limit_s`` of :attr:`_order`'s jobs, position by position (:meth:`columns`)."""
        self._groups: dict[GroupKey, Group] | None = None
        """Built on the first :meth:`groups` call (only policies that group pay for it), then kept up to date."""

    def __setitem__(self, job_id: int, job: PendingJob) -> None:
        self.pop(job_id)
        key = _key(job)
        i = bisect_left(self._keys, key)
        self._keys.insert(i, key)
        self._order.insert(i, job)
        self._gpus.insert(i, job.num_gpus)
        self._limits.insert(i, job.time_limit_s)
        self._jobs[job_id] = job
        if self._groups is not None:
            g = self._groups.get(group_key(job))
            if g is None:
                g = self._groups[group_key(job)] = Group()
            g.add(job)

    def pop(self, job_id: int, default: PendingJob | None = None) -> PendingJob | None:
        job = self._jobs.pop(job_id, None)
        if job is None:
            return default
        i = bisect_left(self._keys, _key(job))
        del self._keys[i]
        del self._order[i]
        del self._gpus[i]
        del self._limits[i]
        if self._groups is not None:
            gk = group_key(job)
            g = self._groups[gk]
            g.remove(job)
            if not g.jobs:
                del self._groups[gk]
        return job

    @classmethod
    def of(cls, jobs: Iterable[PendingJob]) -> PendingQueue:
        """A queue of ``jobs`` (distinct ids), sorted once."""
        q = cls()
        q._order = sorted(jobs, key=_key)
        q._keys = [_key(j) for j in q._order]
        q._jobs = {j.job_id: j for j in q._order}
        q._gpus = [j.num_gpus for j in q._order]
        q._limits = [j.time_limit_s for j in q._order]
        return q

    def groups(self) -> dict[GroupKey, Group]:
        """The jobs by (queue, priority, size), each group in priority order (a view: do not change it)."""
        if self._groups is None:
            self._groups = _grouped(self._order)
        return self._groups

    def ordered(self) -> Sequence[PendingJob]:
        """The jobs in priority order (a view: do not change it)."""
        return self._order

    def columns(self) -> tuple[Sequence[int], Sequence[float]]:
        """``num_gpus`` and ``time_limit_s`` of :meth:`ordered`'s jobs, position by position (views)."""
        return self._gpus, self._limits

    def __len__(self) -> int:
        return len(self._jobs)

    def ids(self) -> KeysView[int]:
        """The pending jobs' ids (a view)."""
        return self._jobs.keys()

    def __iter__(self) -> Iterator[PendingJob]:
        return iter(self._order)

    def __contains__(self, job: object) -> bool:
        return isinstance(job, PendingJob) and self._jobs.get(job.job_id) == job


def start_fitting(order: Sequence[PendingJob], capacity: Capacity) -> list[int]:
    """Start every job in ``order`` that fits, skipping those that do not, until no GPU is free (greedy)."""
    starts: list[int] = []
    for job in order:
        if capacity.free_gpus <= 0:
            break
        if capacity.try_start(job):
            starts.append(job.job_id)
    return starts


def start_in_order(order: Sequence[PendingJob], capacity: Capacity) -> list[int]:
    """Start jobs in ``order`` until the first one that does not fit (head-of-line blocking)."""
    starts: list[int] = []
    for job in order:
        if not capacity.try_start(job):
            break
        starts.append(job.job_id)
    return starts


@dataclass(frozen=True, kw_only=True, slots=True)
class FifoPolicy:
    """Strict FIFO by priority (sched/builtin)."""

    name: str = "fifo"
    interval_s: float = 0.0

    def schedule(
        self,
        now_s: float,
        pending: Collection[PendingJob],
        running: Collection[RunningJob],
        capacity: Capacity,
        *,
        periodic: bool = False,
    ) -> Plan:
        return Plan(start_in_order(priority_order(pending), capacity))


@dataclass(frozen=True, kw_only=True, slots=True)
class SjfPolicy:
    """Shortest job first on the true runtime, greedy: a job that does not fit is passed over
    (alibaba/clusterdata cluster-trace-gpu-v2020/simulator, ``alloc_policy`` 0 "short_duration_first")."""

    name: str = "sjf"
    interval_s: float = 0.0

    def schedule(
        self,
        now_s: float,
        pending: Collection[PendingJob],
        running: Collection[RunningJob],
        capacity: Capacity,
        *,
        periodic: bool = False,
    ) -> Plan:
        order = sorted(pending, key=lambda j: (j.expected_runtime_s, j.submit_s, j.job_id))
        return Plan(start_fitting(order, capacity))
