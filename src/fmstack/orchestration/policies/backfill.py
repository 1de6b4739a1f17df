"""Slurm-like backfill: conservative (a reservation for every tested job) and EASY (only for the top N).

Algorithm (Slurm doc/html/sched_config.shtml, doc/man/man5/slurm.conf.5, src/plugins/sched/backfill/backfill.c):
pending jobs in priority order, at most ``bf_max_job_test`` per cycle, every ``bf_interval_s``; a job starts now
only if that delays no earlier reservation; otherwise it gets a reservation at its earliest possible start
(conservative: ``reserve_count = 0`` reserves for all; ``= 1`` is EASY); the expected end of a job is its start
plus its time limit; the reservation map has ``bf_resolution_s`` slots up to ``bf_window_s`` ahead; multi-node
jobs reserve whole nodes. Between cycles the main scheduler starts jobs in strict priority order at events.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np

from fmstack.errors import InputError
from fmstack.orchestration.policies.base import Capacity, PendingJob, Plan, RunningJob, node_rounded_gpus
from fmstack.orchestration.policies.fifo import priority_order, start_in_order


@dataclass(frozen=True, kw_only=True, slots=True)
class BackfillParams:
    """SchedulerParameters of sched/backfill, with Slurm's defaults."""

    bf_interval_s: float = 30.0
    """Seconds between backfill cycles (BACKFILL_INTERVAL 30)."""
    bf_window_s: float = 1440 * 60.0
    """Look-ahead of the reservation map (1440 min)."""
    bf_resolution_s: float = 60.0
    """Time granularity of the reservation map (BACKFILL_RESOLUTION 60)."""
    bf_max_job_test: int = 500
    """Pending jobs tested per cycle (DEF_BF_MAX_JOB_TEST 500)."""
    reserve_count: int = 0
    """bf_job_part_count_reserve: 0 reserves for every tested job (conservative), N for the top N (1 = EASY)."""

    def __post_init__(self) -> None:
        if not 1 <= self.bf_interval_s <= 10800:
            raise InputError("bf_interval", f"must be in 1..10800 s, got {self.bf_interval_s}")
        if not 60 <= self.bf_window_s <= 43200 * 60:
            raise InputError("bf_window", f"must be in 1..43200 min, got {self.bf_window_s / 60:g} min")
        if not 1 <= self.bf_resolution_s <= 3600:
            raise InputError("bf_resolution", f"must be in 1..3600 s, got {self.bf_resolution_s}")
        if not 1 <= self.bf_max_job_test <= 1_000_000:
            raise InputError("bf_max_job_test", f"must be in 1..1000000, got {self.bf_max_job_test}")
        if self.reserve_count < 0:
            raise InputError("bf_job_part_count_reserve", f"must be >= 0, got {self.reserve_count}")


class Profile:
    """Free GPUs as a step function of time: ``free[i]`` holds on ``[times[i], times[i + 1])`` (numpy arrays)."""

    def __init__(self, now_s: float, free_now: int) -> None:
        self.times = np.array([now_s], dtype=float)
        self.free = np.array([free_now], dtype=np.int64)

    @classmethod
    def from_releases(cls, now_s: float, free_now: int, releases: dict[float, int]) -> Profile:
        """The profile of running jobs that release ``releases[t]`` GPUs at time ``t`` (all after now)."""
        prof = cls(now_s, free_now)
        ts = sorted(releases)
        prof.times = np.array([now_s, *ts], dtype=float)
        prof.free = free_now + np.concatenate(([0], np.cumsum([releases[t] for t in ts], dtype=np.int64)))
        return prof

    def _split(self, t: float) -> int:
        i = int(np.searchsorted(self.times, t, side="right")) - 1
        if self.times[i] == t:
            return i
        self.times = np.insert(self.times, i + 1, t)
        self.free = np.insert(self.free, i + 1, self.free[i])
        return i + 1

    def add(self, start_s: float, end_s: float, gpus: int) -> None:
        """Add ``gpus`` free GPUs on ``[start_s, end_s)`` (negative to take them); ``end_s`` may be inf."""
        i = self._split(max(start_s, float(self.times[0])))
        j = len(self.times) if math.isinf(end_s) else self._split(end_s)
        self.free[i:j] += gpus

    def earliest(self, need: int, duration_s: float) -> float:
        """Earliest time at which ``need`` GPUs stay free for ``duration_s`` (inf if never).

        A window can only start where a run of enough free GPUs starts; it fits if that run lasts long enough.
        """
        ok = self.free >= need
        if not ok.any():
            return math.inf
        run_start = np.flatnonzero(ok & np.concatenate(([True], ~ok[:-1])))
        bad = np.flatnonzero(~ok)
        k = np.searchsorted(bad, run_start)
        ends = np.full(len(run_start), math.inf)
        has_end = k < len(bad)
        ends[has_end] = self.times[bad[k[has_end]]]
        fits = np.flatnonzero(ends - self.times[run_start] >= duration_s)
        return float(self.times[run_start[fits[0]]]) if len(fits) else math.inf


def _ceil_to(t: float, res: float) -> float:
    return math.ceil(t / res) * res


@dataclass(frozen=True, kw_only=True, slots=True)
class BackfillPolicy:
    """Conservative (reserve_count 0, Slurm's default) or EASY (reserve_count 1) backfill."""

    params: BackfillParams = BackfillParams()
    gpus_per_node: int = 8
    name: str = "slurm-backfill"

    @property
    def interval_s(self) -> float:
        return self.params.bf_interval_s

    def schedule(
        self,
        now_s: float,
        pending: Collection[PendingJob],
        running: Collection[RunningJob],
        capacity: Capacity,
        *,
        periodic: bool = False,
    ) -> Plan:
        order = priority_order(pending)
        if not periodic:
            return Plan(start_in_order(order, capacity))
        return Plan(self.backfill(now_s, order, running, capacity))

    def backfill(
        self, now_s: float, order: Sequence[PendingJob], running: Collection[RunningJob], capacity: Capacity
    ) -> list[int]:
        """One backfill cycle over jobs already in priority order; returns the ids started now."""
        p = self.params
        res = p.bf_resolution_s
        releases: dict[float, int] = {}
        first = _ceil_to(now_s, res) + res
        for r in running:
            end = max(_ceil_to(r.expected_end_s, res), first)
            releases[end] = releases.get(end, 0) + node_rounded_gpus(r.num_gpus, self.gpus_per_node)
        profile = Profile.from_releases(now_s, capacity.free_gpus, releases)
        horizon = math.floor((now_s + p.bf_window_s) / res) * res
        starts: list[int] = []
        reserved = 0
        tested = list(order[: p.bf_max_job_test])
        needs = [node_rounded_gpus(j.num_gpus, self.gpus_per_node) for j in tested]
        least_after = needs[:]
        for i in range(len(needs) - 2, -1, -1):
            least_after[i] = min(needs[i], least_after[i + 1])
        for i, job in enumerate(tested):
            # only starts now matter: once no remaining job fits now, later reservations change nothing
            if int(profile.free[0]) < least_after[i]:
                break
            need = needs[i]
            duration = max(res, _ceil_to(job.time_limit_s, res))
            t = profile.earliest(need, duration)
            if t <= now_s and capacity.try_start(job):
                profile.add(now_s, now_s + duration, -need)
                starts.append(job.job_id)
            elif t < horizon and (p.reserve_count == 0 or reserved < p.reserve_count):
                t = max(t, now_s)
                profile.add(t, t + duration, -need)
                reserved += 1
        return starts
