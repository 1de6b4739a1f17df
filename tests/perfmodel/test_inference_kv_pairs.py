"""Pair times of a split without its P x D matrix (session 20): the counts and figures against the matrix, and the
first fit that resumes against the one that scans from node 0."""

from __future__ import annotations

from typing import Any
from unittest import mock

import numpy as np
import pytest

from fmstack.errors import InputError
from fmstack.perfmodel import inference_disagg_place as place
from fmstack.perfmodel.inference_kv_pairs import DenseTimes, PairTimes, kv_matrix


@pytest.mark.parametrize("seed", range(6))
def test_near_pairs_and_values_match_the_matrix(seed: int) -> None:
    rng = np.random.default_rng(seed)
    doms = [None, 0, 1, 2]
    pre = tuple(doms[i] for i in rng.integers(0, 4, size=int(rng.integers(1, 9))))
    dec = tuple(doms[i] for i in rng.integers(0, 4, size=int(rng.integers(1, 9))))
    pt = PairTimes(0.5, 2.0, pre, dec)
    cells = [x for row in pt.rows() for x in row]
    assert pt.near_pairs() == sum(1 for p in pre for r in dec if p is not None and p == r) == cells.count(0.5)
    assert pt.values() == frozenset(cells)
    assert pt.shape == (len(pre), len(dec))


def test_one_domain_has_only_the_near_figure_and_spanning_replicas_only_the_far() -> None:
    assert PairTimes(0.5, 2.0, (3, 3), (3,)).values() == {0.5}
    assert PairTimes(0.5, 2.0, (None, None), (None,)).values() == {2.0}


def test_kv_matrix_takes_a_figure_a_matrix_or_pair_times() -> None:
    assert kv_matrix(0.25, 3, 2).values() == {0.25} and kv_matrix(0.25, 3, 2).shape == (3, 2)
    dense = kv_matrix([[1.0, 2.0], [3.0, 4.0]], 2, 2)
    assert isinstance(dense, DenseTimes) and dense.at(1, 0) == 3.0
    pt = PairTimes(0.5, 2.0, (0, 1), (1,))
    assert kv_matrix(pt, 2, 1) is pt
    with pytest.raises(InputError, match="needs 3 x 1 pair times"):
        kv_matrix(pt, 3, 1)
    with pytest.raises(InputError, match=r"must be >= 0 s, got -1\.0"):
        kv_matrix(PairTimes(-1.0, 2.0, (0,), (0,)), 1, 1)


@pytest.mark.parametrize(
    ("prefill", "decode", "p_gpus", "d_gpus", "gpn", "npd"),
    [(7, 5, 1, 2, 8, 1), (40, 13, 2, 4, 8, 1), (3, 9, 16, 2, 8, 1), (30, 18, 1, 1, 4, 18), (11, 6, 4, 8, 8, 2),
     (5, 2, 12, 4, 8, 1)],
)  # fmt: skip
def test_resumed_first_fit_places_as_the_scan_from_node_zero(
    prefill: int, decode: int, p_gpus: int, d_gpus: int, gpn: int, npd: int
) -> None:
    now = place.place_split(prefill, decode, p_gpus, d_gpus, gpn, npd)
    fits = place._fits

    def scan_from_zero(*args: Any) -> tuple[int, ...] | None:
        return fits(*args[:5])

    with mock.patch.object(place, "_fits", scan_from_zero):
        before = place.place_split(prefill, decode, p_gpus, d_gpus, gpn, npd)
    assert now == before
