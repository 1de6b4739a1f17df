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
from operator import attrgetter
from typing import Any

import numpy as np

from fmstack.errors import InputError
from fmstack.orchestration.policies.base import Capacity, PendingJob, Plan, RunningJob
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
    """Free GPUs as a step function of time: ``free[i]`` holds on ``[times[i], times[i + 1])``.

    Kept in numpy arrays with spare room, so a new breakpoint is an in-place shift (no reallocation); a
    backfill cycle adds at most two breakpoints per tested job.
    """

    def __init__(self, now_s: float, free_now: int, *, room: int = 16) -> None:
        self._t = np.empty(max(room, 2), dtype=float)
        self._f = np.empty(max(room, 2), dtype=np.int64)
        self._t[0] = now_s
        self._f[0] = free_now
        self._n = 1

    @property
    def times(self) -> np.ndarray[Any, np.dtype[np.float64]]:
        return self._t[: self._n]

    @property
    def free(self) -> np.ndarray[Any, np.dtype[np.int64]]:
        return self._f[: self._n]

    @property
    def free_now(self) -> int:
        return int(self._f[0])

    @classmethod
    def from_releases(cls, now_s: float, free_now: int, releases: dict[float, int], *, room: int = 0) -> Profile:
        """The profile of running jobs that release ``releases[t]`` GPUs at time ``t`` (all after now)."""
        ts = sorted(releases)
        prof = cls(now_s, free_now, room=len(ts) + 1 + room)
        n = len(ts) + 1
        prof._t[1:n] = ts
        prof._f[1:n] = np.cumsum([releases[t] for t in ts], dtype=np.int64)
        prof._f[1:n] += free_now
        prof._n = n
        return prof

    @classmethod
    def from_release_arrays(
        cls,
        now_s: float,
        free_now: int,
        times: np.ndarray[Any, Any],
        released: np.ndarray[Any, Any],
        *,
        room: int = 0,
    ) -> Profile:
        """As :meth:`from_releases`, from sorted distinct release ``times`` and the GPUs ``released`` at each."""
        n = len(times) + 1
        prof = cls(now_s, free_now, room=n + room)
        prof._t[1:n] = times
        prof._f[1:n] = np.cumsum(released, dtype=np.int64) + free_now
        prof._n = n
        return prof

    def _split(self, t: float) -> int:
        n = self._n
        tt = self._t
        i = int(tt[:n].searchsorted(t, side="right")) - 1
        if tt[i] == t:
            return i
        if n == len(tt):
            self._t = tt = np.concatenate((tt, np.empty(n, dtype=float)))
            self._f = np.concatenate((self._f, np.empty(n, dtype=np.int64)))
        ff = self._f
        tt[i + 2 : n + 1] = tt[i + 1 : n]
        ff[i + 2 : n + 1] = ff[i + 1 : n]
        tt[i + 1] = t
        ff[i + 1] = ff[i]
        self._n = n + 1
        return i + 1

    def add(self, start_s: float, end_s: float, gpus: int) -> None:
        """Add ``gpus`` free GPUs on ``[start_s, end_s)`` (negative to take them); ``end_s`` may be inf."""
        i = self._split(max(start_s, float(self._t[0])))
        j = self._n if math.isinf(end_s) else self._split(end_s)
        self._f[i:j] += gpus

    def startable(self, need: int, duration_s: float) -> bool:
        """Whether ``need`` GPUs stay free from now for ``duration_s`` (:meth:`earliest` would return now)."""
        n = self._n
        rel = self._t[:n] - self._t[0]
        return need <= int(self._f[: int(rel.searchsorted(duration_s))].min())

    def last_startable(self, needs: np.ndarray[Any, Any], durations_s: np.ndarray[Any, Any], lo: int, hi: int) -> int:
        """The largest ``j`` in ``lo..hi`` that is :meth:`startable` now, or ``lo - 1`` if none is."""
        if hi < lo:
            return lo - 1
        n = self._n
        rel = self._t[:n] - self._t[0]
        low = np.minimum.accumulate(self._f[:n])
        ok = (needs[lo : hi + 1] <= low[rel.searchsorted(durations_s[lo : hi + 1]) - 1]).nonzero()[0]
        return lo + int(ok[-1]) if len(ok) else lo - 1

    def earliest(self, need: int, duration_s: float) -> float:
        """Earliest time at which ``need`` GPUs stay free for ``duration_s`` (inf if never).

        A window can only start where a run of enough free GPUs starts (index 0, or just after a short step);
        it fits if the run lasts long enough; the last run never ends.
        """
        n = self._n
        tt = self._t
        bad = (self._f[:n] < need).nonzero()[0]
        if len(bad) == 0:
            return float(tt[0])
        b0 = int(bad[0])
        if b0 > 0 and tt[b0] - tt[0] >= duration_s:
            return float(tt[0])
        if len(bad) > 1:
            s = bad[:-1] + 1
            e = bad[1:]
            ok = tt[e] - tt[s] >= duration_s
            if duration_s <= 0:  # an empty run (e == s) lasts 0 s, enough only for a 0 s window
                ok &= e > s
            k = int(ok.argmax())
            if ok[k]:
                return float(tt[s[k]])
        last = int(bad[-1]) + 1
        return float(tt[last]) if last < n else math.inf


