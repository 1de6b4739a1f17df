"""The disaggregated simulation with attention data parallelism in the prefill pool, the decode pool or both
(TensorRT-LLM ``enable_attention_dp``, SGLang ``--enable-dp-attention``; the DeepSeek-V3 / R1 deployments with
prefill/decode disaggregation and wide expert parallelism, e.g. LMSYS, "Deploying DeepSeek with PD Disaggregation and
Large-scale Expert Parallelism on 96 H100 GPUs", 2025-05, run it in both pools).

Under attention DP each of a replica's ``tp`` ranks holds its own requests and their KV cache, the experts span the
ranks (ep = tp), and an iteration ends at the MoE exchange, a barrier, so it takes the busiest rank's time
(:func:`fmstack.perfmodel.inference_step.step_time` with ``busiest``, as :mod:`fmstack.perfmodel.inference_sim`
prices a colocated attention-DP replica).

- Prefill replica: each rank has its own prompt-token budget (``max_num_tokens`` per rank, as TensorRT-LLM's
  per-rank scheduler and the colocated simulation's attention-DP path). An idle replica starts an iteration: every
  rank continues its prompts in progress, then new prompts leave the global FCFS queue one by one, each to the rank
  with the most budget left (ties: the lowest rank; a prompt larger than that budget is chunked and continues on
  that rank, where its KV cache is). The iteration is priced once for the replica with the ranks' loads.
- Decode replica: ``max_concurrency // tp`` slots per rank (the replica's KV pool of full-length sequences and
  ``max_batch`` shared equally, as the colocated simulation's ``_rank_kv_free`` and ``_assign_ranks``); a prefilled
  request takes a slot on the (replica, rank) with the most free slots (ties: a replica in the prefill replica's
  NVLink domain, i.e. the fastest KV pair, then the lowest replica, then rank), so each placement lands on a rank holding at most ``ceil(reserved / ranks)`` slots of all the pool's ranks (tested);
  decode-only iterations priced with the ranks' loads.
- KV transfer: a prompt's cache lives on one rank (``kv_split(1)``, priced by the caller with
  :func:`fmstack.perfmodel.inference_disagg.kv_move`, per pair by placement:
  :func:`fmstack.perfmodel.inference_disagg_place.kv_pair_times`); each prefill GPU sends its own prompts' caches one after
  another on its own link (a non-attention-DP prefill replica sends all its GPUs' shards at once: one link).

Speculative decoding: as :class:`fmstack.perfmodel.inference_sim_disagg.DisaggSim`, the decode replica's sequences
drawn rank by rank in one draw per iteration, the prefill ranks' iterations with the draft's pass over their prompts.

A pool without attention DP behaves as in :class:`fmstack.perfmodel.inference_sim_disagg.DisaggSim` (one rank).
"""

from __future__ import annotations

import numpy as np

from fmstack.errors import InputError
from fmstack.perfmodel.inference import ServeConfig
from fmstack.perfmodel.inference_disagg_spec import draw, emit_step
from fmstack.perfmodel.inference_kv_pairs import KvTimes
from fmstack.perfmodel.inference_sim_disagg import DisaggSim
from fmstack.perfmodel.inference_sim_io import SimConfig
from fmstack.perfmodel.inference_step import Deployment, RankLoad, kept_s, step_time

F = np.ndarray[tuple[int], np.dtype[np.float64]]


