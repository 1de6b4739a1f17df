"""The replicas behind one router under a multi-turn workload (:mod:`fmstack.perfmodel.inference_session`),
simulated together (:func:`run_sessions`), and its per-turn statistics (:func:`session_stats`).

Open loop: sessions start as a Poisson process at ``replicas x request_rate_per_s / turns`` per second (the rate
counts requests, every turn one, as a dashboard's requests/s does); closed loop: each of ``concurrency`` clients
(starting uniformly over ``ramp_s``) runs sessions back to back. Every turn after a session's first, and a closed-loop
client's next session, arrives a think time (exponential, mean ``think_time_s``, its own generator) after the
client's previous turn's last token. Those arrivals depend on when turns finish, so the run advances to the earlier
of the next arrival and the next event of any replica, one instant at a time (:meth:`BatchingSim.run_until` just
past it), and a completion schedules the session's next turn; an arrival is routed at its time as in
:func:`fmstack.perfmodel.inference_sim_fleet.run_fleet`, the replica it is sent to cut back to that instant (the
lazy replicas: a stretch of iterations stops at its first completion, so no completion is skipped). Each turn's
lengths are drawn from the run's generator as it arrives; each session's system-prefix group (with a shared-prefix
workload) from its own. Measured: the turns that arrive once the first session has sent its last turn (the
sessions in flight have filled up) and before the last session sends its first (they have not begun to drain).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, replace

import numpy as np

from fmstack.errors import InputError
from fmstack.perfmodel.inference import ServeConfig
from fmstack.perfmodel.inference_router import Router
from fmstack.perfmodel.inference_session import SessionWorkload, session_key
from fmstack.perfmodel.inference_sim import BatchingSim, new_request
from fmstack.perfmodel.inference_sim_io import PERCENTILES, SimConfig, SimRequest
from fmstack.perfmodel.inference_step import Deployment

GROUP_STREAM = 1
"""Seed offset of the sessions' prefix groups (as :data:`fmstack.perfmodel.inference_sim_fleet.GROUP_STREAM`)."""
ROUTER_STREAM = 2
THINK_STREAM = 3
"""Seed offset of the think times' generator."""


@dataclass(slots=True)
class _Session:
    sid: int
    group: int
    turn: int = 0
    """Turns sent."""
    history: int = 0
    """Tokens of the conversation so far (every earlier turn's prompt and output)."""
    prompt: int = 0
    """The last turn's prompt tokens (what a router that saw it holds of the conversation)."""
    client: int = -1


@dataclass(slots=True)
class SessionRun:
    """A multi-turn run: its requests in arrival order, the replicas and router as it left them, and the run's
    :class:`SimConfig` with the measured window (``warmup_requests``, ``cooldown_requests``) set."""

    requests: list[SimRequest]
    replicas: list[BatchingSim]
    router: Router
    sim: SimConfig


def session_count(sim: SimConfig, spec: SessionWorkload) -> int:
    """Sessions to start: ``num_requests / turns`` for the measured window, plus those that fill (and drain) the
    sessions in flight: open loop ``2 x session rate x (turns - 1) x think_time_s``, closed loop ``2 x concurrency``."""
    base = math.ceil(sim.num_requests / spec.turns)
    if sim.request_rate_per_s is None:
        return base + 2 * (sim.concurrency or 1)
    rate = sim.request_rate_per_s * sim.replicas / spec.turns
    return base + math.ceil(2 * rate * (spec.turns - 1) * spec.think_time_s)


