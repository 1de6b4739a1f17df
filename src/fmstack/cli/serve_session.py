"""The multi-turn session flags of `estimate serve` (``--turns``, ``--think-time-s``), checked into a
:class:`~fmstack.perfmodel.inference_session.SessionWorkload`, the closed loop's session run and the text line
(docs/inference.md, Multi-turn sessions)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

import click

from fmstack.errors import InputError
from fmstack.perfmodel.inference import ServeConfig, ServeEstimate
from fmstack.perfmodel.inference_prefix import PrefixWorkload
from fmstack.perfmodel.inference_session import SessionWorkload, check_context
from fmstack.perfmodel.inference_session_mean import cache_units, first_turn_prefix, hit_turns, screen_config
from fmstack.perfmodel.inference_sim_io import SimConfig
from fmstack.perfmodel.inference_step import Deployment

F = TypeVar("F", bound=Callable[..., Any])

SESSION_ROUTER_HELP = (
    " With --turns > 1 also session (sticky session affinity: every turn to the replica of the session's first "
    "turn, first turns round-robin; an ingress's cookie affinity, llm-d's session-affinity scorer)."
)


def session_options(f: F) -> F:
    """The two flags (``--turns``, ``--think-time-s``)."""
    f = click.option("--think-time-s", type=float, default=None,
                     help="With --turns > 1: mean seconds from a turn's last token to the session's next turn "
                     "(exponential, seeded) [0].")(f)  # fmt: skip
    f = click.option("--turns", type=int, default=1, show_default=True,
                     help="Multi-turn sessions (chat, agents): requests per session; turn t+1's prompt is the whole "
                     "conversation so far (earlier prompts and outputs) plus --input-len new tokens, --output-len "
                     "out per turn, cached where the turn ran (estimate serve's --prefill-replicas / "
                     "--decode-replicas split: its prompt on the prefill replica, the whole conversation's KV moved "
                     "each turn). --qps stays requests/s (every turn one): sessions start at qps / turns per second; "
                     "--concurrency clients run sessions back to back. 1: "
                     "independent requests.")(f)  # fmt: skip
    return f


def session_workload(
    turns: int, think_time_s: float | None, *, cfg: ServeConfig, max_seq_len: int, router: str, simulate: bool,
    disagg: bool, split: tuple[int, int] | None,
) -> SessionWorkload | None:  # fmt: skip
    """The workload the flags give (None with ``--turns 1``: independent requests, the run of before); one line,
    exit 2, where they do not fit the rest of the command. A split (``split``) simulates the sessions too
    (:mod:`fmstack.perfmodel.inference_sim_disagg_session`)."""
    spec = SessionWorkload(turns=turns, think_time_s=0.0 if think_time_s is None else think_time_s)
    if turns == 1:
        if think_time_s is not None and think_time_s != 0:
            raise InputError("think-time-s", "--think-time-s is the pause between a session's turns: give --turns > 1")
        if router == "session":
            raise InputError("router", "session affinity pins a session's turns: give --turns > 1")
        return None
    for bad, why in ((disagg, "drop --disagg (its mean-field comparison prices independent requests)"),
                     (cfg.scheduler == "static", "drop --scheduler static (continuous batching only)"),
                     (cfg.prefix_hit_rate > 0, "drop --prefix-hit-rate (the simulation gives the hits)")):  # fmt: skip
        if bad:
            raise InputError("turns", f"a multi-turn workload is simulated for colocated replicas: {why}")
    if split is not None and cfg.attention_dp:  # before the colocated rows' run (the split's own check is later)
        raise InputError("attention-dp", "sessions in a split are simulated without attention DP in either pool: "
                         "drop --attention-dp / --decode-attention-dp")  # fmt: skip
    check_context(spec, cfg.input_len, cfg.output_len, max_seq_len)
    return spec


def mean_turn(
    cfg: ServeConfig, spec: SessionWorkload | None, router: str, replicas: int,
    prefix: PrefixWorkload | None = None, d: Deployment | None = None,
) -> tuple[ServeConfig, float]:  # fmt: skip
    """What the analytic means price: ``cfg`` (one replica's ``d``, a turn's new tokens) as its sessions' mean turn,
    with the history hits of ``replicas`` replicas' caches behind ``router`` and a shared system prefix's first-turn
    hits (:func:`~fmstack.perfmodel.inference_session_mean.screen_config`, :func:`~fmstack.perfmodel.
    inference_session_mean.first_turn_prefix`), and the probability a first turn hits; ``cfg`` without sessions."""
    if spec is None:
        return cfg, 0.0
    units = cache_units(router, replicas, cfg.tp if cfg.attention_dp else 1)
    priced = screen_config(cfg, spec, units)
    if prefix is None or d is None:
        return priced, 0.0
    hit, tokens = first_turn_prefix(prefix, d, priced, cfg.input_len, replicas, router)
    return screen_config(cfg, spec, units, tokens), hit


def mean_turn_json(
    priced: ServeConfig, spec: SessionWorkload, router: str, replicas: int, first_turn_hit: float = 0.0
) -> dict[str, Any]:
    """The analytic mean turn's JSON keys: ``mean_prompt_tokens`` (its prompt, rounded up), ``history_hit_share``
    (the share of it priced as cached: history, and a first turn's system prefix) and ``history_hit_turns`` (the
    share of turns that hit some)."""
    units = cache_units(router, replicas, priced.tp if priced.attention_dp else 1)
    return {"mean_prompt_tokens": priced.input_len, "history_hit_share": priced.prefix_hit_rate,
            "history_hit_turns": hit_turns(spec, units, first_turn_hit)}  # fmt: skip


def mean_turn_error(exc: InputError, priced: ServeConfig) -> InputError:
    """``exc`` (a rate beyond the replica's capacity) saying that the mean turn was priced."""
    return InputError(exc.field, f"{exc.message} (the sessions' mean turn: a {priced.input_len}-token prompt, "
                      f"{priced.prefix_hit_rate:.1%} of it cached history)")  # fmt: skip


def session_argv(spec: SessionWorkload | None) -> list[str]:
    """The flags that give ``spec`` (none for independent requests): ``--turns N --think-time-s S``."""
    return [] if spec is None else ["--turns", str(spec.turns), "--think-time-s", repr(spec.think_time_s)]


def closed_loop_sessions(
    est: ServeEstimate, d: Any, cfg: ServeConfig, spec: SessionWorkload, *, seed: int, spread: float
) -> tuple[ServeEstimate, None, dict[str, Any]]:
    """``est``'s clients (its concurrency) running sessions back to back on one replica, starting over about one
    request latency (:func:`fmstack.perfmodel.inference_sim_fleet.simulate_fleet`; about ``max(300, 4 x clients)``
    turns measured): ``est`` with the percentiles, and the joint run's JSON keys."""
    from fmstack.perfmodel.inference_sim_fleet import simulate_fleet

    clients = max(1, round(est.concurrency))
    sim = SimConfig(concurrency=clients, ramp_s=est.latency_s, num_requests=max(300, 4 * clients), warmup_requests=0,
                    length_spread=spread, seed=seed, sessions=spec)  # fmt: skip
    fleet = simulate_fleet(d, cfg, sim)
    out = fleet.result
    return replace(est, percentiles=out.percentiles(), simulated=out.means()), None, fleet.to_json()


def session_text(data: dict[str, Any]) -> str:
    """The session line: TTFT of first and later turns, later turns' hits, the mean prompt."""
    s = data["sessions"]
    return (f"sessions of {s['turns']} turns, think time {s['think_time_s']:g} s: TTFT p50 / p99 first turns "
            f"{s['ttft_p50_s_first_turn']:.4f} / {s['ttft_p99_s_first_turn']:.4f} s, later turns "
            f"{s['ttft_p50_s_later_turns']:.4f} / {s['ttft_p99_s_later_turns']:.4f} s; later turns hit "
            f"{s['hit_rate_later_turns']:.1%} ({s['token_hit_rate_later_turns']:.1%} of their prompt tokens "
            f"cached); mean prompt {s['mean_prompt_tokens']:,.0f} tokens (the analytic means price the mean turn: a "
            f"{data['mean_prompt_tokens']:,}-token prompt, {data['history_hit_share']:.1%} of it cached history)")  # fmt: skip


def split_session_text(z: dict[str, Any]) -> str:
    """A split's session line: TTFT of first and later turns, the prefill caches' hits, the prefill tokens computed
    and the KV moved per turn (the whole conversation's)."""
    s = z["sessions"]
    later = [t for t in s["by_turn"] if t["turn"] > 1]
    last = later[-1] if later else s["by_turn"][-1]
    return (f"sessions of {s['turns']} turns, think time {s['think_time_s']:g} s: TTFT p50 / p99 first turns "
            f"{s['ttft_p50_s_first_turn']:.4f} / {s['ttft_p99_s_first_turn']:.4f} s, later turns "
            f"{s['ttft_p50_s_later_turns']:.4f} / {s['ttft_p99_s_later_turns']:.4f} s; later turns hit their history "
            f"in the prefill caches ({z['prefill_router']}) {s['hit_rate_later_turns']:.1%} "
            f"({s['token_hit_rate_later_turns']:.1%} of their prompt tokens not computed; the prefill worker caches the "
            "prompts it ran, not the answers); "
            f"{s['prefill_tokens_mean']:,.0f} prompt tokens computed per turn of {s['mean_prompt_tokens']:,.0f}; KV "
            f"moved per turn {s['kv_bytes_per_turn_mean'] / 1e6:,.0f} MB on average, turn {last['turn']}'s "
            f"{last['kv_bytes'] / 1e6:,.0f} MB (the whole conversation: nothing is cached on the decode side)")  # fmt: skip
