"""Disaggregated candidates of `plan serve`: a prefill pool and a decode pool of the same replica layout.

For each layout the plan searches (same instance, precision, TP / PP / EP for both pools; no attention DP: the
split simulation has no ranks), the mean-field model (:func:`fmstack.perfmodel.inference_disagg.pool_rates`:
decode-only ITL caps a decode replica's sequences, an M/D/1 prefill queue must leave the KV transfer and the first
decode iteration inside the TTFT target) gives ``P = ceil(qps / prefill rate)`` and ``D = ceil(qps / decode
rate)`` replicas; whole nodes for ``P + D`` replicas give the cost. The plan ranks these with the colocated
candidates and checks the cheapest by simulation (:mod:`fmstack.perfmodel.inference_sim_disagg`, the whole
deployment at ``qps``); a split that misses p99 grows the pool that missed (TTFT: prefill, ITL: decode).
The prefill pool runs the largest prompt budget the plan tries (a prefill-only replica has no decode gaps to
protect; a smaller chunk only adds iterations).
"""

from __future__ import annotations

import math

import numpy as np

from fmstack.catalog.schema import ModelArch
from fmstack.perfmodel.efficiency import default_efficiency
from fmstack.perfmodel.inference import ServeConfig, deployment, max_concurrency
from fmstack.perfmodel.inference_disagg import SLO, pool_rates
from fmstack.perfmodel.inference_plan_candidate import Candidate, ClusterOf, config_of, deployment_nodes, with_replicas
from fmstack.perfmodel.inference_sim import SimConfig, SimResult
from fmstack.perfmodel.inference_sim_disagg import simulate_disagg

SIM_MEASURED = 135
"""Requests measured at least (the colocated check measures 135 on one replica)."""
SIM_REQUESTS_MAX = 3000


def disagg_analytic(
    cfg: ServeConfig, cluster_of: ClusterOf, model: ModelArch, qps: float, slo: SLO, name: str, nodes_per_replica: int
) -> Candidate | None:
    """The split of ``cfg``'s replicas that serves ``qps`` within the SLO on the mean-field model, or None. The
    replica is built on its own nodes (as a colocated one), the KV transfer priced on the nodes of two replicas."""
    if cfg.attention_dp:
        return None
    cluster = cluster_of(name, nodes_per_replica)
    d = deployment(model, cluster, cfg, default_efficiency(cluster.gpu))
    limit = max_concurrency(d, cfg)
    if limit < 1:
        return None
    two = (
        cluster
        if cluster.num_gpus >= 2 * d.num_gpus
        else cluster_of(name, deployment_nodes(2, cfg, cluster.instance.num_gpus))
    )
    pools = pool_rates(model, two, cfg, slo, d, np.arange(1, limit + 1, dtype=np.float64))
    if pools.per_prefill_rps <= 0 or pools.per_decode_rps <= 0:
        return None
    n_pre = math.ceil(qps / pools.per_prefill_rps)
    n_dec = math.ceil(qps / pools.per_decode_rps)
    rho = qps / (n_pre / pools.prefill_s)
    wait = rho * pools.prefill_s / (2 * (1 - rho))
    gpn = cluster.instance.num_gpus
    nodes = deployment_nodes(n_pre + n_dec, cfg, gpn)
    goodput = min(n_pre * pools.per_prefill_rps, n_dec * pools.per_decode_rps)
    return Candidate(
        instance=name, gpu=cluster.gpu.name, precision=cfg.precision, tp=cfg.tp, ep=cfg.ep, pp=cfg.pp,
        nodes_per_replica=nodes_per_replica, replicas=n_pre + n_dec, nodes=nodes, num_gpus=nodes * gpn,
        cost_per_hour_usd=nodes * (cluster.instance.price_per_hour_usd or 0.0), max_num_tokens=cfg.max_num_tokens,
        rate_per_replica_rps=goodput / (n_pre + n_dec), concurrency=pools.decode_concurrency,
        mean_ttft_s=pools.prefill_s + wait + pools.kv_s + pools.decode_itl_s, mean_itl_s=pools.decode_itl_s,
        mode="disaggregated", prefill_replicas=n_pre, decode_replicas=n_dec, kv_transfer_s=pools.kv_s,
    )  # fmt: skip


