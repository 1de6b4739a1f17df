"""What one simulation run is: fleet, workload, policy, faults, recovery, seed."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from fmstack.errors import InputError
from fmstack.observability.health import HealthPolicy
from fmstack.orchestration.policies import KUEUE_POLICIES
from fmstack.sim.recovery import RecoverySettings

PRIORITIES = ("fifo", "multifactor", "fairtree")
MAX_JOBS = 1_000_000
"""Most jobs in one run (generated or in a trace). A run keeps every job in memory (411 MB peak RSS after building
500,000 generated jobs, 2026-11-23) and costs about 0.6 ms of wall time per job at 2,048 nodes with
``slurm-backfill`` (50,000 jobs in 30-36 s, benchmarks/bench_sim.py), so the limit is runs of about 1 GB and 10+
minutes: about four months of the GPU jobs of SenseTime's Helios trace (1,580,464 GPU jobs in six months on over
12,000 GPUs; shared/reference/orchestration-03-simulators-and-traces.md)."""
MAX_DAYS = 366.0
"""Longest horizon: a year. Fault, maintenance and sample events grow with nodes x days."""
MAX_BF_WINDOW_MIN = 43_200
"""Longest backfill window Slurm accepts (bf_window 1-43200 minutes, 30 days; slurm.conf(5))."""
MAX_NODES = 100_000
"""Largest pool (800,000 GPUs of 8-GPU nodes, beyond the largest clusters built); spares at most as many."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SimConfig:
    """One run of the fleet twin."""

    instance: str = "p5.48xlarge"
    nodes: int = 64
    days: float = 7.0
    jobs: int = 1000
    """Synthetic jobs to generate (ignored with ``trace``)."""
    trace: Path | None = None
    """A CSV trace instead of the generator."""
    load: float = 0.85
    """Offered load the generator scales runtimes to."""
    policy: str = "slurm-backfill"
    priority: str = "fifo"
    """Pending-job order: ``fifo`` (the job's own priority, then submit time: Slurm's priority/multifactor with
    its default weights, all 0) or ``multifactor`` (age, fair share and size with a fair-share site's weights,
    :data:`fmstack.orchestration.policies.priority.SITE_WEIGHTS`) or ``fairtree`` (the same with Slurm's Fair Tree
    fair-share factor, accounts = the queue of each user's first job)."""
    faults: str | None = "llama3"
    """Failure model name (fmstack.perfmodel.failures), or None for no faults."""
    planned: bool = True
    """Include planned maintenance at the failure model's planned rate."""
    recovery: RecoverySettings = field(default_factory=RecoverySettings)
    spares: int = 0
    seed: int = 1
    sample_s: float = 3600.0
    """Period of the time series."""
    bf_window_min: int = 1440
    """Backfill look-ahead (Slurm's SchedulerParameters=bf_window, minutes; slurm-backfill and easy-backfill only).
    Slurm's default 1440 (a day); slurm.conf advises at least the longest time limit: a job whose earliest start
    lies beyond the window gets no reservation, so smaller jobs may backfill ahead of it for ever."""
    health_window_h: float = HealthPolicy().recurrence_window_s / 3600.0
    """The health engine's recurrence window in hours (``HealthPolicy.recurrence_window_s``, 24 h: NVIDIA
    NVSentinel's repeated-Xid rules): a fault escalates by the node's restarts, resets and reboots in the window
    ending at it (:mod:`fmstack.sim.node_history`). ``math.inf``: the whole run (the twin before session 17)."""

    def __post_init__(self) -> None:
        for name, value in (("days", self.days), ("load", self.load), ("sample", self.sample_s)):
            if not math.isfinite(value):
                raise InputError(name, f"must be a finite number, got {value}")
        if not 0 < self.days <= MAX_DAYS:
            raise InputError("days", f"must be > 0 and <= {MAX_DAYS:g} (a year), got {self.days:g}")
        if not 1 <= self.jobs <= MAX_JOBS:
            raise InputError("jobs", f"must be 1 to {MAX_JOBS:,} (a run keeps every job in memory), got {self.jobs:,}")
        if not 1 <= self.nodes <= MAX_NODES:
            raise InputError("nodes", f"must be 1 to {MAX_NODES:,}, got {self.nodes:,}")
        if not 0 <= self.spares <= self.nodes:
            raise InputError("spares", f"must be 0 to nodes ({self.nodes:,}), got {self.spares:,}")
        if self.seed < 0:  # numpy's SeedSequence takes non-negative integers only
            raise InputError("seed", f"must be >= 0, got {self.seed}")
        if self.priority not in PRIORITIES:
            raise InputError("priority", f"unknown priority {self.priority!r}; allowed: {', '.join(PRIORITIES)}")
        if self.priority != "fifo" and self.policy in KUEUE_POLICIES:
            raise InputError("priority", f"{self.priority} is Slurm's priority; kueue orders by workload priority")
        if not 1 <= self.bf_window_min <= MAX_BF_WINDOW_MIN:
            raise InputError(
                "bf_window", f"must be 1 to {MAX_BF_WINDOW_MIN:,} minutes (Slurm's range), got {self.bf_window_min:,}"
            )
        if not self.health_window_h > 0:  # also refuses nan; inf is the whole run
            raise InputError("health_window_h", f"must be > 0 hours (inf: the whole run), got {self.health_window_h}")
        if self.sample_s <= 0:
            raise InputError("sample", f"must be > 0 s, got {self.sample_s}")

    @property
    def horizon_s(self) -> float:
        return self.days * 86400.0