_START = attrgetter("start_s")
_LIMIT = attrgetter("time_limit_s")
_GPUS = attrgetter("num_gpus")


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
        first = _ceil_to(now_s, res) + res
        gpn = self.gpus_per_node
        run = list(running)
        nrun = len(run)
        # the running jobs' releases, vectorised: max(ceil_to(start + limit), first), whole nodes, summed per time
        ends = np.fromiter(map(_START, run), float, nrun) + np.fromiter(map(_LIMIT, run), float, nrun)
        ends = np.maximum(np.ceil(ends / res) * res, first)
        gpus = np.fromiter(map(_GPUS, run), np.int64, nrun)
        gpus = np.where(gpus <= gpn, gpus, -(-gpus // gpn) * gpn)
        times, where = np.unique(ends, return_inverse=True)
        released = np.zeros(len(times), dtype=np.int64)
        np.add.at(released, where, gpus)
        profile = Profile.from_release_arrays(
            now_s, capacity.free_gpus, times, released, room=2 * min(len(order), p.bf_max_job_test)
        )
        horizon = math.floor((now_s + p.bf_window_s) / res) * res
        starts: list[int] = []
        reserved = 0
        tested = list(order[: p.bf_max_job_test])
        m = len(tested)
        needs_a = np.fromiter(map(_GPUS, tested), np.int64, m)
        needs_a = np.where(needs_a <= gpn, needs_a, -(-needs_a // gpn) * gpn)
        durs_a = np.maximum(res, np.ceil(np.fromiter(map(_LIMIT, tested), float, m) / res) * res)
        needs: list[int] = needs_a.tolist()
        durs: list[float] = durs_a.tolist()
        # Only starts now matter, and the profile only shrinks during a cycle: once no remaining job could start
        # now, later reservations change nothing. ``last`` is the last job that still could.
        last = profile.last_startable(needs_a, durs_a, 0, len(tested) - 1)
        # A job whose earliest start is after now and at or past the window neither starts nor reserves; nor
        # does any later job needing as many GPUs for as long.
        sizes = sorted(set(needs))
        size_ix = {g: k for k, g in enumerate(sizes)}
        never_d = [math.inf] * len(sizes)
        # never_d[k]: the shortest duration that failed so far for a size <= sizes[k]
        changed = False
        for i, job in enumerate(tested):
            if changed and last >= i and not profile.startable(needs[last], durs[last]):
                last = profile.last_startable(needs_a, durs_a, i, last - 1)
            changed = False
            if i > last:
                break
            need = needs[i]
            duration = durs[i]
            k = size_ix[need]
            if never_d[k] <= duration:
                continue
            t = profile.earliest(need, duration)
            if t <= now_s and capacity.try_start(job):
                profile.add(now_s, now_s + duration, -need)
                starts.append(job.job_id)
                changed = True
            elif t < horizon and (p.reserve_count == 0 or reserved < p.reserve_count):
                t = max(t, now_s)
                profile.add(t, t + duration, -need)
                reserved += 1
                # a reservation from t on cannot change what is free before now + durs[last]
                changed = t - now_s < durs[last]
            elif t > now_s and t >= horizon:
                for m in range(k, len(sizes)):
                    if never_d[m] > duration:
                        never_d[m] = duration
        return starts
