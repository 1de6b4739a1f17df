"""Slurm-like backfill: conservative (a reservation for every tested job) and EASY (only for the top N).

Algorithm (Slurm doc/html/sched_config.shtml, doc/man/man5/slurm.conf.5, src/plugins/sched/backfill/backfill.c):
pending jobs in priority order, at most ``bf_max_job_test`` per cycle, every ``bf_interval_s``; a job starts now
only if that delays no earlier reservation; otherwise it gets a reservation at its earliest possible start
(conservative: ``reserve_count = 0`` reserves for all; ``= 1`` is EASY); the expected end of a job is its start
plus its time limit; multi-node jobs reserve whole nodes. Between cycles the main scheduler starts jobs in strict
priority order at events.

The reservation map (:class:`SlotMap`) is kept as backfill.c keeps its ``node_space``: in ``bf_resolution_s``
slots from now rounded down to the resolution, to the window's end (``now + bf_window_s`` rounded down); jobs
start on slot boundaries and hold every slot their time limit touches (at least one); a running job's GPUs come
back at the slot boundary at or after its expected end (at least one slot on: a job past its limit). Cutting the
map at the window's end changes no decision: a reservation that runs past it holds the map's last slot too, and
running jobs only hand GPUs back, so nothing past the end is scarcer than the last slot.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import numpy as np

from fmstack.errors import InputError
from fmstack.orchestration.policies.backfill_ref import reference_backfill
from fmstack.orchestration.policies.base import (
    UNLIMITED_PLAN_S,
    Capacity,
    PendingJob,
    Plan,
    RunningJob,
    RunningSet,
)
from fmstack.orchestration.policies.fifo import PendingQueue, priority_order, start_in_order


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


class SlotMap:
    """Free GPUs per ``bf_resolution`` slot of the reservation map, as Slurm's backfill keeps it.

    Slot ``k`` is ``[begin + k * res, begin + (k + 1) * res)`` with ``begin`` = now rounded down to the resolution
    (backfill.c: ``node_space[0].begin_time = sched_start / backfill_resolution * backfill_resolution``); the map
    ends at the window's end (``window_end`` rounded down the same way), and nothing is kept past it: a
    reservation that runs past the window is cut there, as ``_add_reservation`` cuts it at the last record.
    Past the window only running jobs hold GPUs and they only release them, so a window of ``d`` slots that fits
    up to the map's end fits after it too: the map's last run of free GPUs never ends.

    ``free`` is a plain int64 array of ``width`` slots; a reservation is one slice update.
    """

    __slots__ = ("free",)

    def __init__(self, free: np.ndarray[Any, np.dtype[np.int64]]) -> None:
        self.free = free

    @classmethod
    def from_releases(
        cls, free_now: int, release_slots: np.ndarray[Any, Any], gpus: np.ndarray[Any, Any], width: int
    ) -> SlotMap:
        """The map of running jobs that hand back ``gpus[i]`` GPUs at the start of slot ``release_slots[i]``.

        A release in slot 0 or before (a job past its time limit) counts in slot 1: a job holds at least one slot
        (``_add_reservation``); releases at or past ``width`` are beyond the map.
        """
        slots = np.minimum(np.maximum(release_slots, 1), width)
        released = np.bincount(slots, weights=gpus, minlength=width + 1)[:width]
        return cls(np.cumsum(released).astype(np.int64) + free_now)

    @property
    def width(self) -> int:
        return len(self.free)

    def reserve(self, slot: int, slots: int, gpus: int) -> None:
        """Take ``gpus`` GPUs from ``slots`` slots from ``slot`` on (cut at the map's end)."""
        self.free[slot : slot + slots] -= gpus

    def startable(self, need: int, slots: int) -> bool:
        """Whether ``need`` GPUs stay free for ``slots`` slots from slot 0 (:meth:`earliest` would return 0)."""
        return need <= int(self.free[:slots].min())

    def last_startable(self, needs: np.ndarray[Any, Any], slots: np.ndarray[Any, Any], lo: int, hi: int) -> int:
        """The largest ``j`` in ``lo..hi`` that is :meth:`startable`, or ``lo - 1`` if none is."""
        if hi < lo:
            return lo - 1
        low = np.minimum.accumulate(self.free)
        ok = (needs[lo : hi + 1] <= low[np.minimum(slots[lo : hi + 1], len(low)) - 1]).nonzero()[0]
        return lo + int(ok[-1]) if len(ok) else lo - 1

    def earliest(self, need: int, slots: int) -> int:
        """First slot from which ``need`` GPUs stay free for ``slots`` slots (or to the map's end); -1 if none.

        The slots with enough GPUs as bytes (1 = enough); a candidate window that holds a short slot cannot
        start at or before it, so the search jumps past the window's last short slot (a C ``rfind``), and stops
        at a window with none. A window reaching the map's end fits from the last short slot on.
        """
        enough = (self.free >= need).tobytes()
        n = len(enough)
        pos = 0
        while True:
            end = pos + slots
            if end >= n:
                short = enough.rfind(b"\x00", pos)
                if short >= 0:
                    pos = short + 1
                return pos if pos < n else -1
            short = enough.rfind(b"\x00", pos, end)
            if short < 0:
                return pos
            pos = short + 1


_START = attrgetter("start_s")
_LIMIT = attrgetter("time_limit_s")
_GPUS = attrgetter("num_gpus")


@dataclass(frozen=True, kw_only=True, slots=True)
class BackfillPolicy:
    """Conservative (reserve_count 0, Slurm's default) or EASY (reserve_count 1) backfill."""

    params: BackfillParams = BackfillParams()
    gpus_per_node: int = 8
    name: str = "slurm-backfill"
    reference: bool = False
    """Run the cycle as written before session 8 (:mod:`backfill_ref`), to check the faster one against."""

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
        columns = pending.columns() if isinstance(pending, PendingQueue) and not self.reference else None
        return Plan(self.backfill(now_s, order, running, capacity, columns=columns))

    def backfill(
        self,
        now_s: float,
        order: Sequence[PendingJob],
        running: Collection[RunningJob],
        capacity: Capacity,
        *,
        reservations: list[tuple[int, float]] | None = None,
        columns: tuple[Sequence[int], Sequence[float]] | None = None,
    ) -> list[int]:
        """One backfill cycle over jobs already in priority order; returns the ids started now.

        ``reservations``, when given, receives (job id, planned start s, a multiple of ``bf_resolution_s``) of
        each reservation made; the cycle stops once no remaining job could start now, so later jobs get none.
        ``columns``: the GPUs and time limits of ``order``'s jobs, position by position, if the caller keeps them
        (:meth:`PendingQueue.columns`). Makes the same decisions as :func:`reference_backfill` (tests compare).

        Faster than the reference by keeping the running jobs' ends and sizes (and the queue's sizes and limits)
        as they change instead of gathering them every cycle, and by doing its searches inline; durations are
        cut at the map's width (past it every window reaches the map's end alike).
        """
        if self.reference:
            return reference_backfill(self, now_s, order, running, capacity, reservations=reservations)
        p = self.params
        res = p.bf_resolution_s
        gpn = self.gpus_per_node
        begin = math.floor(now_s / res)
        width = max(1, math.floor((now_s + p.bf_window_s) / res) - begin)
        # a running job holds its GPUs (whole nodes) through the slot its expected end falls in
        if isinstance(running, RunningSet):
            ends, gpus = running.ends_and_gpus()
        else:
            run = list(running)
            ends = np.fromiter(map(_START, run), float, len(run)) + np.fromiter(map(_LIMIT, run), float, len(run))
            gpus = np.fromiter(map(_GPUS, run), np.int64, len(run))
        gpus = np.where(gpus <= gpn, gpus, -(-gpus // gpn) * gpn)
        # an unlimited job (inf) ends a year on, as Slurm plans it; inf cast to int64 would release it in slot 1
        ends = np.minimum(ends, now_s + UNLIMITED_PLAN_S)
        free = SlotMap.from_releases(capacity.free_gpus, np.ceil(ends / res - begin).astype(np.int64), gpus, width).free
        m = min(len(order), p.bf_max_job_test)
        if columns is None:
            tested = order[:m]
            needs_a = np.fromiter(map(_GPUS, tested), np.int64, m)
            limits_a = np.fromiter(map(_LIMIT, tested), float, m)
        else:
            needs_a = np.array(columns[0][:m], dtype=np.int64)
            limits_a = np.array(columns[1][:m], dtype=np.float64)
        needs_a = np.where(needs_a <= gpn, needs_a, -(-needs_a // gpn) * gpn)
        # a job holds every slot its time limit touches, at least one; past the map's end all are alike
        slots_a = np.minimum(
            np.maximum(1, np.ceil(np.minimum(limits_a, UNLIMITED_PLAN_S) / res)).astype(np.int64), width
        )
        needs: list[int] = needs_a.tolist()
        durs: list[int] = slots_a.tolist()
        # Only starts now matter, and the map only shrinks during a cycle: once no remaining job could start
        # now, later reservations change nothing. ``last`` is the last job that still could.
        low = np.minimum.accumulate(free)
        ok = (needs_a <= low[slots_a - 1]).nonzero()[0]
        if not len(ok):
            return []
        last = int(ok[-1])
        starts: list[int] = []
        reserved = 0
        limited = p.reserve_count > 0
        # A job that cannot start within the window neither starts nor reserves; nor does any later job
        # needing as many GPUs for as long. never_d[k]: the shortest duration that failed so far for a size
        # <= sizes[k] (built at the first failure)
        size_ix: dict[int, int] = {}
        never_d: list[float] = []
        # the slots with enough GPUs (1 = enough) for the job at hand, written in place (no new array per job)
        enough = bytearray(width)
        enough_a = np.frombuffer(enough, dtype=np.bool_)
        ge = np.greater_equal
        changed = False
        for i in range(last + 1):
            if changed and last >= i and needs[last] > free[: durs[last]].min():
                low = np.minimum.accumulate(free)
                ok = (needs_a[i:last] <= low[slots_a[i:last] - 1]).nonzero()[0]
                last = i + int(ok[-1]) if len(ok) else i - 1
            changed = False
            if i > last:
                break
            need = needs[i]
            duration = durs[i]
            if never_d and never_d[size_ix[need]] <= duration:
                continue
            # earliest slot where need GPUs stay free for duration slots (or to the map's end): jump past the
            # last short slot of each candidate window (a C rfind) until a window has none (SlotMap.earliest)
            t = 0
            ge(free, need, out=enough_a)
            while True:
                end = t + duration
                if end >= width:
                    short = enough.rfind(b"\x00", t)
                    if short >= 0:
                        t = short + 1
                    break
                short = enough.rfind(b"\x00", t, end)
                if short < 0:
                    break
                t = short + 1
            if t >= width:
                if not never_d:
                    sizes = sorted(set(needs))
                    size_ix = {g: k for k, g in enumerate(sizes)}
                    never_d = [math.inf] * len(sizes)
                for k in range(size_ix[need], len(never_d)):
                    if never_d[k] > duration:
                        never_d[k] = duration
                continue
            if t == 0 and capacity.try_start(order[i]):
                starts.append(order[i].job_id)
            elif not limited or reserved < p.reserve_count:
                reserved += 1
                if reservations is not None:
                    reservations.append((order[i].job_id, (begin + t) * res))
            else:
                continue
            free[t : t + duration] -= need
            # a change from slot t on cannot touch the first durs[last] slots
            changed = t < durs[last]
        return starts
