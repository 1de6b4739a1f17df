"""A small discrete-event simulation of one serving replica: arrivals, a vLLM-like scheduler, percentiles.

Requests arrive as a Poisson process (open loop, ``request_rate_per_s``; a replica that is one of ``replicas``
behind a round-robin router takes every ``replicas``-th arrival of the deployment's Poisson stream: Erlang gaps,
:attr:`SimConfig.router`) or from ``concurrency`` clients that
send the next request when the last finishes (closed loop). Each engine iteration (Orca's iteration-level
scheduling, Yu et al. 2022, sec. 3) runs every admitted sequence one token forward and admits waiting prompts
first come, first served while the token budget (``max_num_tokens``), the sequence limit and the paged KV pool
allow (vLLM's scheduler, Kwon et al. 2023, sec. 4.5; a request reserves the KV blocks of its full length, so it is
never preempted). With chunked prefill a prompt may be split over iterations that also carry decode tokens
(Sarathi-Serve, Agrawal et al. 2024); without it, an iteration with prompts carries no decode tokens (vLLM V0's
default, which lengthens the other requests' inter-token gaps). Iteration time comes from the roofline in
:mod:`fmstack.perfmodel.inference_step`. Under attention DP each request lives on one of the ``tp`` ranks:
TensorRT-LLM's PyTorch executor gives new requests to the rank with the fewest active prompt tokens among those
below the mean request count (``_balance_requests_across_ranks``, a heap; no waiting for balance unless
``attention_dp_config.enable_balance`` is set), each rank schedules its own sequences within its own
``max_num_tokens`` and ``max_batch_size`` (whole prompts next to its decodes when prefill is not chunked), and the
iteration, which ends at the MoE exchange, takes the busiest rank's time. Static batching (``scheduler="static"``,
TensorRT-LLM before in-flight batching; the analytic model's static branch): an idle engine takes the waiting
requests the sequence limit and the KV pool allow as one batch, prefills every prompt in one iteration (no token
budget), then runs decode-only iterations until the last of the batch has finished (a finished request leaves the
batch, nobody joins it); only then is the next batch formed. Not under attention DP (InputError). The clock, event
heap, tie-break counter and random generator live on the simulation instance (simpy's Environment): the same seed
gives the same result. Runs of iterations whose batch does not change before the next event (decode-only, or one
long prompt's chunks filling the budget) are priced together and jumped over
(:mod:`fmstack.perfmodel.inference_sim_stretch`; ``skip_ahead=False`` runs them one at a time, with the same
results).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from fmstack.errors import InputError
from fmstack.perfmodel.inference import ServeConfig, max_concurrency
from fmstack.perfmodel.inference_prefix import PrefixCache
from fmstack.perfmodel.inference_session import keep_history
from fmstack.perfmodel.inference_sim_adp import AttentionDP
from fmstack.perfmodel.inference_sim_io import (
    PERCENTILES,
    ROUTERS,
    SimConfig,
    SimRequest,
    SimResult,
    arrival_gaps_s,
    draw_length,
    summarise,
)
from fmstack.perfmodel.inference_sim_kv import KvAdmission
from fmstack.perfmodel.inference_sim_prefix import delay_first_chunk, late_hit, publish_prefix, release_tokens
from fmstack.perfmodel.inference_speculative import draw_tokens
from fmstack.perfmodel.inference_step import Deployment, kept_s, step_time

__all__ = ["PERCENTILES", "ROUTERS", "BatchingSim", "SimConfig", "SimResult", "simulate"]


class BatchingSim(KvAdmission, AttentionDP):
    """One replica under load; every piece of mutable state is on the instance."""

    def __init__(
        self, d: Deployment, cfg: ServeConfig, sim: SimConfig, *, skip_ahead: bool = True, chunk_stretches: bool = True
    ) -> None:
        self.d, self.cfg, self.sim = d, cfg, sim
        self._skip_ahead = skip_ahead and d.spec is None  # a speculative iteration's tokens are drawn one by one
        """Price a stretch of iterations whose batch does not change with one vectorised ``step_time`` call and jump
        the clock to its end (:meth:`_decode_stretch`, :meth:`_chunk_stretch`); False: one iteration at a time (the
        same results, slower; for tests and benchmarks)."""
        self._chunk_stretches = chunk_stretches
        """With ``skip_ahead``: also the stretches that carry one prompt's chunks (False: decode-only stretches
        alone, the simulation of session 14; for benchmarks)."""
        self.rng = np.random.default_rng(sim.seed)
        self.clock_s = 0.0
        self._events: list[tuple[float, int, str, int]] = []
        self._counter = 0
        self._requests: list[SimRequest] = []
        self._waiting: list[int] = []
        self._running: list[int] = []
        self._busy = False
        # the memory's KV pool (in full-length sequences, as the analytic model counts it), not max_batch's
        self._kv_tokens_free = float(
            max_concurrency(d, replace(cfg, max_batch=None)) * (cfg.input_len + cfg.output_len)
        )
        self._max_seqs = cfg.max_batch or 1_000_000
        self._batch: tuple[list[int], dict[int, int]] = ([], {})
        self._step_s = 0.0
        """The last iteration's seconds (sizes a stretch's first block)."""
        self.iterations = 0
        self.ranks = d.tp if d.attention_dp else 1
        """Attention DP: ranks that each hold their own requests (1 otherwise)."""
        self._rank_of: dict[int, int] = {}
        self._rank_reqs: list[list[int]] = [[] for _ in range(self.ranks)]
        """Requests assigned to each rank (running or waiting there), in arrival order."""
        self._rank_kv_free = [self._kv_tokens_free / self.ranks] * self.ranks
        self._kv_pool_tokens = self._kv_tokens_free / self.ranks
        """One sequence's KV must fit in one pool (a rank's under attention DP)."""
        if self.ranks > 1 and self._rank_kv_free[0] < cfg.input_len + cfg.output_len:
            raise InputError(
                "attention-dp", f"each of the {self.ranks} ranks' KV pools holds {self._rank_kv_free[0]:.0f} tokens, "
                f"less than one {cfg.input_len + cfg.output_len}-token sequence; use fewer ranks or more memory",
            )  # fmt: skip
        self.prompt_ranks: list[int] = []
        """Attention DP: ranks that carried prompt tokens, per iteration (how far the ranks are in step)."""
        self._static = cfg.scheduler == "static"
        if self._static and self.ranks > 1:
            raise InputError("scheduler", "static batching is not simulated under attention DP (each rank would "
                             "form its own batch); use --scheduler continuous or --no-simulate")  # fmt: skip
        self.horizon_s = math.inf
        """Joint simulation (:mod:`fmstack.perfmodel.inference_sim_fleet`): the next arrival at any replica, which the
        router may send here: a stretch of iterations stops there, as at an arrival of its own."""
        self.routed = False
        self._open = None
        self._memo = None
        self._step_s_of: dict[tuple[Any, ...], float] = {}
        """Iteration seconds by load (:meth:`_run_step`): a speculative run meets the same few thousand loads
        hundreds of thousands of times, each a ``step_time`` call and its draft's (the same call, the same float)."""
        self.prefix_caches: list[PrefixCache] = []
        """Joint simulation with a shared-prefix workload (:meth:`use_prefix_cache`): each rank's prefix cache (one;
        attention DP: one per rank, as each SGLang DP-attention rank runs its own scheduler and radix cache), looked
        up at admission (:mod:`fmstack.perfmodel.inference_sim_prefix`); empty: none."""
        self.prefix_len = 0
        self.finished = 0
        """Requests completed."""
        self.spec_steps = 0
        """Decode steps of a sequence (one sequence in one iteration)."""
        self.spec_tokens = 0
        """Tokens those steps emitted (= ``spec_steps`` without speculative decoding)."""
        self.busy_s = 0.0
        """Seconds with an iteration in progress."""
        self._busy_since_s = 0.0
        self.on_finish: Callable[[SimRequest], None] | None = None
        """Multi-turn sessions (:mod:`fmstack.perfmodel.inference_sim_session`): called with each request as it
        completes (the driver sends the session's next turn), instead of a closed-loop client's next request."""
        self.on_first_token: Callable[[SimRequest], None] | None = None
        """Joint simulation with the KV router (:meth:`fmstack.perfmodel.inference_router_kv.KvRouter.watch`): called
        with each request as its prompt completes (its first token)."""
        self.on_done: Callable[[SimRequest], None] | None = None
        """The same: called with each request as it completes (before :attr:`on_finish`)."""

    @property
    def next_event_s(self) -> float:
        """The time of the next event on the heap (inf: none)."""
        return self._events[0][0] if self._events else math.inf

    def _new_request(self, at_s: float) -> None:
        rid = len(self._requests)
        if rid >= self.sim.num_requests:
            return
        self.accept(new_request(self.rng, self.cfg, self.sim, rid, at_s))

    def accept(self, req: SimRequest) -> None:
        """Take ``req`` (its arrival at ``req.arrival_s``, not before the clock), renumbered as this replica's."""
        req.rid = len(self._requests)
        if self.sim.output_lengths is not None and req.input_len + req.output_len > self._kv_pool_tokens:
            raise InputError(
                "output-lengths", f"request {req.rid}: {req.input_len} + {req.output_len} tokens exceed the "
                f"replica's KV pool of {self._kv_pool_tokens:.0f} tokens (an engine refuses it; cap the lengths)",
            )  # fmt: skip
        self._requests.append(req)
        self._push(req.arrival_s, "arrive", req.rid)

    @property
    def requests(self) -> list[SimRequest]:
        """The requests taken, in the order they came (renumbered as this replica's)."""
        return self._requests

    @property
    def outstanding(self) -> int:
        """Requests sent here and not finished (as a router counts them)."""
        return len(self._requests) - self.finished

    def run(self) -> SimResult:
        self._load()
        self.run_until(math.inf)
        return self._result()

    def _load(self) -> None:
        """The open loop's arrivals, or the closed loop's first requests."""
        if self.sim.request_rate_per_s is not None:
            for t in np.cumsum(arrival_gaps_s(self.sim, self.rng)):
                self._new_request(float(t))
        else:
            starts = np.sort(self.rng.uniform(0.0, self.sim.ramp_s, self.sim.concurrency or 1))
            if self.sim.stationary_start and self.ranks == 1:
                starts = np.zeros(self.sim.concurrency or 1)
            for t in starts:
                self._new_request(float(t))
            # static batching's steady state is every client in the same batch: the clients all sent at t = 0 form
            # it (and mid-output requests cannot be, as a static batch prefills together)
            if self.sim.stationary_start and self.ranks == 1 and not self._static:
                self._start_running()
                self._start_iteration()

    def run_until(self, time_s: float) -> None:
        """Take the events before ``time_s`` (all of them: ``math.inf``) in time order."""
        while self._events and self._events[0][0] < time_s:
            now_s, _, kind, rid = heapq.heappop(self._events)
            self.clock_s = now_s
            was_busy = self._busy
            if kind == "arrive":
                self._waiting.append(rid)
            elif kind == "done":
                self._finish_iteration()  # else "wake": a host tier's copy is done, the engine looks again
            # static: the batch forms once every event of this instant is in (a closed-loop client sends its next
            # request as its last one finishes: it joins the next batch, as the others that finished with it)
            same_instant = self._static and self._events and self._events[0][0] <= now_s
            if not self._busy and not same_instant:
                self._start_iteration()
            if self._busy != was_busy:  # a busy period starts or ends
                if self._busy:
                    self._busy_since_s = now_s
                else:
                    self.busy_s += now_s - self._busy_since_s

    def _start_running(self) -> None:
        """``stationary_start``: the first requests run from t = 0 at uniform phases of their outputs."""
        self._events.clear()  # their arrivals: they are admitted here, or queued below
        for req in self._requests:
            need = req.input_len + req.output_len
            if req.output_len < 2 or need > self._kv_tokens_free or len(self._running) >= self._max_seqs:
                self._push(0.0, "arrive", req.rid)
                continue
            self._kv_tokens_free -= need
            req.prefilled = req.input_len
            req.generated = int(self.rng.integers(1, req.output_len))  # 1 .. output_len - 1 tokens out
            req.first_token_s = req.last_token_s = req.admitted_s = 0.0
            self._running.append(req.rid)

    def _start_iteration(self) -> None:
        if self.ranks > 1:
            self._start_iteration_adp()
            return
        if self._static:
            self._start_iteration_static()
            return
        decode = [r for r in self._running if self._requests[r].prefilled >= self._requests[r].input_len]
        budget = self.cfg.max_num_tokens - (len(decode) if self.sim.chunked_prefill else 0)
        partial = [r for r in self._running if self._requests[r].prefilled < self._requests[r].input_len]
        partial += self._admit(self.clock_s)
        chunks: dict[int, int] = {}
        cache = self.prefix_caches[0] if self.prefix_caches else None
        for r in partial:
            if budget <= 0:
                break
            req = self._requests[r]
            if cache is not None and req.prefilled == 0:
                self._kv_tokens_free += late_hit(cache, req, self.prefix_len, self._kv_tokens_free)
                cache.fit(self._kv_tokens_free)
                if delay_first_chunk(req, self.clock_s):
                    self._push(req.ready_s, "wake")
            if req.ready_s > self.clock_s:  # its KV is still being copied from the host tier
                continue
            left = req.input_len - req.prefilled
            take = min(left, budget) if self.sim.chunked_prefill else (left if left <= budget or not chunks else 0)
            if take > 0:
                chunks[r] = take
                budget -= take
        if chunks and not self.sim.chunked_prefill:
            decode = []
        if not decode and not chunks:
            return
        if self._skip_ahead and not chunks and (len(decode) == len(self._running) or self._chunk_stretches):
            self._decode_stretch(decode)
            return
        if self._skip_ahead and self._chunk_stretches and self.sim.chunked_prefill and len(chunks) == 1:
            ((rid, take),) = chunks.items()
            if self._requests[rid].prefilled + take < self._requests[rid].input_len:
                self._chunk_stretch(decode, rid, take)
                return
        self._run_step(decode, chunks)

    def _start_iteration_static(self) -> None:
        """Static batching: decode the running batch until its last request finishes; an idle engine forms the next
        batch from the queue (FCFS, within the sequence limit and the KV pool) and prefills it in one iteration."""
        if self._running:
            if self._skip_ahead:
                self._decode_stretch(list(self._running))
                return
            self._run_step(list(self._running), {})
            return
        self._admit(self.clock_s)
        if self._running:
            self._run_step([], {r: self._requests[r].input_len - self._requests[r].prefilled for r in self._running})

    def _run_step(self, decode: list[int], chunks: dict[int, int]) -> None:
        """One iteration of ``decode``'s sequences and the prompt ``chunks`` (request -> tokens), timed by
        ``step_time`` at the decodes' mean context."""
        load = self._iteration_load(decode, chunks)
        t = kept_s(self._step_s_of, load, lambda: float(step_time(self.d, *load).total_s))
        self._batch = (decode, chunks)
        self._busy = True
        self.iterations += 1
        self._step_s = t
        self._push(self.clock_s + t, "done")

    def _arrivals_until(self, time_s: float) -> float:
        """The arrivals up to ``time_s``, the end of an iteration inside a chunk's stretch, join the queue and are
        admitted as the next iteration starts (as the event loop takes each arrival, then that iteration's end:
        an arrival at the same instant was pushed first); the time of the next event. Only arrivals are on the heap
        while a stretch runs (the iteration in progress is not pushed yet)."""
        woke = False
        while self._events and self._events[0][0] <= time_s:
            _, _, kind, rid = heapq.heappop(self._events)
            assert kind != "done", "a stretch runs while the engine is busy: no iteration's end is pending"
            if kind == "arrive":
                self._waiting.append(rid)
            woke |= kind == "wake"
        self._admit(time_s)
        if woke:  # a host tier's copy is done: the stretch stops here, so the next iteration may schedule that prompt
            return time_s
        return self._events[0][0] if self._events else math.inf

    def _finish_iteration(self) -> None:
        self._open = None
        decode, chunks = self._batch
        now = self.clock_s
        for r, n in chunks.items():
            req = self._requests[r]
            req.prefilled += n
            if req.prefilled >= req.input_len:
                req.generated, req.first_token_s, req.last_token_s = 1, now, now
                if self.on_first_token is not None:
                    self.on_first_token(req)
                if self.prefix_caches:
                    k = self._rank_of[r] if self.ranks > 1 else 0
                    free = self._rank_kv_free[k] if self.ranks > 1 else self._kv_tokens_free
                    publish_prefix(self.prefix_caches[k], req, self.prefix_len, free)
                self._maybe_done(req)
        spec = self.d.spec
        drawn = draw_tokens(self.rng, spec.acceptance, len(decode)) if spec is not None and decode else None
        for i, r in enumerate(decode):
            req = self._requests[r]
            # speculative decoding: 1 + the accepted drafts, capped at the tokens left, the iteration's gap split
            n = req.emit_tokens(now, 1 if drawn is None else int(drawn[i]))
            self.spec_steps += 1
            self.spec_tokens += n
            self._maybe_done(req)
        self._busy = False

    def _maybe_done(self, req: SimRequest) -> None:
        if req.generated < req.output_len:
            return
        self._running.remove(req.rid)
        self.finished += 1
        if self.ranks > 1:
            k = self._rank_of.pop(req.rid)
            self._rank_reqs[k].remove(req.rid)
            back = release_tokens(self.prefix_caches[k] if self.prefix_caches else None, req)
            self._kv_tokens_free += back
            self._rank_kv_free[k] += back
            if req.session >= 0:  # the turn's prompt and output stay cached as its session's history
                keep_history(self.prefix_caches[k], req, self._rank_kv_free[k])
        else:
            self._kv_tokens_free += release_tokens(self.prefix_caches[0] if self.prefix_caches else None, req)
            if req.session >= 0:
                keep_history(self.prefix_caches[0], req, self._kv_tokens_free)
        if self.on_done is not None:
            self.on_done(req)
        if self.on_finish is not None:
            self.on_finish(req)
        elif self.sim.concurrency is not None:
            self._new_request(self.clock_s)

    def _result(self) -> SimResult:
        return summarise(self._requests, self.sim, self.iterations)


def new_request(rng: np.random.Generator, cfg: ServeConfig, sim: SimConfig, rid: int, at_s: float) -> SimRequest:
    """Request ``rid`` arriving at ``at_s``: its input length, then (unless ``sim.output_lengths`` gives it) its
    output length drawn from ``rng`` (:func:`draw_length`); ``cfg.prefix_hit_rate`` of its prompt already computed."""
    isl = draw_length(rng, cfg.input_len, sim.length_spread)
    # a prefix-cache hit needs no prefill: those tokens start as already computed context (vLLM's automatic
    # prefix caching; the same floor as the analytic model's ``prefill_ctx``)
    cached = math.floor(cfg.prefix_hit_rate * isl)
    given = sim.output_lengths
    osl = draw_length(rng, cfg.output_len, sim.length_spread) if given is None else given[rid]
    return SimRequest(rid, at_s, isl, osl, prefilled=cached)


def simulate(d: Deployment, cfg: ServeConfig, sim: SimConfig) -> SimResult:
    """Run one simulation (a fresh instance: nothing carries over between runs)."""
    return BatchingSim(d, cfg, sim).run()