def simulate_split(
    cluster_of: ClusterOf, model: ModelArch, c: Candidate, qps: float, isl: int, osl: int, seed: int
) -> SimResult:
    """Poisson arrivals at ``qps`` over the split's ``P`` prefill and ``D`` decode replicas. The warm-up is the
    requests in flight by Little's law at the analytic means (``qps x (TTFT + out x ITL)``: the decode batches
    fill), then at least twice as many are measured (``SIM_MEASURED`` at least; ``SIM_REQUESTS_MAX`` in all)."""
    cfg = config_of(c, isl, osl)
    d = deployment(model, cluster_of(c.instance, c.nodes_per_replica), cfg)
    inflight = math.ceil(qps * (c.mean_ttft_s + osl * c.mean_itl_s))
    warmup = min(max(15, inflight), SIM_REQUESTS_MAX // 3)
    n = min(warmup + max(SIM_MEASURED, 2 * inflight), SIM_REQUESTS_MAX)
    sim = SimConfig(request_rate_per_s=qps, num_requests=n, warmup_requests=warmup, seed=seed)
    return simulate_disagg(d, cfg, sim, prefill_replicas=c.prefill_replicas, decode_replicas=c.decode_replicas,
                           kv_transfer_s=c.kv_transfer_s)  # fmt: skip


def grow_split(cluster_of: ClusterOf, option: Candidate, first: Candidate, factor: float, missed: SimResult,
               slo: SLO) -> Candidate:  # fmt: skip
    """``option`` after a p99 miss: the prefill pool at ``factor`` x the analytic count if TTFT missed, the decode
    pool if ITL missed (each at least one more than before)."""
    n_pre, n_dec = option.prefill_replicas, option.decode_replicas
    if missed.ttft_s[99] > slo.ttft_s:
        n_pre = max(n_pre + 1, math.ceil(first.prefill_replicas * factor))
    if missed.itl_s[99] > slo.itl_s:
        n_dec = max(n_dec + 1, math.ceil(first.decode_replicas * factor))
    return with_replicas(cluster_of, option, n_pre + n_dec, n_pre, n_dec)


def split_note(ranked: list[Candidate], qps: float, searched: bool) -> str:
    """Whether a split ranked, and why it wins or loses against the best colocated row (cost, goodput per GPU)."""
    if not searched:
        return "disaggregated splits not searched (--no-disagg)"
    meets = [c for c in ranked if c.meets_slo]
    split = next((c for c in meets if c.mode == "disaggregated"), None)
    co = next((c for c in meets if c.mode == "colocated"), None)
    if split is None:
        tried = [c for c in ranked if c.mode == "disaggregated" and c.sim is not None]
        why = "no split was cheap enough on the mean-field model to be simulated"
        if tried:
            t = tried[0]
            why = (f"the cheapest split simulated ({t.prefill_replicas}P:{t.decode_replicas}D tp {t.tp} "
                   f"{t.instance}, ${t.cost_per_hour_usd:,.2f}/h) misses the p99 SLO")  # fmt: skip
        return f"no disaggregated split meets the SLO among the verified candidates: {why}"
    pd = f"{split.prefill_replicas}P:{split.decode_replicas}D tp {split.tp} {split.precision} on {split.instance}"
    if co is None:
        cheaper = [c for c in ranked if c.mode == "colocated" and c.cost_per_hour_usd <= split.cost_per_hour_usd]
        rest = [c.cost_per_hour_usd for c in ranked if c.mode == "colocated" and c not in cheaper]
        return (
            f"the split {pd} (${split.cost_per_hour_usd:,.2f}/h) is the cheapest that meets the p99 SLO: "
            f"{len(cheaper)} colocated row(s) at or below its cost miss it in simulation"
            + (f", the next colocated row costs at least ${min(rest):,.2f}/h" if rest else "")
            + "; decode-only replicas keep prompt chunks out of the decode iterations "
            f"({split.concurrency} sequences at {split.mean_itl_s * 1e3:.1f} ms), KV transfer "
            f"{split.kv_transfer_s * 1e3:.1f} ms per request"
        )
    busy_s, busy_c = split.replicas * split.tp * split.pp, co.replicas * co.tp * co.pp
    win = (split.cost_per_hour_usd, busy_s) < (co.cost_per_hour_usd, busy_c)
    verdict = "wins" if win else "loses"
    why = (
        "decode-only replicas keep prompt chunks out of the decode iterations, so each holds "
        f"{split.concurrency} sequences at {split.mean_itl_s * 1e3:.1f} ms vs {co.concurrency} colocated at "
        f"{co.mean_itl_s * 1e3:.1f} ms"
    )
    if not win:
        why += (f", but {split.prefill_replicas} prefill replica(s) must be paid for and the pools come in whole "
                f"replicas")  # fmt: skip
    return (
        f"the best split, {pd} (${split.cost_per_hour_usd:,.2f}/h, {busy_s} GPUs busy: {qps / busy_s:.3g} req/s per "
        f"GPU within the p99 SLO), {verdict} against the best colocated row (${co.cost_per_hour_usd:,.2f}/h, {busy_c} "
        f"GPUs busy: {qps / busy_c:.3g} req/s per GPU): {why}; KV transfer "
        f"{split.kv_transfer_s * 1e3:.1f} ms per request"
    )
