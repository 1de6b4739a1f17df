"""The backfill profile's fast searches against a brute-force step function (Hypothesis)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fmstack.orchestration.policies.backfill import Profile

STEP = st.tuples(st.integers(0, 20), st.integers(1, 20), st.integers(-8, 8))


def _free_at(steps: list[tuple[float, float, int]], base: int, t: float) -> int:
    return base + sum(g for s, e, g in steps if s <= t < e)


def _brute_earliest(steps: list[tuple[float, float, int]], base: int, need: int, dur: float) -> float:
    points = sorted({0.0, *(s for s, _, _ in steps), *(e for _, e, _ in steps)})
    for t in points:
        inside = [p for p in points if t <= p < t + dur]
        if all(_free_at(steps, base, p) >= need for p in inside):
            return t
    return math.inf


@settings(max_examples=200, deadline=None)
@given(base=st.integers(0, 16), raw=st.lists(STEP, max_size=12), need=st.integers(1, 24), dur=st.integers(1, 30))
def test_earliest_and_startable_match_brute_force(
    base: int, raw: list[tuple[int, int, int]], need: int, dur: int
) -> None:
    prof = Profile(0.0, base, room=2)  # small room: growth is exercised too
    steps: list[tuple[float, float, int]] = []
    for s, length, g in raw:
        prof.add(float(s), float(s + length), g)
        steps.append((float(s), float(s + length), g))
    assert list(prof.times) == sorted(set(prof.times))
    for t, f in zip(prof.times, prof.free, strict=True):
        assert f == _free_at(steps, base, float(t))
    want = _brute_earliest(steps, base, need, float(dur))
    assert prof.earliest(need, float(dur)) == want
    assert prof.startable(need, float(dur)) == (want == 0.0)
    needs = np.array([need, need + 1, max(1, need - 3)], dtype=np.int64)
    durs = np.array([dur, 1, dur + 5], dtype=float)
    ok = [j for j in range(3) if prof.startable(int(needs[j]), float(durs[j]))]
    assert prof.last_startable(needs, durs, 0, 2) == (ok[-1] if ok else -1)
