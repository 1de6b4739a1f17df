"""Group placement per NVLink domain: the vectorised path (one int64 key per (size, cap) pair) gives what the
one-configuration path gives, row by row."""

from __future__ import annotations

import numpy as np

from fmstack.perfmodel.step_comm import placement_per_domain


def test_placement_arrays_match_one_row_at_a_time() -> None:
    rng = np.random.default_rng(7)
    sizes = rng.choice([1, 2, 3, 4, 6, 8, 12, 16, 18, 24, 36, 64, 72, 128, 2048], size=5000).astype(np.float64)
    strides = rng.choice([1, 2, 4, 8, 16, 32], size=5000).astype(np.float64)
    for domain in (1.0, 4.0, 8.0, 72.0):
        got = placement_per_domain(sizes, strides, domain)
        want = [placement_per_domain(float(n), float(s), domain) for n, s in zip(sizes, strides, strict=True)]
        assert np.array_equal(got, np.array(want))


def test_placement_hand_cases() -> None:
    # 12 ranks, stride 1, 8 per domain: the largest divisor of 12 that fits is 6; stride 4 leaves room for 2
    assert placement_per_domain(12.0, 1.0, 8.0) == 6.0
    assert placement_per_domain(12.0, 4.0, 8.0) == 2.0
    # 72-GPU NVL72 domain: a 64-rank group with stride 1 fits whole; stride 16 leaves 4 per domain
    assert placement_per_domain(64.0, 1.0, 72.0) == 64.0
    assert placement_per_domain(64.0, 16.0, 72.0) == 4.0
