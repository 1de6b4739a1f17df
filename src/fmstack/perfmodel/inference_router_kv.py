"""NVIDIA Dynamo's KV router (``--router-mode kv``) as a router of the joint replica simulation
(:mod:`fmstack.perfmodel.inference_sim_fleet`, ``--router kv``).

Source: Dynamo v0.9.0, "Router Design" (docs.nvidia.com/dynamo/v-0-9-0/design-docs/router-design.md) and the Router
Guide; the code of that design (ai-dynamo/dynamo ``lib/llm/src/kv_router/scheduler.rs``: ``DefaultWorkerSelector``,
``softmax_sample``; ``sequence.rs``: ``ActiveSequences``). For each worker ``w`` and a request of ``isl`` prompt tokens:

- ``overlap_w``: the request's leading blocks the worker holds, from the KV indexer's prefix tree, which the workers'
  KV events (blocks stored, blocks removed) keep equal to their caches;
- potential prefill blocks ``(active_prefill_tokens_w + isl - overlap_w x block_size) / block_size``: the prompt
  tokens it would compute, plus those of the requests routed there whose first token has not come yet (the router adds
  each request's ``isl - overlap x block_size`` as it routes it and drops it at the first token,
  ``mark_prefill_completed``);
- potential active (decode) blocks ``active_blocks_w + new_blocks_w``: the distinct prompt blocks of the requests
  routed there and not finished (a block shared by several counts once: ``ActiveSequences`` keys blocks by their
  sequence hash), plus the request's blocks not among them;
- ``cost_w = overlap_score_weight x prefill_blocks_w + active_blocks_w`` (lower is better; ``--kv-overlap-score-weight``
  default 1.0). ``--router-temperature`` 0 (default): the lowest cost, a uniformly random one among equal costs;
  ``T > 0``: softmax sampling over ``-cost / (max - min) / T`` (uniform where all costs are equal).

Modelled at the simulation's granularity: a prompt is ``floor(isl / block_size)`` full blocks (only full blocks are
hashed); a request of a prefix group shares the ``floor(min(prefix_len, isl) / block_size)`` blocks inside the group's
prefix with the other requests of its group and nothing else; the worker holds a group's blocks for the router exactly
when the group is in its simulated prefix cache (:class:`fmstack.perfmodel.inference_prefix.PrefixCache`; events
without delay). Not modelled: output blocks (this version counts prompt blocks only; later versions can add them),
the approximate mode without KV events (``--no-kv-events``: the router assumes what it sent stays cached for 120 s),
several router replicas and their sync, the busy-worker threshold, the later credit and load-scale terms of Dynamo
1.x's cost.

Two ways to keep the workers' counts, the same costs to the bit: running sums per worker (:class:`WorkerLoad`) that a
route, a first token or a completion updates in O(1) (a group's largest shared prefix among its requests: over the
distinct sizes of that group's requests), so an arrival costs O(workers), as Dynamo's ``ActiveSequences`` keeps its
counts as requests are added and freed, wherever the simulation reports those events: the colocated joint runs, whose
replicas report each request's first token and completion (:meth:`KvRouter.watch`), and a split's prefill pool, which
reports each prompt as it is computed, the end of a prefill worker's request (:meth:`KvRouter.watch_prompts`,
:meth:`KvRouter.prompt_done`); or rescanning each worker's requests at every arrival (O(requests in flight) per
arrival), the reference the running sums are tested and benchmarked against, and the path of a router whose workers
are set by hand (unit tests).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from fmstack.errors import InputError
from fmstack.perfmodel.inference_kv import DEFAULT_BLOCK_TOKENS
from fmstack.perfmodel.inference_session import keys_history

if TYPE_CHECKING:  # inference_sim_io imports this module (SimConfig.kv_router)
    from fmstack.perfmodel.inference_sim_io import SimRequest


class CachedPrefixes(Protocol):
    """A worker's cached prefixes as the router sees them (:class:`~fmstack.perfmodel.inference_prefix.PrefixCache`,
    :class:`~fmstack.perfmodel.inference_prefix.AnyRank`)."""

    def __contains__(self, key: object, /) -> bool: ...

    def size(self, key: int, /) -> int: ...


class Reporting(Protocol):
    """A simulated replica that reports its requests' first tokens and completions
    (:class:`~fmstack.perfmodel.inference_sim.BatchingSim`)."""

    on_first_token: Callable[[SimRequest], None] | None
    on_done: Callable[[SimRequest], None] | None


OVERLAP_WEIGHT = 1.0
"""Dynamo ``--kv-overlap-score-weight`` default (``KvRouterConfig::overlap_score_weight``)."""
TEMPERATURE = 0.0
"""Dynamo ``--router-temperature`` default."""


@dataclass(frozen=True, kw_only=True, slots=True)
class KvRouterConfig:
    """The KV router's settings (``--kv-overlap-weight``, ``--router-temperature``, ``--kv-block-size``)."""

    overlap_weight: float = OVERLAP_WEIGHT
    """Weight of the prefill blocks against the active blocks (0: balance on active blocks alone)."""
    temperature: float = TEMPERATURE
    """0: the lowest cost; > 0: softmax sampling over the normalised costs."""
    block_size: int = DEFAULT_BLOCK_TOKENS
    """Tokens per KV block as the router hashes them (Dynamo ``--kv-cache-block-size``: the engine's, vLLM 16)."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.overlap_weight) and self.overlap_weight >= 0):
            raise InputError("kv-overlap-weight", f"must be a finite number >= 0, got {self.overlap_weight}")
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise InputError("router-temperature", f"must be a finite number >= 0, got {self.temperature}")
        if self.block_size < 2:
            raise InputError("kv-block-size", f"must be >= 2 tokens (Dynamo asserts block_size > 1), got "
                             f"{self.block_size}")  # fmt: skip


def kv_costs(
    isl: int, overlap_blocks: list[int], active_prefill_tokens: list[int], active_blocks: list[int],
    new_blocks: list[int], *, weight: float, block_size: int,
) -> list[float]:  # fmt: skip
    """Each worker's cost: ``weight x (active_prefill_tokens + isl - overlap x block_size) / block_size +
    active_blocks + new_blocks`` (Dynamo v0.9 ``DefaultWorkerSelector::select_worker``; module docstring)."""
    return [
        weight * ((p + isl - o * block_size) / block_size) + (a + n)
        for o, p, a, n in zip(overlap_blocks, active_prefill_tokens, active_blocks, new_blocks, strict=True)
    ]


def sample(costs: list[float], temperature: float, rng: np.random.Generator) -> int:
    """The worker Dynamo's ``softmax_sample`` picks: temperature 0, the lowest cost (a uniform draw among equal ones);
    else worker ``i`` with probability ``softmax(-cost_i / (max - min) / T)`` (uniform where all are equal), taken as
    the first whose cumulative probability reaches a uniform draw."""
    if temperature == 0:
        low = min(costs)
        ties = [i for i, c in enumerate(costs) if c == low]
        return ties[0] if len(ties) == 1 else ties[int(rng.integers(len(ties)))]
    lo, hi = min(costs), max(costs)
    if lo == hi:
        probs = np.full(len(costs), 1.0 / len(costs))
    else:
        scaled = np.array([-c / (hi - lo) / temperature for c in costs])
        e = np.exp(scaled - scaled.max())
        probs = e / e.sum()
    u = float(rng.random())
    cumulative = 0.0
    for i, p in enumerate(probs.tolist()):
        cumulative += p
        if u <= cumulative:
            return i
    return len(costs) - 1


@dataclass(slots=True)
class Routed:
    """A request routed to a worker and not finished, as the router tracks it."""

    req: SimRequest
    prefill_tokens: int
    """``isl - overlap x block_size`` when routed (counted until its first token)."""
    shared_blocks: int
    """Its blocks inside its group's prefix (0 without a group)."""
    own_blocks: int
    """Its other blocks (its alone)."""


