"""How busy a disaggregated simulation's pools were (:class:`PoolStats`, :func:`pool_stats`): the prefill replicas'
busy share and queue wait, the decode pool's batch and slots, the KV transfers and the prefix caches, over the
measured requests of a finished :class:`fmstack.perfmodel.inference_sim_disagg.DisaggSim` run (re-exported there)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from fmstack.perfmodel.inference_prefix_offload import offload_stats

if TYPE_CHECKING:
    from fmstack.perfmodel.inference_sim_disagg import DisaggSim


@dataclass(frozen=True, kw_only=True, slots=True)
class PoolStats:
    """How busy each pool was while the measured requests arrived (from the first measured arrival to the last), or,
    when those arrivals span less time than a measured request spends in the system on average (a load the
    deployment cannot take: 1e9 requests/s arrive within microseconds and take minutes), until the last measured
    completion."""

    prefill_utilisation: float
    """Busy share of the prefill replicas' time (1: every replica always in an iteration)."""
    prefill_wait_p99_s: float
    """p99 of the measured requests' waits in the prefill queue (arrival to a replica taking the prompt)."""
    decode_batch_mean: float
    """Sequences per decode iteration, time-weighted."""
    decode_slots_in_use: float
    """Decode slots reserved (running, KV in flight, waiting to join), time-weighted, per decode replica."""
    decode_slots: int
    """Slots per decode replica (``max_concurrency``)."""
    slot_wait_share: float
    """Share of the measured requests whose prefilled prompt waited for a decode slot."""
    bottleneck: str
    """"prefill" or "decode": the pool with the higher utilisation (prefill busy share vs slots in use / slots)."""
    kv_transfer_mean_s: float = 0.0
    """Mean over the measured requests of their KV transfer's time on its link (the pair's figure, without the
    wait for the sender's earlier transfers)."""
    kv_fastest_share: float = 1.0
    """Share of the measured requests whose KV moved over the fastest pair of the matrix (with NVLink and fabric
    pairs: the NVLink share; with one figure for every pair: 1)."""
    prefix_hit_rate: float = math.nan
    """With a shared-prefix workload: share of the measured requests whose prefix was in their prefill replica's
    cache when it took them (nan without one)."""
    prefix_token_hit_rate: float = math.nan
    """With a shared-prefix workload: the measured requests' prompt tokens served from the prefill caches over all
    their prompt tokens (nan without one)."""
    kv_offload: dict[str, float] | None = None
    """With a host-memory tier under the prefill caches (``SimConfig.kv_offload``): its block over the measured
    requests (:func:`~fmstack.perfmodel.inference_prefix_offload.offload_stats`); None without one."""


def _overlap(start: float, dur: float, lo: float, hi: float) -> float:
    return max(0.0, min(start + dur, hi) - max(start, lo))


def pool_stats(s: DisaggSim) -> PoolStats:
    """:class:`PoolStats` of a finished run."""
    reqs = s._requests[s.sim.warmup_requests : s.sim.num_requests - s.sim.cooldown_requests]
    done = [r for r in reqs if r.generated >= r.output_len]
    lo, hi = reqs[0].arrival_s, max(reqs[-1].arrival_s, reqs[0].arrival_s + 1e-12)
    if done and hi - lo < float(np.mean([r.last_token_s - r.arrival_s for r in done])):
        hi = max(hi, max(r.last_token_s for r in done))
    busy = sum(_overlap(t0, dt, lo, hi) for t0, dt in s._prefill_log)
    n_pre, n_dec = len(s._prefill_busy), len(s._decode_busy)
    dec_t = [(_overlap(t0, dt, lo, hi), n, used) for t0, dt, n, used in s._decode_log]
    dec_busy = sum(w for w, _, _ in dec_t)
    batch = sum(w * n for w, n, _ in dec_t) / dec_busy if dec_busy > 0 else 0.0
    slots = sum(w * used for w, _, used in dec_t) / (n_dec * (hi - lo))
    waits = [s.prefill_wait_s[r.rid] for r in reqs if r.rid in s.prefill_wait_s]
    ids = {r.rid for r in reqs}
    waited = [r for r in ids if r in s._slot_wait_by_rid and s._slot_wait_by_rid[r] > 0]
    util = busy / (n_pre * (hi - lo))
    moved = [s.kv_moved[r.rid] for r in reqs if r.rid in s.kv_moved]
    fastest = min(s.kv_pair_s.values())
    hits = (math.nan, math.nan)
    if s.prefix is not None:
        from fmstack.perfmodel.inference_sim_disagg_prefix import hit_rates

        hits = hit_rates(reqs, s.prefix.prefix_len)
    return PoolStats(
        prefill_utilisation=util, prefill_wait_p99_s=float(np.percentile(waits, 99)) if waits else 0.0,
        decode_batch_mean=batch, decode_slots_in_use=slots, decode_slots=s._cap,
        slot_wait_share=len(waited) / max(1, len(ids)),
        bottleneck="prefill" if util >= slots / s._cap else "decode",
        kv_transfer_mean_s=float(np.mean(moved)) if moved else 0.0,
        kv_fastest_share=sum(1 for x in moved if x == fastest) / len(moved) if moved else 1.0,
        prefix_hit_rate=hits[0], prefix_token_hit_rate=hits[1],
        kv_offload=None if s.sim.kv_offload is None else offload_stats(reqs, s.sim.kv_offload),
    )  # fmt: skip
