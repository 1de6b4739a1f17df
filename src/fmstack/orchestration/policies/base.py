"""Shared types of the scheduling policies: pending and running jobs, a capacity view, a plan.

Policies are pure: they read these views and return a :class:`Plan`; the caller (the fleet twin, or a test)
owns the state and applies the plan. Placement is asked through :class:`Capacity`, so a policy never needs to
know the topology.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

UNLIMITED_PLAN_S = 365 * 86400.0
"""The time limit backfill plans a job with no limit with (Slurm ``--time=0``: "no time limit be imposed"): a year.
Slurm gives a running job with an INFINITE limit the end start + 365 days (slurmctld ``job_end_time_reset``: "secs
in year"; backfill.c ``hard_limit = YEAR_SECONDS``) and plans a pending one with its partition's MaxTime, a year
(``YEAR_MINUTES``) when that is UNLIMITED (backfill.c ``_set_backfill_timelimits``), as in the twin's one partition:
beyond any ``bf_window`` (at most 30 days), so nothing is reserved behind it."""


def planned_limit_s(time_limit_s: float) -> float:
    """The limit the scheduler plans with: ``time_limit_s``, or :data:`UNLIMITED_PLAN_S` for an unlimited (inf) one."""
    return min(time_limit_s, UNLIMITED_PLAN_S)


@dataclass(frozen=True, kw_only=True, slots=True)
class PendingJob:
    """A job waiting for resources."""

    job_id: int
    num_gpus: int
    submit_s: float
    """When the job became eligible (submission, or end of a requeue delay)."""
    time_limit_s: float
    """Wall-time limit: backfill plans with start + limit (Slurm sched_config.shtml); finite: a job without a limit
    is planned with :data:`UNLIMITED_PLAN_S` (:func:`planned_limit_s`)."""
    user: str = "u0"
    queue: str = "default"
    priority: float = 0.0
    """Larger runs first (Slurm multifactor priority, Kueue workload priority)."""
    expected_runtime_s: float = 0.0
    """Oracle runtime for SJF-like policies (PAI simulator's SJF uses the true duration)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RunningJob:
    """A job holding resources."""

    job_id: int
    num_gpus: int
    start_s: float
    time_limit_s: float
    """Finite, as :attr:`PendingJob.time_limit_s`: a job without a limit ends, as planned, a year after its start."""
    user: str = "u0"
    queue: str = "default"
    priority: float = 0.0

    @property
    def expected_end_s(self) -> float:
        return self.start_s + self.time_limit_s


PreemptKey = tuple[int, float, int]
"""(whole-number priority, -start_s, job_id): preemption order within a queue, lowest priority then newest first
(Kueue's classic order; its workload priority is an int32)."""


def preempt_key(job: RunningJob) -> PreemptKey:
    return (int(job.priority), -job.start_s, job.job_id)


class RunningSet:
    """Running jobs by id, with the GPUs held per (queue, priority) and each queue's jobs in preemption order
    kept up to date as jobs come and go (as :class:`fmstack.orchestration.policies.fifo.PendingQueue` keeps the
    pending order), so a policy need not add up or sort every running job at every event."""

    def __init__(self) -> None:
        self._jobs: dict[int, RunningJob] = {}
        self.gpus_by_queue_priority: dict[tuple[str, float], int] = {}
        self._by_queue: dict[str, tuple[list[PreemptKey], list[RunningJob]]] | None = None
        """Built on the first :meth:`preemption_order` call, then kept up to date."""
        self._slot: dict[int, int] | None = None
        """Each job's index in :attr:`_ends` / :attr:`_gpus`; built on the first :meth:`ends_and_gpus` call."""
        self._ids: list[int] = []
        self._ends = np.empty(0, dtype=np.float64)
        self._gpus = np.empty(0, dtype=np.int64)

    def _put(self, job: RunningJob) -> None:
        assert self._slot is not None
        n = len(self._ids)
        if n == len(self._ends):
            cap = max(64, 2 * n)
            self._ends = np.resize(self._ends, cap)
            self._gpus = np.resize(self._gpus, cap)
        self._slot[job.job_id] = n
        self._ids.append(job.job_id)
        self._ends[n] = job.start_s + job.time_limit_s
        self._gpus[n] = job.num_gpus

    def _drop(self, job_id: int) -> None:
        assert self._slot is not None
        i = self._slot.pop(job_id)
        last = self._ids.pop()
        if last != job_id:  # the last entry moves into the hole
            n = len(self._ids)
            self._ids[i] = last
            self._slot[last] = i
            self._ends[i] = self._ends[n]
            self._gpus[i] = self._gpus[n]

    def ends_and_gpus(self) -> tuple[np.ndarray[Any, np.dtype[np.float64]], np.ndarray[Any, np.dtype[np.int64]]]:
        """Every running job's expected end (``start_s + time_limit_s``) and GPUs, as arrays in no set order
        (views: do not change them); kept up to date as jobs come and go once first asked for, so a backfill
        cycle does not walk every running job."""
        if self._slot is None:
            self._slot = {}
            for job in self._jobs.values():
                self._put(job)
        n = len(self._ids)
        return self._ends[:n], self._gpus[:n]

    def __setitem__(self, job_id: int, job: RunningJob) -> None:
        self.pop(job_id)
        self._jobs[job_id] = job
        key = (job.queue, job.priority)
        self.gpus_by_queue_priority[key] = self.gpus_by_queue_priority.get(key, 0) + job.num_gpus
        if self._slot is not None:
            self._put(job)
        if self._by_queue is not None:
            keys, jobs = self._by_queue.setdefault(job.queue, ([], []))
            i = bisect_left(keys, preempt_key(job))
            keys.insert(i, preempt_key(job))
            jobs.insert(i, job)

    def pop(self, job_id: int, default: RunningJob | None = None) -> RunningJob | None:
        job = self._jobs.pop(job_id, None)
        if job is None:
            return default
        key = (job.queue, job.priority)
        left = self.gpus_by_queue_priority[key] - job.num_gpus
        if left:
            self.gpus_by_queue_priority[key] = left
        else:
            del self.gpus_by_queue_priority[key]
        if self._slot is not None:
            self._drop(job_id)
        if self._by_queue is not None:
            keys, jobs = self._by_queue[job.queue]
            i = bisect_left(keys, preempt_key(job))
            del keys[i]
            del jobs[i]
        return job

    def preemption_order(self, queue: str) -> tuple[Sequence[PreemptKey], Sequence[RunningJob]]:
        """The keys and jobs of ``queue`` in :data:`PreemptKey` order (views: do not change them)."""
        if self._by_queue is None:
            self._by_queue = {}
            for job in sorted(self._jobs.values(), key=preempt_key):
                keys, jobs = self._by_queue.setdefault(job.queue, ([], []))
                keys.append(preempt_key(job))
                jobs.append(job)
        return self._by_queue.get(queue, ([], []))

    def ids(self) -> list[int]:
        return list(self._jobs)

    def __len__(self) -> int:
        return len(self._jobs)

    def __iter__(self) -> Iterator[RunningJob]:
        return iter(self._jobs.values())

    def __contains__(self, job: object) -> bool:
        return isinstance(job, RunningJob) and self._jobs.get(job.job_id) == job


class Capacity(Protocol):
    """What a policy may ask of the fleet: totals, and to tentatively start a job now.

    Placement is monotone: a job that could not be placed cannot be placed after more jobs were placed (the
    free capacity only shrinks), so a policy may skip trying the same size again within one pass.
    """

    @property
    def total_gpus(self) -> int: ...

    @property
    def free_gpus(self) -> int: ...

    def try_start(self, job: PendingJob) -> bool:
        """Place the whole job now (all or nothing); True if placed, and the free capacity shrinks."""
        ...


@dataclass(kw_only=True, slots=True)
class CountCapacity:
    """A capacity that only counts GPUs, rounded to whole nodes for jobs larger than a node (for tests)."""

    total_gpus: int
    free_gpus: int
    gpus_per_node: int = 8
    started: list[int] = field(default_factory=list)

    def try_start(self, job: PendingJob) -> bool:
        need = node_rounded_gpus(job.num_gpus, self.gpus_per_node)
        if need > self.free_gpus:
            return False
        self.free_gpus -= need
        self.started.append(job.job_id)
        return True


def node_rounded_gpus(num_gpus: int, gpus_per_node: int) -> int:
    """GPUs a job blocks: multi-node jobs take whole nodes (Slurm backfill "reserves whole nodes")."""
    if num_gpus <= gpus_per_node:
        return num_gpus
    return -(-num_gpus // gpus_per_node) * gpus_per_node


@dataclass(frozen=True, slots=True)
class Plan:
    """A policy's decision: jobs to start now (in order) and running jobs to preempt first."""

    starts: list[int]
    preempt: list[int] = field(default_factory=list)
    preemptor: int | None = None
    """The pending job the preemptions make room for: the caller starts it on the capacity they free before
    anything else may take it (Kueue admits the preemptor once its victims are gone)."""
