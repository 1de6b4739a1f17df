"""`plan serve --turns N`: the analytic screening of a multi-turn workload (:mod:`fmstack.perfmodel.inference_session`).

The analytic model prices one request shape, so a session of ``N`` turns is screened as its mean turn
(:func:`screen_config`): turn ``t``'s prompt is ``(t - 1) x (input + output) + input`` tokens, so the mean prompt is
``input + (N - 1) / 2 x (input + output)`` (rounded up), and the share of it served from the prefix cache is the turns'
expected cached history over their prompts.

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
upper bound on the hits, so the screening errs optimistic and keeps every deployment the simulation could accept; the
simulation (the p99 check, the sessions run together) decides. Behind a blind router the hits fall as the replicas
grow, so the replica count is the smallest ``N`` whose own rate serves ``qps`` (:func:`fewest_replicas`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import TypeVar

from fmstack.errors import InputError
from fmstack.perfmodel.inference import ServeConfig, max_concurrency
from fmstack.perfmodel.inference_plan_candidate import Candidate
from fmstack.perfmodel.inference_session import SessionWorkload
from fmstack.perfmodel.inference_step import Deployment

HISTORY_ROUTERS = ("session", "cache-aware", "kv")
"""Routers screened as following a session's history to the replica of its turn before (module docstring)."""

P = TypeVar("P")


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


def hit_turns(spec: SessionWorkload, units: int | None) -> float:
    """The share of turns that find some history cached: ``mean_t (1 - (1 - 1 / u)^(t - 1))``."""
    if units is None:
        return 0.0
    return sum(1 - (1 - 1 / units) ** (t - 1) for t in range(1, spec.turns + 1)) / spec.turns


def screen_config(cfg: ServeConfig, spec: SessionWorkload, units: int | None) -> ServeConfig:
    """``cfg`` (``input_len`` the new tokens of a turn) as its sessions' mean turn: the mean prompt, rounded up, with
    the turns' mean cached history as its ``prefix_hit_rate`` (:func:`cached_tokens`)."""
    isl = math.ceil(mean_prompt_tokens(spec, cfg.input_len, cfg.output_len))
    cached = sum(cached_tokens(t, cfg.input_len, cfg.output_len, units) for t in range(1, spec.turns + 1))
    return replace(cfg, input_len=isl, prefix_hit_rate=cached / spec.turns / isl)


def cache_units(router: str, replicas: int | None, ranks: int) -> int | None:
    """The caches a later turn may land on (:func:`cached_tokens`): a replica's ``ranks`` behind a router that
    follows the session, ``replicas x ranks`` behind one blind to it (None replicas: as many as there can be, no
    hit)."""
    if router in HISTORY_ROUTERS:
        return ranks
    return None if replicas is None else replicas * ranks


def holds_conversation(d: Deployment, cfg: ServeConfig, spec: SessionWorkload) -> bool:
    """Whether one cache (a replica's KV pool, a rank's under attention DP) holds a whole conversation of ``turns x
    (input + output)`` tokens, as the simulation requires (``inference_sim_session.run_sessions``)."""
    ranks = d.tp if d.attention_dp else 1
    pool = max_concurrency(d, replace(cfg, max_batch=None)) * (cfg.input_len + cfg.output_len) / ranks
    return spec.turns * (cfg.input_len + cfg.output_len) <= pool


def fewest_replicas(at: Callable[[int | None], tuple[float, P] | None], qps: float) -> tuple[int, P] | None:
    """The fewest replicas ``N`` whose screened rate ``at(N)[0]`` (requests/s a replica serves within the SLO, with
    the history hits of ``N`` replicas behind a blind router; None: no point meets it) serves ``qps``:
    ``ceil(qps / rate(N)) <= N``, by the iteration ``N <- ceil(qps / rate(N))`` from ``N = 1``. Where ``rate`` falls
    as ``N`` grows (fewer hits) every step stays at or below the fewest such ``N`` (``N_k <= N*`` gives ``rate(N_k) >=
    rate(N*)``, so ``N_(k+1) <= ceil(qps / rate(N*)) <= N*``) and rises until it reaches it; None where a step finds
    no point within the SLO (more replicas only lower the hits)."""
    n = 1
    while n <= MAX_REPLICAS:
        got = at(n)
        if got is None:
            return None
        need = math.ceil(qps / got[0])
        if need <= n:
            return n, got[1]
        n = need
    return None


MAX_REPLICAS = 1 << 20
"""A bound on :func:`fewest_replicas`' iteration (a safeguard: it rises to at most ``ceil(qps / rate without
hits)``)."""


def ceil_ok(qps: float, rate: float, replicas: int) -> bool:
    """``replicas`` replicas at ``rate`` each serve ``qps`` (``ceil(qps / rate) <= replicas``, as the plan counts)."""
    return math.ceil(qps / rate) <= replicas


def screened_input_len(spec: SessionWorkload | None, input_len: int, output_len: int) -> int:
    """The prompt a plan's rows were screened at: the mean turn's (``input_len`` without sessions)."""
    return input_len if spec is None else math.ceil(mean_prompt_tokens(spec, input_len, output_len))


def check_plan_sessions(spec: SessionWorkload | None, router: str, prefix_given: bool) -> None:
    """What `plan serve` refuses of a multi-turn workload (one line, exit 2): the session router without one, and a
    shared system prefix with one (its first turns' prefix hits are not screened)."""
    if spec is None:
        if router == "session":
            raise InputError("router", "session affinity pins a session's turns: give --turns > 1")
        return
    if prefix_given:
        raise InputError("turns", "plan serve screens a multi-turn workload's history hits, not a shared system "
                         "prefix's: drop --prefix-groups / --prefix-len (estimate serve --turns simulates both)")  # fmt: skip


SPLITS_NOTE = (
    "none searched: the plan screens a multi-turn workload for colocated replicas only (estimate serve "
    "--prefill-replicas P --decode-replicas D --turns N simulates a split's sessions)"
)
"""The plan's note on disaggregated splits under ``--turns > 1`` (estimate serve simulates sessions in a given split,
:mod:`fmstack.perfmodel.inference_sim_disagg_session`; the plan does not search them)."""


def session_plan_text(spec: SessionWorkload, best: Candidate, input_len: int, output_len: int, router: str) -> str:
    """The multi-turn workload a plan was made for and how its best row was screened (the text and HTML reports)."""
    mean = mean_prompt_tokens(spec, input_len, output_len)
    follows = "follows each session to its history" if router in HISTORY_ROUTERS else "is blind to sessions"
    return (
        f"planned for sessions of {spec.turns} turns (think time {spec.think_time_s:g} s), each turn {input_len} new "
        f"tokens on the conversation so far and {output_len} out: a mean prompt of {mean:,.0f} tokens "
        f"(the last turn's {spec.max_prompt_tokens(input_len, output_len):,}); the {router} router {follows}, and the "
        f"best row was screened at {best.prefix_hit_rate:.1%} of prompt tokens from cached history "
        f"({best.prefix_request_hit_rate:.0%} of turns hit; eviction not priced, optimistic on purpose), its p99 "
        "by simulating the sessions"
    )
