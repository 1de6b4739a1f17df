"""Recovery settings of a run: mode, checkpoint interval and cost, phase times.

The modes and their detection / restart / replacement times are the shared ones of
:mod:`fmstack.perfmodel.goodput` (``RecoveryMode``, ``RECOVERY_DEFAULTS``, cited there); the interval is fixed
or Young's / Daly's optimum for the job's MTBF (``young_interval_s``, ``daly_interval_s``). Slurm requeues a
job after ``requeue_delay_s`` (120 s, job_mgr.c); that delay is part of checkpoint-restart's restart time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fmstack.errors import InputError
from fmstack.perfmodel.goodput import (
    RECOVERY_DEFAULTS,
    RecoveryMode,
    RecoveryTimes,
    daly_interval_s,
    young_interval_s,
)

INTERVAL_RULES = ("young", "daly")
INTERVAL_RATES = ("failures", "failures+preemptions")
"""What interrupt rate Young's / Daly's interval uses: the failure model's alone (the default), or that plus the
preemption rate the run has seen so far for the job's queue and priority (:mod:`fmstack.sim.preemption_rate`)."""
SLURM_REQUEUE_DELAY_S = 120.0
MAX_CKPT_COST_S = 86_400.0
"""Longest checkpoint stall (``--ckpt-cost``): a day. Llama 3.1 405B's full training state (bf16 weights, fp32 master
weights and Adam moments: 14 B x 405e9 = 5.7 TB) written at 1 GB/s stalls a synchronous save for 1.6 h; a day is 15
times that. Before session 20 ``--ckpt-cost 1e30`` was accepted."""
MAX_CKPT_INTERVAL_MIN = 366 * 1440
"""Longest fixed checkpoint interval (``--ckpt-interval MINUTES``): 527,040 minutes, the longest run
(``sim.config.MAX_DAYS``, 366 days); a longer one never checkpoints within a run."""


def parse_mode(text: str) -> RecoveryMode:
    """``auto-resume`` or ``auto_resume`` -> RecoveryMode.auto_resume."""
    try:
        return RecoveryMode(text.strip().replace("-", "_"))
    except ValueError:
        allowed = ", ".join(m.value.replace("_", "-") for m in RecoveryMode)
        raise InputError("recovery", f"unknown recovery mode {text!r}; allowed: {allowed}") from None


@dataclass(frozen=True, kw_only=True, slots=True)
class RecoverySettings:
    """How jobs checkpoint and come back after failures."""

    mode: RecoveryMode = RecoveryMode.auto_resume
    interval: str = "young"
    """'young', 'daly', or a fixed interval in minutes as text ("30")."""
    ckpt_cost_s: float = 60.0
    """Seconds one checkpoint stalls training (C)."""
    requeue_delay_s: float = SLURM_REQUEUE_DELAY_S
    interval_rate: str = "failures"
    """One of :data:`INTERVAL_RATES`: the interrupts Young's / Daly's interval counts."""

    def __post_init__(self) -> None:
        if self.interval_rate not in INTERVAL_RATES:
            raise InputError(
                "ckpt_interval_rate", f"unknown rate {self.interval_rate!r}; allowed: {', '.join(INTERVAL_RATES)}"
            )
        if self.interval_rate != "failures" and self.interval not in INTERVAL_RULES:
            raise InputError(
                "ckpt_interval_rate",
                f"{self.interval_rate} sets young's or daly's interval; --ckpt-interval {self.interval} is fixed",
            )
        if not (math.isfinite(self.ckpt_cost_s) and 0 <= self.ckpt_cost_s <= MAX_CKPT_COST_S):
            raise InputError(
                "ckpt_cost", f"must be 0 to {MAX_CKPT_COST_S:,.0f} seconds (a day), got {self.ckpt_cost_s:g}"
            )
        if self.interval not in INTERVAL_RULES:
            try:
                minutes = float(self.interval)
            except ValueError:
                raise InputError("ckpt_interval", f"{self.interval!r}; allowed: young, daly or minutes (> 0)") from None
            if not (math.isfinite(minutes) and minutes > 0):
                raise InputError("ckpt_interval", f"must be > 0 minutes, got {self.interval}")
            if minutes > MAX_CKPT_INTERVAL_MIN:
                raise InputError(
                    "ckpt_interval",
                    f"{self.interval} minutes; allowed: at most {MAX_CKPT_INTERVAL_MIN:,} (366 days, the longest run)",
                )

    @property
    def counts_preemptions(self) -> bool:
        return self.interval_rate == "failures+preemptions"

    @property
    def times(self) -> RecoveryTimes:
        return RECOVERY_DEFAULTS[self.mode]

    def interval_s(self, mtbf_s: float) -> float:
        """Compute seconds between checkpoints for a job with this MTBF. Young's and Daly's optimum for a free
        checkpoint (``ckpt_cost_s`` 0) is 0, checkpoint all the time; the twin floors it at one training step
        (:meth:`optimum_floor_s`). Until session 17 a zero cost meant no checkpoint at all, so every failure lost all
        the work since the job's start (the Llama 3 replay: goodput 0.089 at 0 s against 0.899 at 1 s)."""
        if self.interval == "young":
            return young_interval_s(mtbf_s, self.ckpt_cost_s)
        if self.interval == "daly":
            return daly_interval_s(mtbf_s, self.ckpt_cost_s)
        return float(self.interval) * 60.0

    def optimum_floor_s(self, interval_s: float, step_s: float) -> float:
        """The interval a job uses: Young's or Daly's optimum at least one training step (a checkpoint is taken
        between steps; fmstack.perfmodel.goodput floors the interval the same way), a fixed interval as given."""
        return max(interval_s, step_s) if self.interval in INTERVAL_RULES else interval_s

    @property
    def startup_after_requeue_s(self) -> float:
        """Restart time paid when a requeued job starts again (requeue delay already waited in the queue)."""
        return max(0.0, self.times.restart_s - self.requeue_delay_s)
