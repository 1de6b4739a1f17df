"""A discrete-event simulation of a disaggregated deployment: ``P`` prefill replicas, ``D`` decode replicas, the KV
cache moved between them.

Requests arrive as a Poisson process (``SimConfig.request_rate_per_s``, for the whole deployment) into one prefill
queue that idle prefill replicas pull from, first come first served (Dynamo's global prefill queue, which prefill
workers pull from; DistServe, Zhong et al. 2024, sec. 4.4, lets prefill instances buffer the load). A prefill
replica runs prefill-only iterations: it continues its prompts in progress and takes new prompts while the
iteration's token budget (``max_num_tokens``, chunking a prompt that does not fit) lasts, priced by
:func:`fmstack.perfmodel.inference_step.step_time` with no decode tokens, as the colocated simulation
(:mod:`fmstack.perfmodel.inference_sim`) prices its prompt tokens. A finished prompt reserves a slot on the decode
replica with the most free slots (``max_concurrency``: the KV pool of full-length sequences and ``max_batch``;
among replicas with equally many free slots, the one its KV reaches fastest, i.e. one in the prefill replica's
NVLink domain: a KV-locality tie-break a router can apply, then the lowest index) or, with every slot taken, waits
for a completion (DistServe's pull: the decode instance fetches the KV cache when it has room). Then its KV cache
moves, in ``kv_transfer_s[p][r]`` for prefill replica ``p`` and decode replica ``r`` (one figure for every pair,
or the matrix of :func:`fmstack.perfmodel.inference_disagg_place.kv_pair_times`: NVLink for a pair in one NVLink
domain, else the scale-out fabric): a prefill replica's transfers go one after another, each at the link's full rate (every GPU sends its TP shard over its own link share; two at once
would share it, and first-come-first-served finishes the first earlier and the last at the same time). A decode
replica runs decode-only iterations with continuous batching; an arrived KV cache joins at the next iteration.

TTFT convention: arrival to the first token the decode replica produces (prefill + queueing + KV transfer + the
first decode iteration), as a client of vLLM's disaggregated-prefill proxy sees it (the prefill instance runs the
prompt with ``max_tokens=1``, the decode instance streams every token) and as the mean-field model
(:func:`fmstack.perfmodel.inference_disagg.compare_disaggregation`) counts it; DistServe's TTFT ends at the
prefill, earlier by the transfer and one iteration. ITL: the gaps between a request's decode-replica tokens.
Heterogeneous pools (``decode``: another TP / PP of the same instance and precision, DistServe sec. 4's per-phase
parallelism): prefill iterations are priced on ``d``, decode iterations and the slots on ``decode``; the caller
prices the KV transfer between the two layouts (:func:`fmstack.perfmodel.inference_disagg.kv_transfer_s` with
``decode_tp``). Attention DP in either pool (``cfg.attention_dp`` / ``decode_cfg.attention_dp``): the ranks'
requests, budgets, slots and KV links, :class:`fmstack.perfmodel.inference_sim_disagg_adp.AdpDisaggSim`, which
:func:`simulate_disagg` runs for such pools. With a shared-prefix workload (``sim.prefix``) each prefill replica keeps a prefix cache in its KV pool, routed by
``sim.router`` (:mod:`fmstack.perfmodel.inference_sim_disagg_prefix`). Not modelled: the prefill replica's KV memory
beyond its prefix cache (prompts are never refused for it), contention on the receiving side, the decode replicas'
prefix caches. Speculative decoding (:mod:`fmstack.perfmodel.inference_disagg_spec`): decode iterations verify and
draft, each sequence's tokens drawn from the run's generator as colocated; prefill iterations add the draft's pass
over the prompt. Every piece of mutable state is on the instance; the same seed gives the same result.
"""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING

import numpy as np

