"""A shared-prefix workload and the prefix cache of one serving replica, so that cache hits come out of the
simulation (:mod:`fmstack.perfmodel.inference_sim_fleet`) instead of a given ``prefix_hit_rate``.

Workload (:class:`PrefixWorkload`): every request starts with one of ``groups`` shared prefixes of ``prefix_len``
tokens (system prompts, few-shot preambles, documents), drawn independently with Zipf popularity
``p_g ~ 1 / (g + 1)^zipf`` (0: uniform), the rest of its prompt its own. SGLang's ``generated-shared-prefix``
benchmark dataset (``bench_serving.py``: ``--gen-num-groups 64 --gen-prompts-per-group 16
--gen-system-prompt-len 2048 --gen-question-len 128``, shuffled) is the uniform case.

Cache (:class:`PrefixCache`): a replica's LRU set of prefixes, counted in tokens, whose capacity is the part of its
KV pool no running sequence holds (engines keep finished requests' blocks until the pool needs them: vLLM's
automatic prefix caching, SGLang's radix cache, both LRU). A request looks its prefix up when the scheduler gives
its prompt the first chunk (vLLM ``get_computed_blocks``, SGLang ``match_prefix`` at scheduling): a hit skips the
prefix's prefill; a miss computes it and inserts the prefix once the prompt's prefill completes. Simplifications: a running request reserves
its whole prompt as before (a hit's shared prefix is counted again, as if copied: conservative on memory); the
prefix is cached at its prompt's end, not block by block as chunks complete; no radix sharing between groups.

:func:`che_hit_rate` is Che's approximation of an LRU cache's hit rate under independent requests (Che, Tung, Wang
2002; Fricker, Robert, Roberts 2012), which tests the cache; :func:`screen_hit_rates` applies it to `plan serve`'s
analytic screening (:mod:`fmstack.perfmodel.inference_plan_analytic`).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from fmstack.errors import InputError
from fmstack.perfmodel.inference_router import ROUTERS_AFFINITY


@dataclass(frozen=True, kw_only=True, slots=True)
class PrefixWorkload:
    """Requests that share one of ``groups`` prefixes of ``prefix_len`` tokens, Zipf(``zipf``) popular."""

    groups: int
    """Distinct shared prefixes (``--prefix-groups``)."""
    prefix_len: int
    """Shared tokens at the start of every prompt (``--prefix-len``; fewer than the prompt's)."""
    zipf: float = 0.0
    """Popularity skew: group ``g`` (0-based) drawn with probability ``~ 1 / (g + 1)^zipf``; 0 = uniform."""

    def __post_init__(self) -> None:
        if self.groups < 1:
            raise InputError("prefix-groups", f"must be >= 1, got {self.groups}")
        if self.prefix_len < 1:
            raise InputError("prefix-len", f"must be >= 1 with --prefix-groups, got {self.prefix_len}")
        if not (math.isfinite(self.zipf) and self.zipf >= 0):
            raise InputError("prefix-zipf", f"must be a finite number >= 0, got {self.zipf}")

    def probabilities(self) -> NDArray[np.float64]:
        """Each group's probability, most popular first."""
        w = 1.0 / np.arange(1, self.groups + 1, dtype=np.float64) ** self.zipf
        out: NDArray[np.float64] = w / w.sum()
        return out

    def draw(self, rng: np.random.Generator, n: int) -> NDArray[np.int64]:
        """``n`` independent group draws."""
        out: NDArray[np.int64] = rng.choice(self.groups, size=n, p=self.probabilities())
        return out


class PrefixCache:
    """An LRU set of prefixes, each ``tokens`` long, within a capacity in tokens that may change."""

    def __init__(self) -> None:
        self._entries: OrderedDict[int, int] = OrderedDict()
        self.tokens = 0
        """Tokens held."""
        self.hits = 0
        self.lookups = 0

    def __contains__(self, key: int) -> bool:
        return key in self._entries

    def lookup(self, key: int) -> bool:
        """Whether ``key`` is cached (a hit moves it to the most recently used end)."""
        self.lookups += 1
        if key in self._entries:
            self._entries.move_to_end(key)
            self.hits += 1
            return True
        return False

    def fit(self, capacity_tokens: float) -> None:
        """Evict the least recently used prefixes until at most ``capacity_tokens`` are held."""
        while self._entries and self.tokens > capacity_tokens:
            _, n = self._entries.popitem(last=False)
            self.tokens -= n

    def insert(self, key: int, tokens: int, capacity_tokens: float) -> None:
        """Cache ``key`` (``tokens`` long) as the most recently used, evicting LRU prefixes to make room; a prefix
        longer than the capacity is not cached."""
        if key in self._entries:
            self._entries.move_to_end(key)
            return
        if tokens > capacity_tokens:
            return
        self.fit(capacity_tokens - tokens)
        self._entries[key] = tokens
        self.tokens += tokens


def che_hit_rate(probabilities: NDArray[np.float64], capacity_items: float) -> float:
    """Che's approximation of an LRU cache's hit rate under independent requests (Che, Tung, Wang 2002, eq. 3-4;
    Fricker, Robert, Roberts 2012): the characteristic time ``T`` solves ``sum_i (1 - exp(-p_i T)) = C`` (bisection)
    and the hit rate is ``sum_i p_i (1 - exp(-p_i T))``. ``capacity_items`` >= the item count: 1 (all cached)."""
    p = np.asarray(probabilities, dtype=np.float64)
    if capacity_items >= len(p):
        return 1.0
    lo, hi = 0.0, 1.0
    while float(np.sum(1 - np.exp(-p * hi))) < capacity_items:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if float(np.sum(1 - np.exp(-p * mid))) < capacity_items:
            lo = mid
        else:
            hi = mid
    t = (lo + hi) / 2
    return float(np.sum(p * (1 - np.exp(-p * t))))


HIT_GRID = 100
"""Screening rounds a request hit rate up to a multiple of ``1 / HIT_GRID`` (optimistic by less than 0.01; at most
``HIT_GRID + 1`` distinct rates, so as many analytic curves per candidate)."""


def che_hit_rates(probabilities: NDArray[np.float64], capacities: NDArray[np.float64]) -> NDArray[np.float64]:
    """:func:`che_hit_rate` at each of ``capacities`` (items), the bisections run together (equal to it within
    1e-12, tested)."""
    p = np.asarray(probabilities, dtype=np.float64)[:, None]
    cap = np.asarray(capacities, dtype=np.float64)
    out = np.ones(cap.shape, dtype=np.float64)
    todo = np.flatnonzero(cap < p.shape[0])
    step = max(1, 1_000_000 // p.shape[0])  # columns at a time: a (groups x columns) matrix of at most 1e6 numbers
    for at in range(0, todo.size, step):
        idx = todo[at : at + step]
        want = cap[idx]
        lo, hi = np.zeros(idx.size), np.ones(idx.size)
        while True:
            short = np.sum(1 - np.exp(-p * hi), axis=0) < want
            if not short.any():
                break
            hi = np.where(short, hi * 2, hi)
        for _ in range(200):
            mid = (lo + hi) / 2
            below = np.sum(1 - np.exp(-p * mid), axis=0) < want
            lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
        t = (lo + hi) / 2
        out[idx] = np.sum(p * (1 - np.exp(-p * t)), axis=0)
    return out


def screen_hit_rates(
    workload: PrefixWorkload, capacity_prefixes: NDArray[np.float64], *, replicas: int, router: str
) -> NDArray[np.float64]:
    """The request hit rate a replica can expect with room for ``capacity_prefixes`` prefixes in its cache (each
    entry: the KV pool's free part at one operating point, over ``prefix_len``), for `plan serve`'s screening.
    round-robin, random, least-loaded: each replica sees all ``groups`` at their popularity and caches them in its
    own room (Che's approximation, :func:`che_hit_rate`); cache-aware sends a group where it went before, so each
    replica sees about ``groups / replicas`` of them: the replicas' caches together hold ``replicas x`` the room, as
    one cache of the whole popularity would (the same figure for uniform groups: ``groups / replicas`` groups in
    one replica's room); so does ``kv`` (Dynamo's KV router sends a prefix where it is cached unless the load there
    outweighs it: optimistic). Optimistic on purpose, the simulation decides: Che's figure is the steady state (no cold
    misses), the room is taken at the mean running sequences (the fluctuations above it evict; Che's hit rate is
    about concave in the room), and each rate is rounded up to a multiple of ``1 / HIT_GRID``."""
    pool = replicas if router in ROUTERS_AFFINITY else 1
    room = np.floor(np.maximum(np.asarray(capacity_prefixes, dtype=np.float64), 0.0)) * pool
    room = np.minimum(room, float(workload.groups))  # at or above the groups: all cached
    levels, where = np.unique(room, return_inverse=True)
    hits = che_hit_rates(workload.probabilities(), levels)
    rounded: NDArray[np.float64] = np.minimum(np.ceil(hits * HIT_GRID - 1e-9) / HIT_GRID, 1.0)[where]
    return rounded


def token_share(workload: PrefixWorkload, input_len: int, request_hit: float) -> float:
    """The share of prompt tokens served from the cache when ``request_hit`` of the requests hit: a hit skips
    ``min(prefix_len, input_len - 1)`` tokens (the simulation recomputes a full hit's last token, as vLLM does)."""
    return request_hit * min(workload.prefix_len, input_len - 1) / input_len
