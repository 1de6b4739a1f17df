"""Attention-DP scheduling for the batching simulation (:class:`fmstack.perfmodel.inference_sim.BatchingSim`): each
request lives on one of the ``tp`` ranks, assigned as TensorRT-LLM's PyTorch executor does
(``_balance_requests_across_ranks``), each rank schedules its own sequences within its own token budget and KV pool,
and the iteration takes the busiest rank's time (the module docstring of :mod:`fmstack.perfmodel.inference_sim`).
"""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np

from fmstack.perfmodel.inference import ServeConfig, max_concurrency
from fmstack.perfmodel.inference_prefix import PrefixCache
from fmstack.perfmodel.inference_sim_io import SimConfig
from fmstack.perfmodel.inference_sim_prefix import admission_need, admit_prefix
from fmstack.perfmodel.inference_sim_stretch import Stretches
from fmstack.perfmodel.inference_step import RankLoad, kept_s, step_time


class AttentionDP(Stretches):
    """The attention-DP half of :class:`fmstack.perfmodel.inference_sim.BatchingSim`, which sets the state below."""

    cfg: ServeConfig
    sim: SimConfig
    _skip_ahead: bool
    _waiting: list[int]
    _running: list[int]
    _rank_of: dict[int, int]
    _rank_reqs: list[list[int]]
    _rank_kv_free: list[float]
    prefix_caches: list[PrefixCache]
    """Each rank's prefix cache (empty: none)."""
    prefix_len: int
    _step_s_of: dict[tuple[Any, ...], float]
    """Iteration seconds by load: each rank's (attention DP) or the replica's (``BatchingSim._run_step``)."""

    def _iteration_load(self, decode: list[int], chunks: dict[int, int]) -> tuple[float, float, float, float, float]:
        """``step_time``'s load of one iteration (or one rank's share of it): ``decode``'s sequences at their mean
        context, and the prompt ``chunks`` (request -> tokens) with their causal context sum and the prompts they
        complete."""
        tokens = float(sum(chunks.values()))
        ctx_sum = sum(n * self._requests[r].prefilled + n * (n + 1) / 2 for r, n in chunks.items())
        done = sum(1 for r, n in chunks.items() if self._requests[r].prefilled + n >= self._requests[r].input_len)
        reqs = self._requests
        ctx = float(np.mean([reqs[r].input_len + reqs[r].generated for r in decode])) if decode else 0.0
        return float(len(decode)), ctx, tokens, float(ctx_sum), float(done)

    def _assign_ranks(self) -> None:
        """TensorRT-LLM's attention-DP assignment of the queued requests (``_schedule_attention_dp_requests``)."""
        n = self.ranks
        cap = max(1, (self.cfg.max_batch or max_concurrency(self.d, self.cfg)) // n)
        active = [len(r) for r in self._rank_reqs]
        room = n * cap - sum(active)
        new = self._waiting[: max(room, 0)]
        if not new:
            return
        del self._waiting[: len(new)]
        expected = max(-(-(sum(active) + len(new)) // n), max(active))
        tokens = [sum(self._requests[q].input_len for q in r) for r in self._rank_reqs]
        heap = [(tokens[k], active[k], k) for k in range(n) if active[k] < expected]
        heapq.heapify(heap)
        for rid in sorted(new, key=lambda q: -self._requests[q].input_len):  # longest first (stable)
            tok, cnt, k = heapq.heappop(heap)
            self._rank_of[rid] = k
            self._rank_reqs[k].append(rid)
            if cnt + 1 < expected:
                heapq.heappush(heap, (tok + self._requests[rid].input_len, cnt + 1, k))

    def _start_iteration_adp(self) -> None:
        self._assign_ranks()
        budget_all = self.cfg.max_num_tokens
        loads: list[tuple[float, float, float, float, float]] = []
        decodes: list[list[int]] = []
        chunks: dict[int, int] = {}
        cache = self.prefix_caches
        for k, reqs in enumerate(self._rank_reqs):
            decode = [
                r
                for r in reqs
                if self._requests[r].admitted and self._requests[r].prefilled >= self._requests[r].input_len
            ]
            budget = budget_all - len(decode)  # TensorRT-LLM counts decode tokens in max_num_tokens
            rank_chunks: dict[int, int] = {}
            for r in reqs:
                req = self._requests[r]
                if req.prefilled >= req.input_len or budget <= 0:
                    continue
                if not req.admitted:
                    need, skip = admission_need(cache[k] if cache else None, req, self.prefix_len)
                    if need > self._rank_kv_free[k]:
                        break
                    left = req.input_len - skip
                    if not self.sim.chunked_prefill and left > budget:
                        break  # whole prompts in arrival order
                    self._rank_kv_free[k] -= need
                    if cache:  # the rank's own prefix cache (SGLang: each DP-attention rank's scheduler has one)
                        admit_prefix(cache[k], req, self.prefix_len, first_chunk=True)
                        cache[k].fit(self._rank_kv_free[k])
                    self._running.append(r)
                    req.admitted, req.admitted_s = True, self.clock_s
                left = req.input_len - req.prefilled
                take = min(left, budget) if self.sim.chunked_prefill else (left if left <= budget else 0)
                if take > 0:
                    rank_chunks[r] = take
                    budget -= take
            loads.append(self._iteration_load(decode, rank_chunks))
            decodes.append(decode)
            chunks.update(rank_chunks)
        decode_all = [r for decode in decodes for r in decode]
        if not decode_all and not chunks:
            return
        if self._skip_ahead and not chunks:
            self._adp_stretch(decodes, decode_all)
            return
        arr = np.array(loads)

        def busiest_s() -> float:
            b_all = float(arr[:, 0].sum())
            ctx_all = float((arr[:, 0] * arr[:, 1]).sum() / b_all) if b_all else 0.0
            busy = RankLoad(decode_seqs=arr[:, 0], decode_ctx=arr[:, 1], prefill_tokens=arr[:, 2],
                            prefill_token_ctx=arr[:, 3], prefill_seqs=arr[:, 4])  # fmt: skip
            per_rank = step_time(self.d, b_all, ctx_all, float(arr[:, 2].sum()), float(arr[:, 3].sum()),
                                 float(arr[:, 4].sum()), busiest=busy).total_s  # fmt: skip
            return float(np.max(per_rank))

        t = kept_s(self._step_s_of, tuple(loads), busiest_s)
        self.prompt_ranks.append(int((arr[:, 2] > 0).sum()))
        self._batch = (decode_all, chunks)
        self._busy = True
        self.iterations += 1
        self._push(self.clock_s + t, "done")
