"""Strict first-in-first-out by priority, and shortest-job-first (the PAI simulator's oracle SJF).

Slurm's main scheduler walks pending jobs in priority order and, "once any job in a partition is left pending,
no other job in that partition is scheduled" (Slurm doc/html/sched_config.shtml): head-of-line blocking.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from fmstack.orchestration.policies.base import Capacity, PendingJob, Plan, RunningJob


def priority_order(pending: Collection[PendingJob]) -> list[PendingJob]:
    """Slurm's order among equals: priority (high first), then submit time, then job id."""
    return sorted(pending, key=lambda j: (-j.priority, j.submit_s, j.job_id))


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
    """Shortest job first on the true runtime (alibaba/clusterdata cluster-trace-gpu-v2020/simulator "sjf")."""

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
        return Plan(start_in_order(order, capacity))
