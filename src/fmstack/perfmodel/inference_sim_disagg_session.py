"""Multi-turn sessions (:mod:`fmstack.perfmodel.inference_session`) in a disaggregated split
(:class:`fmstack.perfmodel.inference_sim_disagg.DisaggSim`): :class:`SessionDisaggSim`.

The turns arrive as in the colocated session run (:func:`fmstack.perfmodel.inference_sim_session.run_sessions`):
sessions start as a Poisson process at ``qps / turns`` per second from the run's generator (the same seed, the same
start times), each turn's lengths are drawn from it as the turn arrives, and turn ``t + 1`` arrives a think time
(its own generator, :data:`~fmstack.perfmodel.inference_sim_session.THINK_STREAM`) after turn ``t``'s last token.
Its prompt is the conversation so far plus ``input_len`` new tokens.

Where the history is cached. As in NVIDIA Dynamo's disaggregated serving and SGLang's PD disaggregation, each
prefill worker keeps a prefix cache (SGLang's radix cache, vLLM's automatic prefix caching) in its KV memory and a
router picks the prefill worker: a later turn sent to the prefill replica that computed the turn before finds that
turn's prompt cached and computes only the rest. The prefill worker never holds the previous answer: it was
generated on the decode worker (the prefill worker runs the prompt with ``max_tokens=1`` and moves its KV), so the
history a prefill cache holds is the previous turn's prompt, ``(t - 1) x (input + output) + input`` tokens after
turn ``t``, and turn ``t + 1`` computes ``output + input`` tokens at the mean lengths (the last answer and the new
message) on a hit, its whole prompt on a miss. Each prefill replica's cache is one entry per session
(:func:`~fmstack.perfmodel.inference_session.session_key`) in its pool's free part, stored as the turn's KV transfer
ends (the prompt's blocks then unreferenced, evictable least recently used first): the pools and reference counts of
:class:`~fmstack.perfmodel.inference_sim_disagg_prefix.PrefillPrefix`. Every turn's whole prompt, history and new
tokens alike, moves to a decode replica (Dynamo RFC ai-dynamo/dynamo discussion #7861: "Currently, Dynamo's disagg
mode transfers all KV cache for every request"), priced per turn at its own length (``kv_time``); nothing is cached on
the decode side (a decode replica keeps no session's KV between turns).

Routing (``SimConfig.router``): every router picks the prefill replica as a turn arrives (each prefill replica
serves its own queue first come first served): ``session`` (sticky affinity: every turn to the prefill replica of
the session's first turn), ``kv`` (Dynamo's prefill router, by the history's cached blocks), ``cache-aware`` (SGLang's
tree of the prompts it routed), and the blind ones (round-robin over the turns, random, least-loaded, power-of-two over
the prefill replicas' turns routed and not yet moved), which find a session's history on the replica of its turn
before about ``1 / P`` of the time. Decode pool: unchanged, its slots those of sequences at the turns' mean context
(``input + (turns - 1) / 2 x (input + output)`` prompt tokens, plus the output). A shared system prefix
(``SimConfig.prefix``, session 20): each session draws its group as colocated (the same generator, so the same
groups); its first turn is keyed by the group (a hit skips the prefix; a miss's prefix becomes the shared entry as
its prefill completes, :class:`~fmstack.perfmodel.inference_sim_disagg_prefix.PrefillPrefix`), its later turns by
the session's history alone, as colocated. Not modelled: attention-DP pools.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from fmstack.errors import InputError
from fmstack.perfmodel.inference import ServeConfig, max_concurrency
from fmstack.perfmodel.inference_kv_pairs import KvPairTimes, KvTimes, kv_matrix
from fmstack.perfmodel.inference_session import session_key
from fmstack.perfmodel.inference_session_mean import mean_prompt_tokens
from fmstack.perfmodel.inference_sim import new_request
from fmstack.perfmodel.inference_sim_disagg import DisaggSim
from fmstack.perfmodel.inference_sim_disagg_prefix import PrefillPrefix
from fmstack.perfmodel.inference_sim_disagg_stats import PoolStats, pool_stats
from fmstack.perfmodel.inference_sim_io import SimConfig, SimRequest, SimResult, summarise
from fmstack.perfmodel.inference_sim_prefix import admission_need, admit_prefix, release_tokens
from fmstack.perfmodel.inference_sim_session import THINK_STREAM, session_count, session_stats
from fmstack.perfmodel.inference_step import Deployment

KvTime = Callable[[int], KvTimes]
"""Prompt tokens -> the ``[p][r]`` seconds its KV takes from prefill replica ``p`` to decode replica ``r``."""


class PrefillSessions(PrefillPrefix):
    """The prefill replicas' caches of session histories and, with a shared system prefix, of the prefix groups
    (a first turn's key), their pools, router and queues."""

    def __init__(self, d: Deployment, cfg: ServeConfig, sim: SimConfig, prefill_replicas: int) -> None:
        prefix_len = 0
        if sim.prefix is not None:
            prefix_len = sim.prefix.prefix_len
            if prefix_len >= cfg.input_len:
                raise InputError("prefix-len", f"must be below --input-len ({cfg.input_len}), got {prefix_len}")
            self.workload = sim.prefix
        self._setup(d, cfg, sim, prefill_replicas, prefix_len, routed=True)

    def route_turn(self, req: SimRequest, last_prompt: int) -> int:
        """The prefill replica for arriving turn ``req`` (``last_prompt``: its session's previous prompt, what
        cache-aware's tree holds of it)."""
        if self.router.name == "session":
            p = self.router.pick_session(req.session)
        elif self.router.kv is not None:
            p = self.router.kv.pick(req, self.caches, self.prefix_len)
        else:
            p = self.router.pick(self.load, req.group, last_prompt if req.turn > 1 else self.prefix_len, req.input_len)
            if req.turn == 1:
                self.router.remember(session_key(req.session), p)
        self.load[p] += 1
        return p

    def take(self, p: int, req: SimRequest) -> None:
        """Prefill replica ``p`` takes turn ``req``: a hit on its session's history (a first turn: on its system
        prefix) starts it past it."""
        cache = self.caches[p]
        need = admission_need(cache, req, self.prefix_len)[0] - req.output_len
        admit_prefix(cache, req, self.prefix_len, first_chunk=True)
        self.free_tokens[p] -= need
        cache.fit(max(0.0, self.free_tokens[p]))
        self.holder[req.rid] = p

    def moved(self, req: SimRequest) -> None:
        """Turn ``req``'s KV has reached its decode replica: its tokens (and a first turn's reference to its system
        prefix) go back to the free part and its prompt stays cached as the session's history (replacing the shorter
        one; it does not share the system prefix's entry, as colocated, ``inference_session``)."""
        p = self.holder.pop(req.rid)
        self.free_tokens[p] += release_tokens(self.caches[p], req) - req.output_len
        self.caches[p].store(session_key(req.session), req.input_len, max(0.0, self.free_tokens[p]))
        self.load[p] -= 1


@dataclass(slots=True)
class _Turns:
    """A session's progress: turns sent, the conversation's tokens so far, its last prompt."""

    sent: int = 0
    history: int = 0
    prompt: int = 0


class SessionDisaggSim(DisaggSim):
    """The split under ``sim.sessions`` (open loop, ``sim.request_rate_per_s`` the deployment's turns/s);
    ``kv_time``: each turn's KV transfer by its prompt tokens."""

    def __init__(
        self, d: Deployment, cfg: ServeConfig, sim: SimConfig, *, prefill_replicas: int, decode_replicas: int,
        kv_time: KvTime, decode: Deployment | None = None, decode_cfg: ServeConfig | None = None,
    ) -> None:  # fmt: skip
        spec = sim.sessions
        if spec is None:
            raise InputError("turns", "a multi-turn split needs a session workload (--turns)")
        if d.attention_dp or (d if decode is None else decode).attention_dp:
            raise InputError("attention-dp", "sessions in a split are simulated without attention DP in either pool: "
                             "drop --attention-dp / --decode-attention-dp")  # fmt: skip
        if cfg.prefix_hit_rate > 0:
            raise InputError(
                "prefix-hit-rate", "a multi-turn workload simulates its cache hits: drop --prefix-hit-rate"
            )
        first = kv_time(cfg.input_len)
        super().__init__(d, cfg, sim, prefill_replicas=prefill_replicas, decode_replicas=decode_replicas,
                         kv_transfer_s=first, decode=decode, decode_cfg=decode_cfg)  # fmt: skip
        self.spec = spec
        self.kv_time = kv_time
        self._kv_by_len: dict[int, KvPairTimes] = {}
        dc = cfg if decode_cfg is None else decode_cfg
        longest = math.ceil(spec.turns * (cfg.input_len + cfg.output_len) * (1 + sim.length_spread))
        if max_concurrency(self.dd, replace(dc, input_len=longest, output_len=1, max_batch=None)) < 1:
            raise InputError("turns", f"a {spec.turns}-turn conversation of up to {longest} tokens does not fit a "
                             "decode replica's KV pool; use fewer or shorter turns")  # fmt: skip
        mean = math.ceil(mean_prompt_tokens(spec, cfg.input_len, cfg.output_len))
        self._cap = max(1, max_concurrency(self.dd, replace(dc, input_len=mean)))
        self._free_slots = [self._cap] * decode_replicas
        self.prefix = self.sessions = PrefillSessions(self.d, cfg, sim, prefill_replicas)
        if longest > self.sessions.pool_tokens:
            raise InputError("turns", f"a {spec.turns}-turn conversation of up to {longest} tokens does not fit a "
                             f"prefill replica's KV pool of {self.sessions.pool_tokens:.0f} tokens; use fewer or "
                             "shorter turns")  # fmt: skip
        self.kv_bytes_by_rid: dict[int, float] = {}
        self._think = np.random.default_rng([sim.seed, THINK_STREAM])
        self._turns: list[_Turns] = []

    def run(self) -> SimResult:
        sim, spec = self.sim, self.spec
        rate = (sim.request_rate_per_s or 1.0) / spec.turns
        count = session_count(sim, spec)
        self._groups = self.sessions.groups(count) if sim.prefix is not None else [-1] * count
        for t in np.cumsum(self.rng.exponential(1.0 / rate, count)).tolist():
            self._push(t, "turn", len(self._turns))
            self._turns.append(_Turns())
        first_done_s, last_start_s = math.inf, 0.0
        while self._events:
            time_s, _, kind, idx = heapq.heappop(self._events)
            self.clock_s = time_s
            if kind == "turn":
                req = self._arrive(idx)
                last_start_s = time_s if req.turn == 1 else last_start_s
                first_done_s = min(first_done_s, time_s) if req.turn == spec.turns else first_done_s
            elif kind == "prefill":
                self._finish_prefill(idx)
            elif kind == "kv":
                self._kv_done(idx)
            elif kind == "wake":
                self._wake(idx)
            else:
                self._finish_decode(idx)
        warm = sum(1 for q in self._requests if q.arrival_s < first_done_s)
        cool = sum(1 for q in self._requests if q.arrival_s > last_start_s)
        self.sim = replace(sim, num_requests=len(self._requests), warmup_requests=max(sim.warmup_requests, warm),
                           cooldown_requests=cool)  # fmt: skip
        return summarise(self._requests, self.sim, self.iterations)

    def _arrive(self, sid: int) -> SimRequest:
        """Session ``sid``'s next turn arrives now: drawn, routed to a prefill replica, queued there."""
        s = self._turns[sid]
        req = new_request(self.rng, self.cfg, self.sim, len(self._requests), self.clock_s)
        s.sent += 1
        req.session, req.turn, req.history = sid, s.sent, s.history
        req.input_len += s.history
        req.group = self._groups[sid] if s.sent == 1 else session_key(sid)
        self._requests.append(req)
        p = self.sessions.route_turn(req, s.prompt)
        s.prompt = req.input_len
        self.sessions.queues[p].append(req.rid)
        if not self._prefill_busy[p]:
            self._start_prefill(p)
        return req

    def _finish_decode(self, r: int) -> None:
        running = list(self._running[r])
        super()._finish_decode(r)
        for q in running:
            req = self._requests[q]
            if req.generated >= req.output_len:  # the turn is done: the session's next after a think time
                s = self._turns[req.session]
                s.history = req.input_len + req.output_len
                if s.sent < self.spec.turns:
                    pause = float(self._think.exponential(self.spec.think_time_s)) if self.spec.think_time_s else 0.0
                    self._push(req.last_token_s + pause, "turn", req.session)

    def _kv_s(self, p: int, r: int, rid: int) -> float:
        """Each turn's KV moves in its own prompt's time (``kv_time``), not the first turn's."""
        tokens = self._requests[rid].input_len
        if tokens not in self._kv_by_len:
            self._kv_by_len[tokens] = kv_matrix(self.kv_time(tokens), *self.kv_pair_s.shape)
        return self._kv_by_len[tokens].at(p, r)

    def measured(self) -> list[SimRequest]:
        """The measured turns (the window :meth:`run` set)."""
        return self._requests[self.sim.warmup_requests : self.sim.num_requests - self.sim.cooldown_requests]


def simulate_disagg_sessions(
    d: Deployment, cfg: ServeConfig, sim: SimConfig, *, prefill_replicas: int, decode_replicas: int, kv_time: KvTime,
    kv_bytes: Callable[[int], float], decode: Deployment | None = None, decode_cfg: ServeConfig | None = None,
) -> tuple[SimResult, PoolStats, dict[str, Any]]:  # fmt: skip
    """One run of :class:`SessionDisaggSim`: its result, the pools' :class:`PoolStats` and the ``sessions`` JSON
    block (:func:`~fmstack.perfmodel.inference_sim_session.session_stats`: TTFT of first and later turns, hits of
    the prefill caches) with the KV moved per turn (``kv_bytes``: prompt tokens -> bytes): ``kv_bytes_per_turn_mean``
    and per turn ``kv_bytes`` in ``by_turn``, the prefill tokens computed per turn (``prefill_tokens_mean``), and the
    measured window (``warmup_requests``, ``cooldown_requests`` of ``num_requests`` turns)."""
    s = SessionDisaggSim(d, cfg, sim, prefill_replicas=prefill_replicas, decode_replicas=decode_replicas,
                         kv_time=kv_time, decode=decode, decode_cfg=decode_cfg)  # fmt: skip
    result = s.run()
    measured = s.measured()
    block: dict[str, Any] = session_stats(measured, s.spec)
    done = [q for q in measured if q.generated >= q.output_len]
    block["kv_bytes_per_turn_mean"] = float(np.mean([kv_bytes(q.input_len) for q in done])) if done else math.nan
    block["prefill_tokens_mean"] = float(np.mean([q.input_len - q.kv_shared for q in done])) if done else math.nan
    for row in block["by_turn"]:
        qs = [q for q in done if q.turn == row["turn"]]
        row["kv_bytes"] = float(np.mean([kv_bytes(q.input_len) for q in qs])) if qs else math.nan
        row["prefill_tokens_mean"] = float(np.mean([q.input_len - q.kv_shared for q in qs])) if qs else math.nan
    block |= {"warmup_requests": s.sim.warmup_requests, "cooldown_requests": s.sim.cooldown_requests,
              "num_requests": s.sim.num_requests}  # fmt: skip
    return result, pool_stats(s), block
