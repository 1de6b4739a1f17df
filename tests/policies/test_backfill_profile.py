"""The backfill reservation map's fast searches against a brute-force per-slot check (Hypothesis)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fmstack.orchestration.policies.backfill import SlotMap

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