def run_sessions(d: Deployment, cfg: ServeConfig, sim: SimConfig) -> SessionRun:
    """``sim.replicas`` replicas behind ``sim.router`` (``session``: sticky affinity too) under ``sim.sessions``."""
    spec = sim.sessions
    if spec is None:
        raise InputError("turns", "a multi-turn run needs a session workload (--turns)")
    n = sim.replicas
    if sim.request_rate_per_s is None and n > 1:
        raise InputError("replicas", "closed-loop sessions are simulated on one replica: give --qps for several")
    if cfg.prefix_hit_rate > 0:
        raise InputError("prefix-hit-rate", "a multi-turn workload simulates its cache hits: drop --prefix-hit-rate")
    prefix_len = 0 if sim.prefix is None else sim.prefix.prefix_len
    if sim.prefix is not None and prefix_len >= cfg.input_len:
        raise InputError("prefix-len", f"must be below --input-len ({cfg.input_len}), got {prefix_len}")
    one = replace(sim, replicas=1, router="round-robin", prefix=None, sessions=None)
    reps = [BatchingSim(d, cfg, one) for _ in range(n)]
    finished: list[SimRequest] = []
    longest = math.ceil(spec.turns * (cfg.input_len + cfg.output_len) * (1 + sim.length_spread))
    for r in reps:
        r.use_prefix_cache(prefix_len)
        r.routed, r.on_finish = True, finished.append
    if longest > reps[0].kv_pool_tokens:
        raise InputError(
            "turns", f"a {spec.turns}-turn conversation of up to {longest} tokens does not fit a replica's KV pool "
            f"of {reps[0].kv_pool_tokens:.0f} tokens (an engine refuses it); use fewer or shorter turns",
        )  # fmt: skip
    rng = np.random.default_rng(sim.seed)
    think = np.random.default_rng([sim.seed, THINK_STREAM])
    count = session_count(sim, spec)
    groups = (sim.prefix.draw(np.random.default_rng([sim.seed, GROUP_STREAM]), count).tolist()
              if sim.prefix is not None else [-1] * count)  # fmt: skip
    router = Router(name=sim.router, replicas=n, rng=np.random.default_rng([sim.seed, ROUTER_STREAM]),
                    kv_config=sim.kv_router)  # fmt: skip
    if router.kv is not None:  # its counts kept as the replicas report first tokens and completions
        router.kv.watch(reps)
    sessions: list[_Session] = []
    pending: list[tuple[float, int]] = []  # (arrival, session): a session has one turn pending at most

    def start(at_s: float, client: int) -> None:
        s = _Session(sid=len(sessions), group=int(groups[len(sessions)]), client=client)
        sessions.append(s)
        heapq.heappush(pending, (at_s, s.sid))

    def pause_s() -> float:
        return float(think.exponential(spec.think_time_s)) if spec.think_time_s > 0 else 0.0

    if sim.request_rate_per_s is not None:
        rate = sim.request_rate_per_s * n / spec.turns
        for t in np.cumsum(rng.exponential(1.0 / rate, count)).tolist():
            start(t, -1)
    else:
        for c, t in enumerate(np.sort(rng.uniform(0.0, sim.ramp_s, min(sim.concurrency or 1, count))).tolist()):
            start(t, c)
    requests: list[SimRequest] = []
    first_done_s, last_start_s = math.inf, 0.0
    while True:
        t_arr = pending[0][0] if pending else math.inf
        t_ev = min(r.next_event_s for r in reps)
        if t_ev < t_arr:  # the replicas' events at t_ev first: a completion may send a turn before t_arr
            upto = math.nextafter(t_ev, math.inf)
            for r in reps:
                if r.next_event_s < upto:
                    r.run_until(upto)
            for q in finished:
                s = sessions[q.session]
                s.history = q.input_len + q.output_len
                if s.turn < spec.turns:
                    heapq.heappush(pending, (q.last_token_s + pause_s(), s.sid))
                elif s.client >= 0 and len(sessions) < count:
                    start(q.last_token_s + pause_s(), s.client)
            finished.clear()
            continue
        if not pending:
            break
        t, sid = heapq.heappop(pending)
        s = sessions[sid]
        req = new_request(rng, cfg, one, len(requests), t)
        s.turn += 1
        req.session, req.turn, req.history = s.sid, s.turn, s.history
        req.input_len += s.history
        req.group = s.group if s.turn == 1 else session_key(s.sid)
        if s.turn == 1:
            last_start_s = t
        if s.turn == spec.turns:
            first_done_s = min(first_done_s, t)
        k = _route(router, reps, req, s, prefix_len)
        s.prompt = req.input_len
        requests.append(req)
        reps[k].cut_at(t)
        reps[k].accept(req)
    for r in reps:
        r.routed = False
    warm = sum(1 for q in requests if q.arrival_s < first_done_s)
    cool = sum(1 for q in requests if q.arrival_s > last_start_s)
    measured = replace(sim, num_requests=len(requests), warmup_requests=max(sim.warmup_requests, warm),
                       cooldown_requests=cool)  # fmt: skip
    return SessionRun(requests, reps, router, measured)