from fmstack.errors import InputError
from fmstack.perfmodel.inference import ServeConfig, max_concurrency
from fmstack.perfmodel.inference_disagg_spec import draw, emit_step, prefill_deployment
from fmstack.perfmodel.inference_kv_pairs import KvTimes, kv_matrix
from fmstack.perfmodel.inference_sim_disagg_chunks import PrefillChunks
from fmstack.perfmodel.inference_sim_disagg_stats import PoolStats as PoolStats  # re-exported: moved there
from fmstack.perfmodel.inference_sim_disagg_stats import pool_stats as pool_stats  # re-exported: moved there
from fmstack.perfmodel.inference_sim_io import SimConfig, SimRequest, SimResult, summarise
from fmstack.perfmodel.inference_sim_prefix import delay_first_chunk
from fmstack.perfmodel.inference_step import Deployment, kept_s, step_time

if TYPE_CHECKING:
    from fmstack.perfmodel.inference_sim_disagg_prefix import PrefillPrefix


class DisaggSim(PrefillChunks):
    """``prefill_replicas`` replicas of ``d`` + ``decode_replicas`` replicas of ``decode`` (default ``d``) under
    Poisson load; ``decode_cfg`` is ``cfg`` with the decode pool's layout (default ``cfg``)."""

    def __init__(
        self,
        d: Deployment,
        cfg: ServeConfig,
        sim: SimConfig,
        *,
        prefill_replicas: int,
        decode_replicas: int,
        kv_transfer_s: KvTimes,
        decode: Deployment | None = None,
        decode_cfg: ServeConfig | None = None,
        skip_ahead: bool = True,
    ) -> None:
        if sim.request_rate_per_s is None:
            raise InputError("load", "the disaggregated simulation takes an open-loop request rate")
        if prefill_replicas < 1 or decode_replicas < 1:
            raise InputError(
                "disagg", f"needs at least one prefill and one decode replica, got {prefill_replicas}:{decode_replicas}"
            )
        self.kv_pair_s = kv_matrix(kv_transfer_s, prefill_replicas, decode_replicas)
        """Seconds to move one prompt's KV cache from prefill replica ``p`` to decode replica ``r``."""
        self._kv_uniform = len(self.kv_pair_s.values()) == 1
        self.dd = d if decode is None else decode
        if type(self) is DisaggSim and (d.attention_dp or self.dd.attention_dp):
            raise InputError("attention-dp", "attention-DP pools have ranks: use simulate_disagg or AdpDisaggSim")
        cap = max_concurrency(self.dd, cfg if decode_cfg is None else decode_cfg)
        if cap < 1:
            raise InputError("disagg", f"one {cfg.input_len + cfg.output_len}-token sequence does not fit a replica")
        self.d, self.cfg, self.sim = prefill_deployment(d), cfg, sim  # a prefill replica: the draft's prompt pass
        self.kv_moved: dict[int, float] = {}
        """Per request: the seconds its KV transfer took on the link (without waiting for the sender's link)."""
        self.rng = np.random.default_rng(sim.seed)
        self.clock_s = 0.0
        self._events: list[tuple[float, int, str, int]] = []
        self._counter = 0
        self._requests: list[SimRequest] = []
        self._prefill_queue: list[int] = []
        self._prefill_work: list[list[int]] = [[] for _ in range(prefill_replicas)]
        """Prompts a prefill replica has started and not finished, in order."""
        self._prefill_batch: list[dict[int, int]] = [{} for _ in range(prefill_replicas)]
        self._prefill_busy = [False] * prefill_replicas
        self._prefill_of: dict[int, int] = {}
        self._link_free_s = [0.0] * prefill_replicas
        self._decode_queue: list[int] = []
        """Prefilled requests waiting for a decode slot (FIFO)."""
        self._free_slots = [cap] * decode_replicas
        self._decode_of: dict[int, int] = {}
        self._arrived: list[list[int]] = [[] for _ in range(decode_replicas)]
        self._running: list[list[int]] = [[] for _ in range(decode_replicas)]
        self._decode_busy = [False] * decode_replicas
        self._ctx_sum = [0] * decode_replicas
        """Per decode replica: the running sequences' contexts (input + generated tokens) summed."""
        self._step_cache: list[tuple[int, int, np.ndarray[tuple[int], np.dtype[np.float64]]] | None] = [
            None
        ] * decode_replicas
        self._spec_step_s: dict[tuple[int, int], float] = {}
        """A speculating decode pool's iteration seconds by batch and context sum (:meth:`_decode_step_s`): its
        draws end every stretch, so the same loads come back one iteration at a time."""
        self._skip_ahead = skip_ahead
        """Price a prefill replica's run of full-budget chunks of one prompt with one vectorised ``step_time`` call
        (:meth:`_prefill_step_s`); False: one call per iteration (the same results, slower; for tests and
        benchmarks)."""
        self._chunk_cache: list[tuple[int, int, int, np.ndarray[tuple[int], np.dtype[np.float64]]] | None] = [
            None
        ] * prefill_replicas
        self.iterations = 0
        self.slot_wait_s: list[float] = []
        """Per request (in completion order of its prefill): time from the prefill's end to a decode slot."""
        self._prefilled_at: dict[int, float] = {}
        self._slot_wait_by_rid: dict[int, float] = {}
        self.prefill_wait_s: dict[int, float] = {}
        """Per request: arrival to the moment a prefill replica takes it from the queue."""
        self._cap = cap
        self._prefill_log: list[tuple[float, float]] = []
        """(start, seconds) of every prefill iteration."""
        self._decode_log: list[tuple[float, float, int, int]] = []
        """(start, seconds, sequences running, slots reserved: running + KV arriving + waiting to join) of every
        decode iteration."""
        self.prefix: PrefillPrefix | None = None
        """A shared-prefix workload (``sim.prefix``): the prefill replicas' prefix caches and router
        (:mod:`fmstack.perfmodel.inference_sim_disagg_prefix`); None: none."""
        if sim.prefix is not None:
            from fmstack.perfmodel.inference_sim_disagg_prefix import PrefillPrefix

            self.prefix = PrefillPrefix(self.d, cfg, sim, prefill_replicas)

    def _push(self, time_s: float, kind: str, idx: int) -> None:
        heapq.heappush(self._events, (time_s, self._counter, kind, idx))
        self._counter += 1

    def _length(self, mean: int) -> int:
        s = self.sim.length_spread
        return mean if s == 0 else max(1, round(mean * self.rng.uniform(1 - s, 1 + s)))

    def run(self) -> SimResult:
        rate = self.sim.request_rate_per_s or 1.0
        pre = self.prefix
        groups = pre.groups(self.sim.num_requests) if pre is not None else None
        for t in np.cumsum(self.rng.exponential(1.0 / rate, self.sim.num_requests)):
            rid = len(self._requests)
            isl = self._length(self.cfg.input_len)
            cached = math.floor(self.cfg.prefix_hit_rate * isl)
            self._requests.append(SimRequest(rid, float(t), isl, self._length(self.cfg.output_len), prefilled=cached))
            if groups is not None:
                self._requests[rid].group = groups[rid]
            self._push(float(t), "arrive", rid)
        while self._events:
            time_s, _, kind, idx = heapq.heappop(self._events)
            self.clock_s = time_s
            if kind == "arrive":
                if pre is not None and pre.routed:  # the router picks the prefill replica, which serves its queue
                    p = pre.route(self._requests[idx])
                    pre.queues[p].append(idx)
                    if not self._prefill_busy[p]:
                        self._start_prefill(p)
                else:
                    self._prefill_queue.append(idx)
                    self._start_prefills()
            elif kind == "prefill":
                self._finish_prefill(idx)
            elif kind == "kv":
                self._kv_done(idx)
            elif kind == "wake":
                self._wake(idx)
            else:
                self._finish_decode(idx)
        return summarise(self._requests, self.sim, self.iterations)

    def _wake(self, p: int) -> None:
        """A host-tier copy on prefill replica ``p`` has finished: its prompt can get its first chunk."""
        if not self._prefill_busy[p]:
            self._start_prefill(p)

    def _kv_done(self, idx: int) -> None:
        """Request ``idx``'s KV reached its decode replica: off the prefill cache's books, into the decode queue."""
        if self.prefix is not None:
            self.prefix.moved(self._requests[idx])
        r = self._decode_of[idx]
        self._arrived[r].append(idx)
        if not self._decode_busy[r]:
            self._start_decode(r)

    def _start_prefills(self) -> None:
        for p, busy in enumerate(self._prefill_busy):
            if not busy:
                self._start_prefill(p)

    def _start_prefill(self, p: int) -> None:
        budget = self.cfg.max_num_tokens
        work = self._prefill_work[p]
        pre = self.prefix
        queue = pre.queues[p] if pre is not None and pre.routed else self._prefill_queue
        chunks: dict[int, int] = {}
        i = 0
        while budget > 0:
            if i == len(work):
                if not queue:
                    break
                rid = queue.pop(0)
                self.prefill_wait_s[rid] = self.clock_s - self._requests[rid].arrival_s
                work.append(rid)
                self._prefill_of[rid] = p
                if pre is not None:  # the prefix looked up as the prompt gets its first chunk
                    pre.take(p, self._requests[rid])
                    if delay_first_chunk(self._requests[rid], self.clock_s):  # a host-tier hit: its copy first
                        self._push(self._requests[rid].ready_s, "wake", p)
            req = self._requests[work[i]]
            i += 1
            if req.ready_s > self.clock_s:  # its cached KV is still being copied from the host tier
                continue
            take = min(req.input_len - req.prefilled, budget)
            chunks[req.rid] = take
            budget -= take
        if not chunks:
            return
        t = self._prefill_step_s(p, chunks)
        self._prefill_batch[p] = chunks
        self._prefill_busy[p] = True
        self.iterations += 1
        self._prefill_log.append((self.clock_s, t))
        self._push(self.clock_s + t, "prefill", p)

    def _finish_prefill(self, p: int) -> None:
        for r, n in self._prefill_batch[p].items():
            req = self._requests[r]
            req.prefilled += n
            if req.prefilled >= req.input_len:
                if self.prefix is not None:
                    self.prefix.computed(p, req)
                self._drop_work(p, r)
                self._prefilled_at[r] = self.clock_s
                self._decode_queue.append(r)
        self._prefill_batch[p] = {}
        self._prefill_busy[p] = False
        self._place()
        self._start_prefill(p)

    def _drop_work(self, p: int, r: int) -> None:
        """Request ``r``'s prompt is done on prefill replica ``p``: off its list of prompts in progress."""
        self._prefill_work[p].remove(r)

    def _place(self) -> None:
        """Give waiting prefilled requests decode slots (most free slots first) and start their KV transfers."""
        while self._decode_queue:
            p = self._prefill_of[self._decode_queue[0]]
            r = self._pick(self._free_slots, p, 1)
            if self._free_slots[r] <= 0:
                return
            rid = self._decode_queue.pop(0)
            self._free_slots[r] -= 1
            self._decode_of[rid] = r
            self.slot_wait_s.append(self.clock_s - self._prefilled_at.pop(rid))
            self._slot_wait_by_rid[rid] = self.slot_wait_s[-1]
            del self._prefill_of[rid]
            kv_s = self.kv_moved[rid] = self._kv_s(p, r, rid)
            end = max(self.clock_s, self._link_free_s[p]) + kv_s
            self._link_free_s[p] = end
            self._push(end, "kv", rid)

    def _kv_s(self, p: int, r: int, rid: int) -> float:
        """Seconds request ``rid``'s KV takes from prefill replica ``p`` to decode replica ``r``."""
        return self.kv_pair_s.at(p, r)

    def _pick(self, free: list[int], p: int, per: int) -> int:
        """Of ``free`` (slots per decode unit, ``per`` units to a decode replica), the unit with the most free
        slots; among equals the one prefill replica ``p``'s KV reaches fastest (its NVLink domain), then the
        lowest."""
        most = max(free)
        if self._kv_uniform:
            return free.index(most)
        kv = self.kv_pair_s
        return min((u for u, f in enumerate(free) if f == most), key=lambda u: kv.at(p, u // per))

    def _start_decode(self, r: int) -> None:
        for q in self._arrived[r]:
            self._ctx_sum[r] += self._requests[q].input_len + self._requests[q].generated
        self._running[r] += self._arrived[r]
        self._arrived[r] = []
        n = len(self._running[r])
        if n == 0:
            self._decode_busy[r] = False
            return
        self._decode_busy[r] = True
        self.iterations += 1
        t = self._decode_step_s(r, n)
        self._decode_log.append((self.clock_s, t, n, self._cap - self._free_slots[r]))
        self._push(self.clock_s + t, "decode", r)

    def _decode_step_s(self, r: int, n: int) -> float:
        """The decode-only iteration of ``n`` sequences at their mean context (exact sum / n, as ``np.mean`` of the
        integers). The times of the next iterations with the same batch (each one token of context more per
        sequence, up to the first completion) come from one vectorised ``step_time`` call and are kept until the
        batch changes: elementwise the same floating-point operations as one call each. A speculating pool's
        iterations are drawn one by one: each load's time is kept (the same call, the same float)."""
        total = self._ctx_sum[r]
        if self.dd.spec is not None:
            one = np.arange(1, dtype=np.int64)  # the vectorised call's first element, as the batch's below
            return kept_s(self._spec_step_s, (n, total),
                          lambda: float(step_time(self.dd, float(n), (total + one * n) / n).total_s[0]))  # fmt: skip
        cached = self._step_cache[r]
        if cached is not None and cached[0] == n:
            k, rest = divmod(total - cached[1], n)
            if rest == 0 and 0 <= k < len(cached[2]):
                return float(cached[2][k])
        left = min(self._requests[q].output_len - self._requests[q].generated for q in self._running[r])
        ks = np.arange(min(left, 512), dtype=np.int64)
        times = np.broadcast_to(step_time(self.dd, float(n), (total + ks * n) / n).total_s, ks.shape)
        self._step_cache[r] = (n, total, times)
        return float(times[0])

    def _finish_decode(self, r: int) -> None:
        now = self.clock_s
        still: list[int] = []
        drawn = draw(self.rng, self.dd, len(self._running[r]))
        for i, q in enumerate(self._running[r]):
            req = self._requests[q]
            n = emit_step(req, now, drawn, i)  # tokens emitted (speculation: drawn)
            if req.generated < req.output_len:
                still.append(q)
                self._ctx_sum[r] += n
            else:
                self._free_slots[r] += 1
                self._ctx_sum[r] -= req.input_len + req.generated - n
        freed = len(still) < len(self._running[r])
        self._running[r] = still
        if freed:
            self._place()
        self._start_decode(r)


def simulate_disagg_stats(
    d: Deployment, cfg: ServeConfig, sim: SimConfig, *, prefill_replicas: int, decode_replicas: int,
    kv_transfer_s: KvTimes, decode: Deployment | None = None, decode_cfg: ServeConfig | None = None,
) -> tuple[SimResult, PoolStats]:  # fmt: skip
    """:func:`simulate_disagg` and the pools' utilisation over the measured requests' arrivals."""
    s = _make(d, cfg, sim, prefill_replicas=prefill_replicas, decode_replicas=decode_replicas,
              kv_transfer_s=kv_transfer_s, decode=decode, decode_cfg=decode_cfg)  # fmt: skip
    return s.run(), pool_stats(s)


def simulate_disagg(
    d: Deployment, cfg: ServeConfig, sim: SimConfig, *, prefill_replicas: int, decode_replicas: int,
    kv_transfer_s: KvTimes, decode: Deployment | None = None, decode_cfg: ServeConfig | None = None,
) -> SimResult:  # fmt: skip
    """Run one simulation of the split deployment (a fresh instance: nothing carries over between runs)."""
    return _make(d, cfg, sim, prefill_replicas=prefill_replicas, decode_replicas=decode_replicas,
                 kv_transfer_s=kv_transfer_s, decode=decode, decode_cfg=decode_cfg).run()  # fmt: skip


def _make(
    d: Deployment, cfg: ServeConfig, sim: SimConfig, *, prefill_replicas: int, decode_replicas: int,
    kv_transfer_s: KvTimes, decode: Deployment | None, decode_cfg: ServeConfig | None,
) -> DisaggSim:  # fmt: skip
    """The simulation of the pools: :class:`DisaggSim`, or with attention DP in either pool its subclass with ranks."""
    kind = DisaggSim
    if d.attention_dp or (d if decode is None else decode).attention_dp:
        from fmstack.perfmodel.inference_sim_disagg_adp import AdpDisaggSim

        kind = AdpDisaggSim
    return kind(d, cfg, sim, prefill_replicas=prefill_replicas, decode_replicas=decode_replicas,
                kv_transfer_s=kv_transfer_s, decode=decode, decode_cfg=decode_cfg)  # fmt: skip
