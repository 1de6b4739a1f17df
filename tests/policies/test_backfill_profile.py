"""The backfill reservation map's fast searches, and a whole cycle with its pruning, against brute force (Hypothesis)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fmstack.orchestration.policies import BackfillParams, PendingJob, RunningJob
from fmstack.orchestration.policies.backfill import BackfillPolicy, SlotMap
from fmstack.orchestration.policies.base import node_rounded_gpus

STEP = st.tuples(st.integers(0, 20), st.integers(1, 20), st.integers(-8, 8))


def _brute_earliest(free: list[int], need: int, slots: int) -> int:
    """First slot s with free >= need on [s, s + slots) cut at the map's end; -1 if none."""
    for s in range(len(free)):
        if all(f >= need for f in free[s : s + slots]):
            return s
    return -1


@settings(max_examples=300, deadline=None)
@given(
    base=st.integers(0, 16),
    width=st.integers(1, 24),
    raw=st.lists(STEP, max_size=12),
    need=st.integers(1, 24),
    slots=st.integers(1, 30),
)
def test_earliest_and_startable_match_brute_force(
    base: int, width: int, raw: list[tuple[int, int, int]], need: int, slots: int
) -> None:
    smap = SlotMap(np.full(width, base, dtype=np.int64))
    free = [base] * width
    for s, length, g in raw:
        smap.reserve(s, length, -g)
        for k in range(s, min(s + length, width)):
            free[k] += g
    assert smap.free.tolist() == free
    want = _brute_earliest(free, need, slots)
    assert smap.earliest(need, slots) == want
    assert smap.startable(need, slots) == (want == 0)
    needs = np.array([need, need + 1, max(1, need - 3)], dtype=np.int64)
    durs = np.array([slots, 1, slots + 5], dtype=np.int64)
    ok = [j for j in range(3) if smap.startable(int(needs[j]), int(durs[j]))]
    assert smap.last_startable(needs, durs, 0, 2) == (ok[-1] if ok else -1)


def test_releases_fill_slots_from_the_next_one_on() -> None:
    # 4 free now; 8 GPUs back at slot 2, 8 more at slot 5 (past the 4-slot map: ignored), 2 overdue (slot 1)
    smap = SlotMap.from_releases(4, np.array([2, 5, -3]), np.array([8, 8, 2]), 4)
    assert smap.free.tolist() == [4, 6, 14, 14]


class _RefusingCapacity:
    """Counts GPUs but refuses the jobs in ``refuse`` (placement can fail on a fragmented fleet)."""

    def __init__(self, free: int, refuse: set[int]) -> None:
        self.total_gpus = 1 << 20
        self.free_gpus = free
        self.refuse = refuse

    def try_start(self, job: PendingJob) -> bool:
        need = node_rounded_gpus(job.num_gpus, 8)
        if job.job_id in self.refuse or need > self.free_gpus:
            return False
        self.free_gpus -= need
        return True


def _reference_cycle(
    now: float, order: list[PendingJob], running: list[RunningJob], cap: _RefusingCapacity, p: BackfillParams
) -> list[int]:
    """The documented cycle without the pruning: every tested job gets its earliest slot by brute force."""
    res = p.bf_resolution_s
    begin = math.floor(now / res)
    width = max(1, math.floor((now + p.bf_window_s) / res) - begin)
    free = [cap.free_gpus] * width
    for r in running:
        back = max(1, math.ceil((r.start_s + r.time_limit_s) / res - begin))
        for k in range(back, width):
            free[k] += node_rounded_gpus(r.num_gpus, 8)
    starts: list[int] = []
    reserved = 0
    for job in order[: p.bf_max_job_test]:
        need = node_rounded_gpus(job.num_gpus, 8)
        slots = max(1, math.ceil(job.time_limit_s / res))
        t = _brute_earliest(free, need, slots)
        if t == 0 and cap.try_start(job):
            starts.append(job.job_id)
        elif t < 0 or (p.reserve_count and reserved >= p.reserve_count):
            continue
        else:
            reserved += 1
        for k in range(t, min(t + slots, width)):
            free[k] -= need
    return starts


JOB = st.tuples(st.sampled_from([1, 2, 4, 8, 16, 24, 32]), st.integers(1, 400), st.booleans())


@settings(max_examples=300, deadline=None)
@given(
    now=st.integers(0, 7200),
    free=st.integers(0, 48),
    running=st.lists(st.tuples(st.sampled_from([1, 4, 8, 16]), st.integers(-3600, 0), st.integers(1, 200)), max_size=6),
    pending=st.lists(JOB, max_size=14),
    window_min=st.integers(1, 240),
    reserve_count=st.integers(0, 2),
    max_test=st.integers(1, 20),
)
def test_cycle_matches_the_unpruned_reference(
    now: int,
    free: int,
    running: list[tuple[int, int, int]],
    pending: list[tuple[int, int, bool]],
    window_min: int,
    reserve_count: int,
    max_test: int,
) -> None:
    params = BackfillParams(bf_window_s=window_min * 60.0, reserve_count=reserve_count, bf_max_job_test=max_test)
    run = [RunningJob(job_id=100 + i, num_gpus=g, start_s=now + s, time_limit_s=m * 60.0)
           for i, (g, s, m) in enumerate(running)]  # fmt: skip
    order = [PendingJob(job_id=i, num_gpus=g, submit_s=0.0, time_limit_s=m * 37.0)
             for i, (g, m, _) in enumerate(pending)]  # fmt: skip
    refuse = {i for i, (_, _, r) in enumerate(pending) if r}
    want = _reference_cycle(float(now), order, run, _RefusingCapacity(free, refuse), params)
    got = BackfillPolicy(params=params).backfill(float(now), order, run, _RefusingCapacity(free, refuse))
    assert got == want
