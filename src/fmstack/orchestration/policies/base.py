"""Shared types of the scheduling policies: pending and running jobs, a capacity view, a plan.

Policies are pure: they read these views and return a :class:`Plan`; the caller (the fleet twin, or a test)
owns the state and applies the plan. Placement is asked through :class:`Capacity`, so a policy never needs to
know the topology.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True, kw_only=True, slots=True)
class PendingJob:
    """A job waiting for resources."""

    job_id: int
    num_gpus: int
    submit_s: float
    """When the job became eligible (submission, or end of a requeue delay)."""
    time_limit_s: float
    """Wall-time limit: backfill plans with start + limit (Slurm sched_config.shtml)."""
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
    user: str = "u0"
    queue: str = "default"
    priority: float = 0.0

    @property
    def expected_end_s(self) -> float:
        return self.start_s + self.time_limit_s


class Capacity(Protocol):
    """What a policy may ask of the fleet: totals, and to tentatively start a job now."""

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