class AdpDisaggSim(DisaggSim):
    """:class:`DisaggSim` whose prefill and / or decode replicas run attention DP over their ``tp`` ranks."""

    def __init__(
        self, d: Deployment, cfg: ServeConfig, sim: SimConfig, *, prefill_replicas: int, decode_replicas: int,
        kv_transfer_s: KvTimes, decode: Deployment | None = None, decode_cfg: ServeConfig | None = None,
        skip_ahead: bool = True,
    ) -> None:  # fmt: skip
        super().__init__(d, cfg, sim, prefill_replicas=prefill_replicas, decode_replicas=decode_replicas,
                         kv_transfer_s=kv_transfer_s, decode=decode, decode_cfg=decode_cfg,
                         skip_ahead=skip_ahead)  # fmt: skip
        self.prefill_ranks = d.tp if d.attention_dp else 1
        self.decode_ranks = self.dd.tp if self.dd.attention_dp else 1
        per_rank = self._cap // self.decode_ranks
        if per_rank < 1:
            raise InputError(
                "attention-dp", f"a decode replica holds {self._cap} sequences of {cfg.input_len + cfg.output_len} "
                f"tokens, fewer than one per each of its {self.decode_ranks} ranks; use fewer ranks or more memory",
            )  # fmt: skip
        self.rank_slots = per_rank
        """Slots of one decode rank."""
        self._cap = per_rank * self.decode_ranks
        self._free_slots = [self._cap] * decode_replicas
        self._unit_free = [per_rank] * (decode_replicas * self.decode_ranks)
        """Free slots per (decode replica, rank), replica-major."""
        self._rank_of: dict[int, int] = {}
        self._rank_run: list[list[list[int]]] = [[[] for _ in range(self.decode_ranks)] for _ in range(decode_replicas)]
        self._rank_ctx: list[list[int]] = [[0] * self.decode_ranks for _ in range(decode_replicas)]
        self._adp_cache: list[tuple[tuple[int, ...], tuple[int, ...], F] | None] = [None] * decode_replicas
        self._spec_rank_step_s: dict[tuple[tuple[int, ...], tuple[int, ...]], float] = {}
        """A speculating decode pool's iteration seconds by its ranks' counts and context sums (drawn one by one:
        the same loads come back; the same call, the same float)."""
        self._rank_work: list[list[list[int]]] = [
            [[] for _ in range(self.prefill_ranks)] for _ in range(prefill_replicas)
        ]
        self._prefill_rank: dict[int, int] = {}
        self._link_free_s = [0.0] * (prefill_replicas * self.prefill_ranks)
        """One link per prefill rank (its GPU's): with one rank, the replica's."""
        self.placements: list[tuple[int, int]] = []
        """Per placement: (slots the chosen rank then holds, slots all decode ranks then hold)."""

    # prefill -------------------------------------------------------------------------------------------------------

    def _start_prefill(self, p: int) -> None:
        if self.prefill_ranks == 1:
            super()._start_prefill(p)
            return
        n_ranks = self.prefill_ranks
        budgets = [self.cfg.max_num_tokens] * n_ranks
        rank_chunks: list[dict[int, int]] = [{} for _ in range(n_ranks)]
        for k, work in enumerate(self._rank_work[p]):
            for rid in work:
                if budgets[k] <= 0:
                    break
                take = min(self._requests[rid].input_len - self._requests[rid].prefilled, budgets[k])
                rank_chunks[k][rid] = take
                budgets[k] -= take
        while self._prefill_queue:
            k = int(np.argmax(budgets))
            if budgets[k] <= 0:
                break
            rid = self._prefill_queue.pop(0)
            req = self._requests[rid]
            self.prefill_wait_s[rid] = self.clock_s - req.arrival_s
            self._rank_work[p][k].append(rid)
            self._prefill_of[rid] = p
            self._prefill_rank[rid] = k
            take = min(req.input_len - req.prefilled, budgets[k])
            rank_chunks[k][rid] = take
            budgets[k] -= take
        if not any(rank_chunks):
            return
        loads = np.zeros((3, n_ranks))
        for k, chunks in enumerate(rank_chunks):
            for r, n in chunks.items():
                req = self._requests[r]
                loads[:, k] += (
                    n,
                    n * req.prefilled + n * (n + 1) / 2,
                    1.0 if req.prefilled + n >= req.input_len else 0.0,
                )
        zeros = np.zeros(n_ranks)
        busy = RankLoad(decode_seqs=zeros, decode_ctx=zeros, prefill_tokens=loads[0], prefill_token_ctx=loads[1],
                        prefill_seqs=loads[2])  # fmt: skip
        tot = loads.sum(axis=1)
        per_rank = step_time(self.d, 0.0, 0.0, float(tot[0]), float(tot[1]), float(tot[2]), busiest=busy).total_s
        t = float(np.max(per_rank))
        self._prefill_batch[p] = {r: n for chunks in rank_chunks for r, n in chunks.items()}
        self._prefill_busy[p] = True
        self.iterations += 1
        self._prefill_log.append((self.clock_s, t))
        self._push(self.clock_s + t, "prefill", p)

    def _drop_work(self, p: int, r: int) -> None:
        if self.prefill_ranks == 1:
            super()._drop_work(p, r)
        else:  # the prompt ran on one rank of replica p
            self._rank_work[p][self._prefill_rank[r]].remove(r)

    # placement and KV transfer -------------------------------------------------------------------------------------

    def _place(self) -> None:
        """Give waiting prefilled requests the (replica, rank) with the most free slots (among equals: the one
        the KV reaches fastest, then the lowest) and start their KV transfers, each on its prefill rank's link."""
        while self._decode_queue:
            u = self._pick(self._unit_free, self._prefill_of[self._decode_queue[0]], self.decode_ranks)
            if self._unit_free[u] <= 0:
                return
            rid = self._decode_queue.pop(0)
            self._unit_free[u] -= 1
            r, k = divmod(u, self.decode_ranks)
            self._free_slots[r] -= 1
            self._decode_of[rid], self._rank_of[rid] = r, k
            reserved = len(self._unit_free) * self.rank_slots - sum(self._unit_free)
            self.placements.append((self.rank_slots - self._unit_free[u], reserved))
            self.slot_wait_s.append(self.clock_s - self._prefilled_at.pop(rid))
            self._slot_wait_by_rid[rid] = self.slot_wait_s[-1]
            p = self._prefill_of.pop(rid)
            link = p * self.prefill_ranks + self._prefill_rank.pop(rid, 0)
            kv_s = self.kv_moved[rid] = self.kv_pair_s.at(p, r)
            end = max(self.clock_s, self._link_free_s[link]) + kv_s
            self._link_free_s[link] = end
            self._push(end, "kv", rid)

    # decode --------------------------------------------------------------------------------------------------------

    def _start_decode(self, r: int) -> None:
        for q in self._arrived[r]:
            k = self._rank_of[q]
            self._rank_ctx[r][k] += self._requests[q].input_len + self._requests[q].generated
            self._rank_run[r][k].append(q)
        self._arrived[r] = []
        counts = tuple(len(run) for run in self._rank_run[r])
        if not any(counts):
            self._decode_busy[r] = False
            return
        self._decode_busy[r] = True
        self.iterations += 1
        t = self._rank_step_s(r, counts)
        self._decode_log.append((self.clock_s, t, sum(counts), self._cap - self._free_slots[r]))
        self._push(self.clock_s + t, "decode", r)

    def _rank_step_s(self, r: int, counts: tuple[int, ...]) -> float:
        """The decode-only iteration of replica ``r``: each rank's sequences at their mean context (exact sum /
        count), the busiest rank's time. As :meth:`DisaggSim._decode_step_s`, the next iterations with the same
        counts (each rank's context one token more per sequence) come from one vectorised call and are kept: the
        time depends only on the counts and the context sums, so a cached row serves whenever the sums are the
        cached ones plus ``j`` tokens per sequence."""
        sums = tuple(self._rank_ctx[r])
        if self.dd.spec is not None:
            return kept_s(self._spec_rank_step_s, (counts, sums), lambda: float(self._rank_times(r, counts, sums)[0]))
        cached = self._adp_cache[r]
        if cached is not None and cached[0] == counts:
            k0 = next(k for k, c in enumerate(counts) if c)
            j, rest = divmod(sums[k0] - cached[1][k0], counts[k0])
            if (
                rest == 0
                and 0 <= j < len(cached[2])
                and all(s - b == j * c for s, b, c in zip(sums, cached[1], counts, strict=True))
            ):
                return float(cached[2][j])
        times = self._rank_times(r, counts, sums)
        self._adp_cache[r] = (counts, sums, times)
        return float(times[0])

    def _rank_times(self, r: int, counts: tuple[int, ...], sums: tuple[int, ...]) -> F:
        """The times of replica ``r``'s next decode-only iterations with these counts, from these context sums (one,
        when the pool speculates: its tokens are drawn)."""
        left = min(self._requests[q].output_len - self._requests[q].generated for run in self._rank_run[r] for q in run)
        ks = np.arange(1 if self.dd.spec is not None else min(left, 512), dtype=np.int64)  # drawn: no stretch
        n = np.array(counts, dtype=np.float64)
        count = np.maximum(np.array(counts, dtype=np.int64), 1)
        ctx = np.where(n > 0, (np.array(sums, dtype=np.int64) + ks[:, None] * count) / count, 0.0)
        b_all = float(n.sum())
        ctx_all = (n * ctx).sum(axis=1) / b_all
        zeros = np.zeros(len(counts))
        busy = RankLoad(decode_seqs=n, decode_ctx=ctx, prefill_tokens=zeros, prefill_token_ctx=zeros,
                        prefill_seqs=zeros)  # fmt: skip
        per_rank = step_time(self.dd, b_all, ctx_all[:, None], 0.0, 0.0, 0.0, busiest=busy).total_s
        times: F = np.broadcast_to(per_rank, ctx.shape).max(axis=1)
        return times

    def _finish_decode(self, r: int) -> None:
        now = self.clock_s
        freed = False
        drawn = draw(self.rng, self.dd, sum(len(run) for run in self._rank_run[r]))
        i = 0
        for k, run in enumerate(self._rank_run[r]):
            still: list[int] = []
            for q in run:
                req = self._requests[q]
                n = emit_step(req, now, drawn, i)  # tokens emitted (speculation: drawn)
                i += 1
                if req.generated < req.output_len:
                    still.append(q)
                    self._rank_ctx[r][k] += n
                else:
                    freed = True
                    self._free_slots[r] += 1
                    self._unit_free[r * self.decode_ranks + k] += 1
                    self._rank_ctx[r][k] -= req.input_len + req.generated - n
                    del self._rank_of[q]
            self._rank_run[r][k] = still
        if freed:
            self._place()
        self._start_decode(r)
