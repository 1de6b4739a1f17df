"""`plan serve --turns N`: the analytic screening of a multi-turn workload (:mod:`fmstack.perfmodel.inference_session`).

The analytic model prices one request shape, so a session of ``N`` turns is screened as its mean turn, the mean
prompt with the turns' expected cached history as its prefix hits, behind the router's caches
(:mod:`fmstack.perfmodel.inference_session_mean`, shared with `estimate serve --turns`). Eviction is not priced: an
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
from fmstack.perfmodel.inference_session_mean import HISTORY_ROUTERS, mean_prompt_tokens
from fmstack.perfmodel.inference_step import Deployment

P = TypeVar("P")


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


def check_plan_sessions(spec: SessionWorkload | None, router: str) -> None:
    """What `plan serve` refuses of a multi-turn workload (one line, exit 2): the session router without one."""
    if spec is None and router == "session":
        raise InputError("router", "session affinity pins a session's turns: give --turns > 1")


def session_plan_text(
    spec: SessionWorkload, best: Candidate, input_len: int, output_len: int, router: str, system_prefix: bool = False
) -> str:
    """The multi-turn workload a plan was made for and how its best row was screened (the text and HTML reports;
    ``system_prefix``: with a shared system prefix, whose first-turn hits the screening counts too)."""
    mean = mean_prompt_tokens(spec, input_len, output_len)
    follows = "follows each session to its history" if router in HISTORY_ROUTERS else "is blind to sessions"
    return (
        f"planned for sessions of {spec.turns} turns (think time {spec.think_time_s:g} s), each turn {input_len} new "
        f"tokens on the conversation so far and {output_len} out: a mean prompt of {mean:,.0f} tokens "
        f"(the last turn's {spec.max_prompt_tokens(input_len, output_len):,}); the {router} router {follows}, and the "
        f"best row was screened at {best.prefix_hit_rate:.1%} of prompt tokens from cached history"
        f"{' and the system prefixes of first turns' if system_prefix else ''} "
        f"({best.prefix_request_hit_rate:.0%} of turns hit; eviction not priced, optimistic on purpose), its p99 "
        "by simulating the sessions"
    )
