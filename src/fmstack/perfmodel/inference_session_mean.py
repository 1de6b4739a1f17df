"""A multi-turn workload (:mod:`fmstack.perfmodel.inference_session`) as its mean turn: the one request shape the
analytic model prices, shared by `plan serve --turns` (:mod:`fmstack.perfmodel.inference_plan_session`) and `estimate
serve --turns` (its analytic means).

The mean turn (:func:`screen_config`): turn ``t``'s prompt is ``(t - 1) x (input + output) + input`` tokens, so the
mean prompt is ``input + (N - 1) / 2 x (input + output)`` (rounded up), and the share of it served from the prefix
cache is the turns' expected cached history over their prompts (the ``prefix_hit_rate`` of
:class:`~fmstack.perfmodel.inference_config.ServeConfig`: the prefill computes the uncached tokens, attending the
whole prompt; the decode reads the whole context; a running sequence holds the whole context's KV).

Where a turn's history is cached (:func:`cached_tokens`). As the simulation keeps it (``inference_session.
keep_history``), the replica (attention-DP rank) that ran turn ``j`` holds the ``j x (input + output)`` tokens of the
conversation up to it, and a later turn sent there hits the longest history it holds. A router that follows the
session (``session``; ``cache-aware`` and ``kv``, which route by the cached history) sends every turn to the replica
of its turn before; the others (round-robin, random, least-loaded, power-of-two) are blind to sessions, and a turn
lands on any of the replicas' ``u`` caches with probability ``1 / u``, independently of the turn before (the
simulation's round-robin measured full-history hits within 0.04 of 1 / 4 over 4 replicas, docs/inference.md,
Multi-turn sessions). So turn ``t`` finds the history of its latest earlier turn ``j`` on that cache with probability
``(1 / u) (1 - 1 / u)^(t - 1 - j)`` and hits ``j x (input + output)`` tokens. Under attention DP a replica's ranks
each cache on their own and a turn goes to a rank blind to sessions: ``u`` is the ranks a turn may land on, ``tp``
per replica even behind the session router. Eviction is not priced (every history is taken as still cached): an
upper bound on the hits, optimistic where the pool is short.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from fmstack.perfmodel.inference_config import ServeConfig, max_concurrency
from fmstack.perfmodel.inference_prefix import PrefixWorkload, screen_hit_rates
from fmstack.perfmodel.inference_session import SessionWorkload
from fmstack.perfmodel.inference_step import Deployment

HISTORY_ROUTERS = ("session", "cache-aware", "kv")
"""Routers priced as following a session's history to the replica of its turn before (module docstring)."""


def mean_prompt_tokens(spec: SessionWorkload, input_len: int, output_len: int) -> float:
    """The turns' mean prompt: ``input + (turns - 1) / 2 x (input + output)``."""
    return input_len + (spec.turns - 1) / 2 * (input_len + output_len)


def cached_tokens(turn: int, input_len: int, output_len: int, units: int | None) -> float:
    """Expected history tokens turn ``turn`` (1-based) finds cached where it lands, a turn landing on each of
    ``units`` caches with probability ``1 / units`` (1: always where its turn before ran; None: no cache):
    ``sum_{j < turn} (1 / u) (1 - 1 / u)^(turn - 1 - j) x j x (input + output)``."""
    if units is None:
        return 0.0
    p = 1.0 / units
    return sum(p * (1 - p) ** (turn - 1 - j) * j * (input_len + output_len) for j in range(1, turn))


def hit_turns(spec: SessionWorkload, units: int | None, first_turn_hit: float = 0.0) -> float:
    """The share of turns that find something cached: ``mean_t (1 - (1 - 1 / u)^(t - 1))`` of history, plus a
    first turn's system prefix with probability ``first_turn_hit`` (:func:`screen_config`)."""
    if units is None:
        return 0.0
    return (sum(1 - (1 - 1 / units) ** (t - 1) for t in range(1, spec.turns + 1)) + first_turn_hit) / spec.turns


def screen_config(
    cfg: ServeConfig, spec: SessionWorkload, units: int | None, first_turn_cached: float = 0.0
) -> ServeConfig:
    """``cfg`` (``input_len`` the new tokens of a turn) as its sessions' mean turn: the mean prompt, rounded up, with
    the turns' mean cached history as its ``prefix_hit_rate`` (:func:`cached_tokens`). ``first_turn_cached``: the
    expected tokens of a shared system prefix a session's first turn finds cached (a later turn is keyed by its
    session's history alone, as the simulation keys it, ``inference_session``: its system prefix is in its history)."""
    isl = math.ceil(mean_prompt_tokens(spec, cfg.input_len, cfg.output_len))
    cached = sum(cached_tokens(t, cfg.input_len, cfg.output_len, units) for t in range(1, spec.turns + 1))
    cached += 0.0 if units is None else first_turn_cached
    return replace(cfg, input_len=isl, prefix_hit_rate=cached / spec.turns / isl)


def first_turn_prefix(
    prefix: PrefixWorkload | None, d: Deployment, priced: ServeConfig, input_len: int, replicas: int | None, router: str
) -> tuple[float, float]:
    """A session's first turn's system prefix under a shared-prefix workload ``prefix``: (the probability it is
    cached where the turn lands, the expected tokens that skips), Che's figure
    (:func:`~fmstack.perfmodel.inference_prefix.screen_hit_rates`) in the whole KV pool of the mean turn ``priced``
    (a rank's share under attention DP) taken as room for prefixes: optimistic as the history's hits are, eviction
    by the histories not priced. ``replicas``: the replicas the groups spread over behind an affinity router (1 behind
    a history router, whose replicas are counted from the rate: fewer than there will be, so fewer hits); None: no
    cache, no hit. A hit skips ``min(prefix_len, input_len - 1)`` tokens (``input_len``: a turn's new tokens)."""
    if prefix is None or replicas is None:
        return 0.0, 0.0
    ranks = d.tp if d.attention_dp else 1
    pool = max_concurrency(d, replace(priced, max_batch=None)) * (priced.input_len + priced.output_len)
    hit = float(screen_hit_rates(prefix, np.array([pool / prefix.prefix_len / ranks]), replicas=replicas,
                                 router=router)[0])  # fmt: skip
    return hit, hit * min(prefix.prefix_len, input_len - 1)


def cache_units(router: str, replicas: int | None, ranks: int) -> int | None:
    """The caches a later turn may land on (:func:`cached_tokens`): a replica's ``ranks`` behind a router that
    follows the session, ``replicas x ranks`` behind one blind to it (None replicas: as many as there can be, no
    hit)."""
    if router in HISTORY_ROUTERS:
        return ranks
    return None if replicas is None else replicas * ranks
