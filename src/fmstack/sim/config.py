"""What one simulation run is: fleet, workload, policy, faults, recovery, seed."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from fmstack.errors import InputError
from fmstack.sim.recovery import RecoverySettings

PRIORITIES = ("fifo", "multifactor", "fairtree")


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

    def __post_init__(self) -> None:
        for name, value in (("days", self.days), ("load", self.load), ("sample", self.sample_s)):
            if not math.isfinite(value):
                raise InputError(name, f"must be a finite number, got {value}")
        if self.days <= 0:
            raise InputError("days", f"must be > 0, got {self.days}")
        if self.spares < 0:
            raise InputError("spares", f"must be >= 0, got {self.spares}")
        if self.seed < 0:  # numpy's SeedSequence takes non-negative integers only
            raise InputError("seed", f"must be >= 0, got {self.seed}")
        if self.priority not in PRIORITIES:
            raise InputError("priority", f"unknown priority {self.priority!r}; allowed: {', '.join(PRIORITIES)}")
        if self.priority != "fifo" and self.policy == "kueue":
            raise InputError("priority", f"{self.priority} is Slurm's priority; kueue orders by workload priority")
        if self.sample_s <= 0:
            raise InputError("sample", f"must be > 0 s, got {self.sample_s}")

    @property
    def horizon_s(self) -> float:
        return self.days * 86400.0
