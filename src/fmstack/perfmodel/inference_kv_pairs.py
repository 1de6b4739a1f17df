"""Seconds to move one prompt's KV cache from prefill replica ``p`` to decode replica ``r`` of a split, without a
``P x D`` matrix.

A placed split (:func:`fmstack.perfmodel.inference_disagg_place.place_split`) has two figures: one for a pair in one
NVLink domain, one for the rest (the scale-out fabric). :class:`PairTimes` holds them with each replica's domain,
``P + D`` entries: a plan at a million requests per second places ~18,000 prefill and ~12,000 decode replicas of a
one-GPU layout, whose matrix (2.2e8 floats, minutes to fill) the simulations never need whole. :class:`DenseTimes` is
any matrix given cell by cell (tests, a caller's own prices). Both answer :meth:`at` and :meth:`values`, which is all
the split simulations ask.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from fmstack.errors import InputError


@dataclass(frozen=True, slots=True)
class PairTimes:
    """``near_s`` for a prefill and a decode replica in one NVLink domain, ``far_s`` for every other pair."""

    near_s: float
    far_s: float
    prefill_domain: tuple[int | None, ...]
    """NVLink domain of each prefill replica (None: it spans domains, so no pair of it is near)."""
    decode_domain: tuple[int | None, ...]

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.prefill_domain), len(self.decode_domain)

    def near(self, p: int, r: int) -> bool:
        """Whether the pair lies in one NVLink domain."""
        dom = self.prefill_domain[p]
        return dom is not None and dom == self.decode_domain[r]

    def at(self, p: int, r: int) -> float:
        return self.near_s if self.near(p, r) else self.far_s

    def near_pairs(self) -> int:
        """How many of the ``P x D`` pairs lie in one domain: per domain, its prefill x its decode replicas."""
        dec = Counter(x for x in self.decode_domain if x is not None)
        return sum(n * dec[dom] for dom, n in Counter(x for x in self.prefill_domain if x is not None).items())

    def values(self) -> frozenset[float]:
        """The figures some pair takes."""
        near = self.near_pairs()
        far = self.shape[0] * self.shape[1] - near
        return frozenset(([self.near_s] if near else []) + ([self.far_s] if far else []))

    def rows(self) -> tuple[tuple[float, ...], ...]:
        """The whole matrix, ``rows()[p][r]`` (for small splits: printing, tests)."""
        n_pre, n_dec = self.shape
        return tuple(tuple(self.at(p, r) for r in range(n_dec)) for p in range(n_pre))


@dataclass(frozen=True, slots=True)
class DenseTimes:
    """A matrix given cell by cell: ``rows[p][r]``."""

    rows_s: tuple[tuple[float, ...], ...]

    @classmethod
    def of(cls, rows: Sequence[Sequence[float]]) -> DenseTimes:
        return cls(tuple(tuple(float(x) for x in row) for row in rows))

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.rows_s), len(self.rows_s[0]) if self.rows_s else 0

    def at(self, p: int, r: int) -> float:
        return self.rows_s[p][r]

    def values(self) -> frozenset[float]:
        return frozenset(x for row in self.rows_s for x in row)


KvPairTimes = PairTimes | DenseTimes

KvTimes = float | Sequence[Sequence[float]] | KvPairTimes
"""One prompt's KV transfer in seconds: one figure for every (prefill, decode) pair, ``[p][r]`` per pair, or a
placed split's :class:`~fmstack.perfmodel.inference_kv_pairs.PairTimes` (no ``P x D`` matrix)."""


def kv_matrix(kv_transfer_s: KvTimes, prefill_replicas: int, decode_replicas: int) -> KvPairTimes:
    """``kv_transfer_s`` as pair times of ``prefill_replicas x decode_replicas`` (a figure repeated), checked."""
    if isinstance(kv_transfer_s, (int, float)):
        x = float(kv_transfer_s)
        kv: KvPairTimes = PairTimes(x, x, (None,) * prefill_replicas, (None,) * decode_replicas)
    elif isinstance(kv_transfer_s, (PairTimes, DenseTimes)):
        kv = kv_transfer_s
    else:
        kv = DenseTimes.of(kv_transfer_s)
        if len(kv.rows_s) != prefill_replicas or any(len(row) != decode_replicas for row in kv.rows_s):
            raise InputError("kv-transfer", f"needs {prefill_replicas} x {decode_replicas} pair times (prefill x "
                             f"decode), got {len(kv.rows_s)} rows of {sorted({len(row) for row in kv.rows_s})}")  # fmt: skip
    if kv.shape != (prefill_replicas, decode_replicas):
        raise InputError("kv-transfer", f"needs {prefill_replicas} x {decode_replicas} pair times (prefill x decode), "
                         f"got {kv.shape[0]} x {kv.shape[1]}")  # fmt: skip
    bad = [x for x in kv.values() if not x >= 0]
    if bad:
        raise InputError("kv-transfer", f"must be >= 0 s, got {bad[0]}")
    return kv