@dataclass(slots=True)
class WorkerLoad:
    """A worker's sums over its requests routed and not finished (the incremental path, :meth:`KvRouter.watch`)."""

    requests: int = 0
    prefill_tokens: int = 0
    """The ``prefill_tokens`` of those before their first token."""
    own_blocks: int = 0
    shared_blocks: int = 0
    """The sum over prefix groups of the largest ``shared_blocks`` among the group's requests."""
    shared: dict[int, dict[int, int]] = field(default_factory=dict)
    """Group -> its requests' ``shared_blocks`` (> 0) -> how many have that many."""
    largest: dict[int, int] = field(default_factory=dict)
    """Group -> the largest of its ``shared`` sizes."""

    def add(self, r: Routed) -> None:
        self.requests += 1
        self.own_blocks += r.own_blocks
        if r.shared_blocks:
            g, b = r.req.group, r.shared_blocks
            sizes = self.shared.setdefault(g, {})
            sizes[b] = sizes.get(b, 0) + 1
            top = self.largest.get(g, 0)
            if b > top:
                self.largest[g] = b
                self.shared_blocks += b - top

    def remove(self, r: Routed) -> None:
        self.requests -= 1
        self.own_blocks -= r.own_blocks
        if r.shared_blocks:
            g, b = r.req.group, r.shared_blocks
            sizes = self.shared[g]
            sizes[b] -= 1
            if sizes[b] == 0:
                del sizes[b]
                top = self.largest[g]
                if b == top:
                    new = max(sizes, default=0)
                    self.shared_blocks += new - top
                    if sizes:
                        self.largest[g] = new
                    else:
                        del self.shared[g], self.largest[g]


