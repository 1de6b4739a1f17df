"""How much load a disaggregated split's pools take: each pool's capacity (:class:`PoolCapacity`), the refusal of a
rate above it naming the pool (:func:`check_split_load`), and the warm-up and length of a split's simulation, which
grow near a pool's capacity as the queue's relaxation time does (:func:`split_warmup`; the colocated rule is
:mod:`fmstack.perfmodel.inference_open_loop`). Used by :mod:`fmstack.perfmodel.inference_plan_disagg`."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from fmstack.errors import InputError
from fmstack.perfmodel.inference import ServeConfig, max_concurrency, prefill_ctx
from fmstack.perfmodel.inference_disagg_spec import prefill_deployment, tokens_per_iteration
from fmstack.perfmodel.inference_open_loop import (
    MEASURED,
    RELAX_MEASURED,
    RELAX_WARMUP,
    REQUESTS_MAX,
    relaxation_requests,
)
from fmstack.perfmodel.inference_step import Deployment, RankLoad, step_time

SIM_MEASURED = MEASURED
"""Requests measured at least: as many as a colocated replica's check measures, so `plan serve` ranks split and
colocated rows on p99s of as many samples. 135 (until session 14) put a p99 between a run's two largest TTFTs:
Llama 3.1 70B fp8, 32000/1 tokens at 0.2 req/s, 2P(tp8):1D(tp1) on p5: TTFT p99 1.92-3.00 s (median 2.4) over
seeds 0-7 against 2.56-3.11 s (median 2.78) over 1,000, and a plan "met" 3 s at seed 0 with 1.92 s; 70B TP 2 fp8
1P:1D, 2048/256 at 2 req/s: 0.37-0.61 s (median 0.47) against 0.50-0.66 s (median 0.56)."""
SIM_REQUESTS_MAX = 3000


def prefill_servers(cfg: ServeConfig) -> int:
    """Prompts a prefill replica of ``cfg`` serves side by side: its ranks under attention DP (each its own prompts
    within its own budget), else 1 (the replica's iteration takes prompts within one budget)."""
    return cfg.tp if cfg.attention_dp else 1


@dataclass(frozen=True, kw_only=True, slots=True)
class PoolCapacity:
    """Requests/s one replica of each pool completes at most, busy at every moment (the split simulation's pricing):
    a load above ``P x prefill_rps`` or ``D x decode_rps`` makes a queue that grows without bound."""

    prefill_rps: float
    """Back-to-back prefill iterations of a full ``max_num_tokens`` budget (per rank under attention DP, each rank a
    server): ``servers x (budget / new prompt tokens) / step_time(budget tokens)``, the tokens' attended context at
    the prompt's mean (chunks of a prompt add up to its whole causal sum)."""
    decode_rps: float
    """Every slot decoding: ``max over C <= slots of C / (output_len x ITL(C))`` (a request takes ``output_len``
    decode iterations, speculative decoding ``output_len / E`` of ``E x ITL(C)`` each; slots: ``max_concurrency``, under attention DP ``tp`` ranks of ``max_concurrency // tp``)."""
    decode_slots: int


def decode_slots(dd: Deployment, dc: ServeConfig) -> int:
    """Sequences a decode replica holds (``max_concurrency``; under attention DP ``tp`` ranks of ``max_concurrency //
    tp``)."""
    slots = max_concurrency(dd, dc)
    return slots // dc.tp * dc.tp if dc.attention_dp else slots


def decode_capacity_rps(dd: Deployment, dc: ServeConfig, itl: NDArray[np.float64] | None = None) -> float:
    """:attr:`PoolCapacity.decode_rps` of a decode replica ``dd`` of ``dc``; ``itl``: its decode-only iterations over
    ``C = 1 .. slots`` when the caller has them (:func:`fmstack.perfmodel.inference_disagg.decode_itl`; not used
    under attention DP, where the busiest rank's are priced)."""
    slots = decode_slots(dd, dc)
    if slots < 1:
        return 0.0
    conc = np.arange(1, slots + 1, dtype=np.float64)
    if itl is None or dc.attention_dp:
        ctx = dc.input_len + dc.output_len / 2.0
        dbusy = RankLoad(decode_seqs=conc / dc.tp, decode_ctx=ctx) if dc.attention_dp else None
        itl = step_time(dd, conc, ctx, busiest=dbusy).total_s / tokens_per_iteration(dd)
    return float(np.max(conc / (dc.output_len * np.broadcast_to(itl, conc.shape))))


def pool_capacity(
    d: Deployment, cfg: ServeConfig, dd: Deployment, dc: ServeConfig, decode_rps: float | None = None
) -> PoolCapacity:
    """:class:`PoolCapacity` of a prefill replica ``d`` of ``cfg`` and a decode replica ``dd`` of ``dc``;
    ``decode_rps``: the decode replica's :func:`decode_capacity_rps` when the caller has it (a plan computes it once
    per decode layout). Speculative decoding: the prefill iterations with the draft's pass over the prompt
    (:func:`fmstack.perfmodel.inference_disagg_spec.prefill_deployment`)."""
    d = prefill_deployment(d)
    new = cfg.input_len - math.floor(cfg.prefix_hit_rate * cfg.input_len)
    budget = float(cfg.max_num_tokens)
    per_token_ctx = prefill_ctx(cfg.input_len, cfg.prefix_hit_rate) / new
    servers = prefill_servers(cfg)
    busy = None
    if cfg.attention_dp:  # every rank a full budget of its own prompts
        busy = RankLoad(prefill_tokens=budget, prefill_token_ctx=budget * per_token_ctx, prefill_seqs=budget / new)
    t = float(np.max(step_time(d, 0.0, 0.0, servers * budget, servers * budget * per_token_ctx,
                               servers * budget / new, busiest=busy).total_s))  # fmt: skip
    decode = decode_capacity_rps(dd, dc) if decode_rps is None else decode_rps
    return PoolCapacity(prefill_rps=servers * budget / new / t, decode_rps=decode, decode_slots=decode_slots(dd, dc))


def check_split_load(cap: PoolCapacity, qps: float, prefill_replicas: int, decode_replicas: int) -> tuple[float, str]:
    """The busier pool's utilization (``qps`` over its replicas' capacity, :class:`PoolCapacity`) and its name;
    InputError ``qps`` when ``qps`` exceeds a pool's capacity, naming the pool(s), their capacity and the flag to
    raise. A decode replica without a slot is left to the simulation, which refuses it with the reason (the ranks,
    memory)."""
    pools = [(pool, n, per, flag) for pool, n, per, flag in (
        ("prefill", prefill_replicas, cap.prefill_rps, "prefill-replicas"),
        ("decode", decode_replicas, cap.decode_rps, "decode-replicas"))
        if pool == "prefill" or cap.decode_slots >= 1]  # fmt: skip
    over = [p for p in pools if qps > p[1] * p[2]]
    if over:
        said = " and ".join(f"the {pool} pool's capacity, {n} replica(s) x {per:.4g} = {n * per:.4g} requests/s"
                            for pool, n, per, _ in over)  # fmt: skip
        raise InputError(
            "qps", f"{qps:g} requests/s exceeds {said} (busy every moment): the queue grows without bound; raise "
            f"{' and '.join('--' + flag for *_, flag in over)} or lower --qps",
        )  # fmt: skip
    util, pool = max((qps / (n * per), pool) for pool, n, per, _ in pools)
    return util, pool


def split_warmup(inflight: float, utilization: float, pool: str, qps: float) -> tuple[int, int]:
    """(warm-up, requests in all) of a split's run: the requests in flight by Little's law (at least 15, at most
    ``SIM_REQUESTS_MAX / 3``), then at least twice as many measured (``SIM_MEASURED`` at least, ``SIM_REQUESTS_MAX``
    in all); where the busier pool's queue relaxes more slowly (Morse's M/M/1 time at its ``utilization``,
    :mod:`fmstack.perfmodel.inference_open_loop`), ``RELAX_WARMUP`` relaxation times of warm-up and
    ``RELAX_MEASURED`` measured. InputError ``qps`` when that exceeds ``REQUESTS_MAX`` (near the pool's capacity: no
    steady state to measure), naming the pool."""
    warmup = min(max(15, math.ceil(inflight)) if math.isfinite(inflight) else SIM_REQUESTS_MAX, SIM_REQUESTS_MAX // 3)
    n = min(warmup + max(SIM_MEASURED, 2 * warmup), SIM_REQUESTS_MAX)
    relax = relaxation_requests(utilization)
    flag = "--prefill-replicas" if pool == "prefill" else "--decode-replicas"
    if not (RELAX_WARMUP + RELAX_MEASURED) * relax <= REQUESTS_MAX:
        raise InputError(
            "qps", f"{qps:g} requests/s keeps the {pool} pool {100 * utilization:.1f} % busy: its queue settles over "
            f"about {relax:,.0f} requests (Morse's M/M/1 relaxation time) and a run needs {RELAX_WARMUP:g} + "
            f"{RELAX_MEASURED:g} of those, more than the {REQUESTS_MAX:,} requests it simulates: no steady state near "
            f"capacity; raise {flag} or lower --qps",
        )  # fmt: skip
    if RELAX_WARMUP * relax > warmup:
        measured = max(n - warmup, math.ceil(RELAX_MEASURED * relax))
        warmup = math.ceil(RELAX_WARMUP * relax)
        n = warmup + measured
    return warmup, n
