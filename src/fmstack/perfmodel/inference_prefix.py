"""A shared-prefix workload and the prefix cache of one serving replica, so that cache hits come out of the
simulation (:mod:`fmstack.perfmodel.inference_sim_fleet`) instead of a given ``prefix_hit_rate``.

Workload (:class:`PrefixWorkload`): every request starts with one of ``groups`` shared prefixes of ``prefix_len``
tokens (system prompts, few-shot preambles, documents), drawn independently with Zipf popularity
``p_g ~ 1 / (g + 1)^zipf`` (0: uniform), the rest of its prompt its own. SGLang's ``generated-shared-prefix``
benchmark dataset (``bench_serving.py``: ``--gen-num-groups 64 --gen-prompts-per-group 16
--gen-system-prompt-len 2048 --gen-question-len 128``, shuffled) is the uniform case.

Cache (:class:`PrefixCache`): a replica's (an attention-DP rank's) prefixes, counted in tokens, each held by a
reference count, as vLLM's automatic prefix caching holds blocks (``ref_cnt``; a block at 0 sits in the free queue,
evicted least recently used first; ``vllm/v1/core/block_pool.py``, ``kv_cache_manager.py``) and SGLang's radix cache
its nodes (``lock_ref``; ``evictable_size`` against ``protected_size``, ``radix_cache.py``). A prefix referenced by a
running request is shared and stays resident; one no running request references lives in the free part of the KV pool
and is evicted LRU as admissions take that part. The simulation's side (:mod:`fmstack.perfmodel.inference_sim_prefix`)
looks a prompt's prefix up at admission and reserves only its own tokens on a hit. Simplifications: a prefix is one
entry of ``prefix_len`` tokens (not block by block; cached as its prompt's prefill completes, not chunk by chunk); no
radix sharing between groups.

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
from fmstack.perfmodel.inference_prefix_offload import HostTier
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
    """Prefixes, each ``tokens`` long: those referenced by running requests (pinned: not evictable) and an LRU set
    of unreferenced ones within a capacity in tokens that may change (the free part of the KV pool)."""

    def __init__(self, host: HostTier | None = None) -> None:
        self.host = host
        """A host-memory tier under this cache (:mod:`fmstack.perfmodel.inference_prefix_offload`): evicted entries
        move there and a hit there is copied back; None: evicted entries are lost."""
        self.loaded_tokens = 0
        """Tokens the last :meth:`acquire` copied back from the host tier (0: a GPU hit)."""
        self._entries: OrderedDict[int, int] = OrderedDict()
        """Unreferenced prefixes, least recently used first (vLLM's free block queue)."""
        self._pinned: dict[int, tuple[int, int]] = {}
        """Referenced prefixes: key -> (tokens, reference count >= 1)."""
        self.tokens = 0
        """Tokens held by unreferenced prefixes (evictable; inside the pool's free part)."""
        self.pinned_tokens = 0
        """Tokens held by referenced prefixes (outside the pool's free part)."""
        self.hits = 0
        self.lookups = 0

    def __contains__(self, key: object) -> bool:
        return key in self._entries or key in self._pinned or (self.host is not None and key in self.host)

    def referenced(self, key: int) -> bool:
        """Whether a running request references ``key`` (sharing it costs no free tokens)."""
        return key in self._pinned

    def size(self, key: int) -> int:
        """The tokens of cached ``key``."""
        if key in self._pinned:
            return self._pinned[key][0]
        return self._entries[key] if key in self._entries or self.host is None else self.host.size(key)

    def lookup(self, key: int) -> bool:
        """Whether ``key`` is cached (a hit moves an unreferenced prefix to the most recently used end)."""
        self.lookups += 1
        if key in self._pinned:
            self.hits += 1
            return True
        if key in self._entries:
            self._entries.move_to_end(key)
            self.hits += 1
            return True
        if self.host is not None and key in self.host:
            self.hits += 1
            return True
        return False

    def fit(self, capacity_tokens: float) -> None:
        """Evict the least recently used unreferenced prefixes until at most ``capacity_tokens`` are held by them."""
        while self._entries and self.tokens > capacity_tokens:
            key, n = self._entries.popitem(last=False)
            self.tokens -= n
            if self.host is not None:
                self.host.put(key, n)

    def insert(self, key: int, tokens: int, capacity_tokens: float) -> None:
        """Cache ``key`` (``tokens`` long, unreferenced) as the most recently used, evicting LRU prefixes to make
        room; a prefix longer than the capacity is not cached; a cached one is only refreshed."""
        if key in self._pinned:
            return
        if key in self._entries:
            self._entries.move_to_end(key)
            return
        if tokens > capacity_tokens:
            return
        if self.host is not None:
            self.host.drop(key)
        self.fit(capacity_tokens - tokens)
        self._entries[key] = tokens
        self.tokens += tokens

    def store(self, key: int, tokens: int, capacity_tokens: float) -> None:
        """Cache unreferenced ``key`` as ``tokens`` long, the most recently used, replacing a cached one of another
        length (a session's history grown by a turn, :func:`fmstack.perfmodel.inference_session.keep_history`); LRU
        entries evicted to make room; not cached where ``tokens`` exceed the capacity (a referenced ``key``: kept)."""
        if key in self._pinned:
            return
        self.tokens -= self._entries.pop(key, 0)
        if self.host is not None:
            self.host.drop(key)
        if tokens > capacity_tokens:
            return
        self.fit(capacity_tokens - tokens)
        self._entries[key] = tokens
        self.tokens += tokens

    def acquire(self, key: int) -> int:
        """A running request references cached ``key``: the tokens it takes out of the free part (its size if no
        one referenced it, as vLLM's ``allocate_slots`` counts a computed block at ``ref_cnt`` 0 as allocated; else
        0)."""
        self.loaded_tokens = 0
        if key in self._pinned:
            n, refs = self._pinned[key]
            self._pinned[key] = (n, refs + 1)
            return 0
        if key in self._entries:
            n = self._entries.pop(key)
            self.tokens -= n
        else:  # on the host: copied back (the caller delays the request by the copy)
            assert self.host is not None
            n = self.loaded_tokens = self.host.take(key)
        self._pinned[key] = (n, 1)
        self.pinned_tokens += n
        return n

    def publish(self, key: int, tokens: int) -> bool:
        """A request that computed ``key``'s ``tokens`` (a miss, its prefill done) shares them as the prefix,
        referenced once (by it): True; False where ``key`` is already cached (its copy stays its own, as two
        vLLM blocks of one hash do; an unreferenced entry is refreshed)."""
        if key in self._pinned:
            return False
        if key in self._entries:
            self._entries.move_to_end(key)
            return False
        if self.host is not None:  # a copy on the host (a hit refused for room) is stale now
            self.host.drop(key)
        self._pinned[key] = (tokens, 1)
        self.pinned_tokens += tokens
        return True

    def release(self, key: int) -> int:
        """A request that referenced ``key`` finishes: the tokens back in the free part (its size when it was the
        last reference: the prefix turns evictable as the most recently used; else 0)."""
        n, refs = self._pinned[key]
        if refs > 1:
            self._pinned[key] = (n, refs - 1)
            return 0
        del self._pinned[key]
        self.pinned_tokens -= n
        self._entries[key] = n
        self.tokens += n
        return n


class AnyRank:
    """The prefixes an attention-DP replica caches, as a router sees them: in any of its ranks' caches."""

    def __init__(self, caches: list[PrefixCache]) -> None:
        self._caches = caches

    def __contains__(self, key: object) -> bool:
        return any(key in c for c in self._caches)

    def size(self, key: int) -> int:
        """The longest cached copy of ``key`` among the ranks (a router's overlap)."""
        return max(c.size(key) for c in self._caches if key in c)


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
    round-robin, random, least-loaded, power-of-two: each replica sees all ``groups`` at their popularity and caches
    them in its own room (Che's approximation, :func:`che_hit_rate`); cache-aware sends a group where it went before,
    so each replica sees about ``groups / replicas`` of them: the replicas' caches together hold ``replicas x`` the
    room, as one cache of the whole popularity would (the same figure for uniform groups: ``groups / replicas``
    groups in one replica's room); so does ``kv`` (Dynamo's KV router sends a prefix where it is cached unless the
    load there outweighs it: optimistic). Optimistic on purpose, the simulation decides: Che's figure is the steady
    state (no cold misses), the room is taken at the mean running sequences (the fluctuations above it evict; Che's
    hit rate is about concave in the room), and each rate is rounded up to a multiple of ``1 / HIT_GRID``."""
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