@dataclass(slots=True)
class KvRouter:
    """The router's view of ``replicas`` workers over one simulation (mutable)."""

    config: KvRouterConfig
    replicas: int
    rng: np.random.Generator
    active: list[list[Routed]] = field(default_factory=list)
    """Each worker's requests routed and not yet seen finished (pruned as it routes)."""
    last_costs: list[float] = field(default_factory=list)
    """The costs of the last request routed (for tests)."""
    prefill_pool: bool = False
    """The workers are a split's prefill replicas (Dynamo's prefill router): the cost is the prefill blocks alone
    (Dynamo v1.3.0 docs, components/router/disaggregated-serving: the prefill router "Always disables active block tracking
    (track_active_blocks=false) since prefill workers do not perform decode"), a request's prompt tokens counted until
    its prompt is computed (:meth:`watch_prompts`)."""

    loads: list[WorkerLoad] | None = None
    """The incremental path's sums per worker (None: rescanning ``active``; :meth:`watch`)."""
    tracked: dict[int, tuple[int, Routed]] = field(default_factory=dict)
    """The incremental path: each request routed and not finished (by identity) -> its worker and its counts."""
    prefilling: set[int] = field(default_factory=set)
    """The incremental path: those of ``tracked`` before their first token."""

    def __post_init__(self) -> None:
        self.active = [[] for _ in range(self.replicas)]

    def watch(self, workers: Sequence[Reporting]) -> None:
        """Keep the counts as ``workers`` (the simulated replicas, in order) report each request's first token and
        completion, not by rescanning (the same costs; module docstring). Every request they run must be routed here;
        ``active`` is then left empty (:meth:`in_flight` counts)."""
        self.loads = [WorkerLoad() for _ in range(self.replicas)]
        for w in workers:
            w.on_first_token, w.on_done = self._first_token, self._done

    def watch_prompts(self) -> None:
        """Route a split's prefill pool (:attr:`prefill_pool`) and keep its counts as the split reports each prompt
        computed (:meth:`prompt_done`), not by rescanning (the same costs; module docstring)."""
        self.prefill_pool = True
        self.loads = [WorkerLoad() for _ in range(self.replicas)]

    def prompt_done(self, req: SimRequest) -> None:
        """A prefill worker has computed ``req``'s prompt (its ``prefilled`` reached its ``input_len``): the end of a
        prefill worker's request, which leaves that worker's counts (what rescanning drops, ``_active``). Nothing to
        do while rescanning."""
        if self.loads is not None:
            self._done(req)

    def in_flight(self, k: int) -> int:
        """Requests routed to worker ``k`` and not seen finished."""
        return len(self.active[k]) if self.loads is None else self.loads[k].requests

    def _first_token(self, req: SimRequest) -> None:
        key = id(req)
        if key in self.prefilling:
            self.prefilling.discard(key)
            k, r = self.tracked[key]
            self.loads[k].prefill_tokens -= r.prefill_tokens  # type: ignore[index]

    def _done(self, req: SimRequest) -> None:
        key = id(req)
        got = self.tracked.pop(key, None)
        if got is None:
            return
        k, r = got
        load = self.loads[k]  # type: ignore[index]
        if key in self.prefilling:
            self.prefilling.discard(key)
            load.prefill_tokens -= r.prefill_tokens
        load.remove(r)

    def _track(self, k: int, r: Routed) -> None:
        if self.loads is None:
            self.active[k].append(r)
            return
        if not self._active(r.req):  # done already: rescanning drops it at the next arrival; nothing will report it
            return
        key = id(r.req)
        self.tracked[key] = (k, r)
        self.loads[k].add(r)
        if r.req.generated == 0:
            self.prefilling.add(key)
            self.loads[k].prefill_tokens += r.prefill_tokens

    def pick(self, req: SimRequest, caches: Sequence[CachedPrefixes | None], prefix_len: int) -> int:
        """Route ``req`` (arriving now; each worker's state as of that instant: its requests' first tokens and
        completions, its prefix cache ``caches``): the worker Dynamo would pick, which then tracks it. A later turn
        of a session (:mod:`fmstack.perfmodel.inference_session`) shares its ``history`` tokens with the session's
        cached sequence, and overlaps a worker by the blocks of the history cached there (its prompt and output
        blocks, which the engine's KV events report as stored; a shorter stale history overlaps less)."""
        bs = self.config.block_size
        full = req.input_len // bs
        session = keys_history(req)
        shared = min(req.history if session else prefix_len, req.input_len) // bs if req.group >= 0 else 0
        overlaps, prefill, active, new = [], [], [], []
        for k, cache in enumerate(caches):
            hit = cache is not None and req.group >= 0 and req.group in cache
            if hit and session:
                assert cache is not None
                overlap = min(cache.size(req.group), req.input_len) // bs
            else:
                overlap = shared if hit else 0
            overlaps.append(overlap)
            if self.loads is not None:  # the running sums (module docstring)
                load = self.loads[k]
                prefill.append(load.prefill_tokens)
                if self.prefill_pool:  # track_active_blocks=false, as below
                    active.append(0)
                    new.append(0)
                    continue
                active.append(load.own_blocks + load.shared_blocks)
                new.append(full - shared + max(0, shared - load.largest.get(req.group, 0)))
                continue
            live = [a for a in self.active[k] if self._active(a.req)]
            self.active[k] = live
            held: dict[int, int] = {}  # group -> its prefix blocks among the active requests (the longest holds all)
            for a in live:
                if a.shared_blocks:
                    held[a.req.group] = max(held.get(a.req.group, 0), a.shared_blocks)
            prefill.append(sum(a.prefill_tokens for a in live if a.req.generated == 0))
            if self.prefill_pool:  # Dynamo's prefill router: track_active_blocks=false (prefill workers do not decode)
                active.append(0)
                new.append(0)
                continue
            active.append(sum(a.own_blocks for a in live) + sum(held.values()))
            new.append(full - shared + max(0, shared - held.get(req.group, 0)))
        self.last_costs = kv_costs(req.input_len, overlaps, prefill, active, new, weight=self.config.overlap_weight,
                                   block_size=bs)  # fmt: skip
        k = sample(self.last_costs, self.config.temperature, self.rng)
        self._track(k, Routed(req, req.input_len - overlaps[k] * bs, shared, full - shared))
        return k

    def _active(self, req: SimRequest) -> bool:
        if self.prefill_pool:
            return req.prefilled < req.input_len
        return req.generated < req.output_len