def _route(router: Router, reps: list[BatchingSim], req: SimRequest, s: _Session, prefix_len: int) -> int:
    """The replica ``router`` sends turn ``req`` of session ``s`` to."""
    if router.name == "session":
        return router.pick_session(s.sid)
    if router.kv is not None:
        return router.kv.pick(req, [r.prefix_cache for r in reps], prefix_len)
    # cache-aware's tree holds the session's last prompt where it sent it (it never sees outputs)
    k = router.pick([r.outstanding for r in reps], req.group, prefix_len if s.turn == 1 else s.prompt, req.input_len)
    if s.turn == 1:
        router.remember(session_key(s.sid), k)
    return k


def _pct(x: list[float]) -> dict[int, float]:
    return {p: float(np.percentile(x, p)) for p in PERCENTILES} if x else {p: math.nan for p in PERCENTILES}


def session_stats(measured: list[SimRequest], spec: SessionWorkload) -> dict[str, object]:
    """The ``sessions`` JSON block over the measured turns that completed: TTFT percentiles of first and later turns,
    the share of later turns that hit and of their prompt tokens served from the cache, the mean prompt, and per turn
    (``by_turn``: requests, mean prompt tokens, the share that hit, token hit rate, TTFT p50 / p99)."""
    done = [q for q in measured if q.generated >= q.output_len]
    first = [q for q in done if q.turn == 1]
    later = [q for q in done if q.turn > 1]

    def hits(qs: list[SimRequest]) -> float:
        prompt = sum(q.input_len for q in qs)
        return sum(q.kv_shared for q in qs if q.prefix_hit) / prompt if prompt else math.nan

    by_turn = []
    for t in range(1, spec.turns + 1):
        qs = [q for q in done if q.turn == t]
        p = _pct([q.first_token_s - q.arrival_s for q in qs])
        by_turn.append({"turn": t, "requests": len(qs),
                        "mean_prompt_tokens": float(np.mean([q.input_len for q in qs])) if qs else math.nan,
                        "hit_rate": sum(q.prefix_hit for q in qs) / len(qs) if qs else math.nan,
                        "token_hit_rate": hits(qs), "ttft_p50_s": p[50], "ttft_p99_s": p[99]})  # fmt: skip
    f, g = _pct([q.first_token_s - q.arrival_s for q in first]), _pct([q.first_token_s - q.arrival_s for q in later])
    return {
        "turns": spec.turns, "think_time_s": spec.think_time_s,
        "ttft_p50_s_first_turn": f[50], "ttft_p99_s_first_turn": f[99],
        "ttft_p50_s_later_turns": g[50], "ttft_p99_s_later_turns": g[99],
        "hit_rate_later_turns": sum(q.prefix_hit for q in later) / len(later) if later else math.nan,
        "token_hit_rate_later_turns": hits(later), "token_hit_rate": hits(done),
        "mean_prompt_tokens": float(np.mean([q.input_len for q in done])) if done else math.nan,
        "by_turn": by_turn,
    }  # fmt: skip
