"""Disaggregated candidates of `plan serve`: a prefill pool and a decode pool, of one replica layout or of two
(heterogeneous pools, ``decode_cfg``: same instance and precision, another TP / PP / EP).

For each layout (or pair of layouts) the plan searches (attention DP included, in either pool or both:
:mod:`fmstack.perfmodel.inference_sim_disagg_adp`), the mean-field model (:func:`fmstack.perfmodel.inference_disagg.pool_rates`:
decode-only ITL caps a decode replica's sequences, an M/D/1 prefill queue must leave the KV transfer and the first
decode iteration inside the TTFT target) gives ``P = ceil(qps / prefill rate)`` and ``D = ceil(qps / decode
rate)`` replicas; whole nodes for ``P + D`` replicas give the cost. The plan ranks these with the colocated
candidates and checks the cheapest by simulation (:mod:`fmstack.perfmodel.inference_sim_disagg`, the whole
deployment at ``qps``); a split that misses p99 grows the pool that missed (TTFT: prefill, ITL: decode).
The prefill pool runs the largest prompt budget the plan tries (a prefill-only replica has no decode gaps to
protect; a smaller chunk only adds iterations). An attention-DP prefill replica is ``tp`` prefill servers (each rank
takes its own prompts within its own budget): the mean-field and p99 sizes count ranks, and ``P`` is the replicas
that hold them. KV link: the mean field takes the best pair (NVLink when one prefill and one decode replica fit an
NVLink domain, :func:`fmstack.perfmodel.inference_disagg.kv_move`): optimistic or equal, so no cheaper split is
skipped on its link; the simulation places the replicas (:mod:`fmstack.perfmodel.inference_disagg_place`) and
moves each pair's KV over its own link (NVLink within a domain, else the scale-out fabric), and decides.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from fmstack.catalog.schema import ModelArch
from fmstack.catalog.topology import Cluster
from fmstack.errors import InputError
from fmstack.perfmodel.efficiency import EfficiencyFor
from fmstack.perfmodel.inference import ServeConfig, deployment_for, max_concurrency
from fmstack.perfmodel.inference_disagg import (
    SLO,
    DecodeAtSlo,
    PoolRates,
    decode_at_slo,
    decode_itl,
    pool_rates,
    prefill_alone_s,
    prefill_replicas_p99,
)
from fmstack.perfmodel.inference_disagg_load import (
    PoolCapacity,
    check_split_load,
    decode_capacity_rps,
    pool_capacity,
    split_warmup,
)
from fmstack.perfmodel.inference_disagg_load import prefill_servers as prefill_servers  # re-exported
from fmstack.perfmodel.inference_disagg_place import KvPairs, kv_pair_times
from fmstack.perfmodel.inference_plan_candidate import (
    Candidate,
    ClusterOf,
    config_of,
    decode_config_of,
    deployment_nodes,
    split_nodes,
    with_replicas,
)
from fmstack.perfmodel.inference_plan_disagg_note import split_note as split_note  # re-exported: moved there
from fmstack.perfmodel.inference_prefix import PrefixWorkload
from fmstack.perfmodel.inference_prefix_offload import KvOffload
from fmstack.perfmodel.inference_router_kv import KvRouterConfig
from fmstack.perfmodel.inference_session import SessionWorkload
from fmstack.perfmodel.inference_sim import SimConfig, SimResult
from fmstack.perfmodel.inference_sim_disagg import PoolStats, simulate_disagg_stats
from fmstack.perfmodel.inference_step import Deployment, step_time


def _two_replicas(cluster_of: ClusterOf, name: str, cfg: ServeConfig, nodes_per_replica: int,
                  decode_cfg: ServeConfig | None = None) -> Cluster:  # fmt: skip
    """The nodes of a prefill and a decode replica (the KV transfer's link: NVLink when both fit one NVLink
    domain)."""
    dc = cfg if decode_cfg is None else decode_cfg
    cluster = cluster_of(name, nodes_per_replica)
    if cluster.num_gpus >= cfg.tp * cfg.pp + dc.tp * dc.pp:
        return cluster
    return cluster_of(name, split_nodes(1, 1, cfg, dc, cluster.instance.num_gpus))


def _replica_nodes(cfg: ServeConfig, gpus_per_node: int) -> int:
    return max(1, deployment_nodes(1, cfg, gpus_per_node))


def decode_batch(d: Deployment, cfg: ServeConfig, rate_per_s: float) -> int:
    """Sequences one decode replica runs at ``rate_per_s`` requests/s by Little's law on the decode-only curve: the
    fewest ``C`` with ``C >= rate x output_len x ITL(C)`` (``max_concurrency`` when none: saturated; ITL:
    :func:`decode_itl`, the TPOT under speculative decoding)."""
    cap = max_concurrency(d, cfg)
    conc = np.arange(1, cap + 1, dtype=np.float64)
    itl = decode_itl(d, cfg, conc)
    ok = np.nonzero(conc >= rate_per_s * cfg.output_len * itl)[0]
    return int(conc[ok[0]]) if len(ok) else cap


@dataclass(frozen=True, kw_only=True, slots=True)
class SplitRun:
    """One simulation of a split deployment and what it was run with."""

    result: SimResult
    stats: PoolStats
    kv_bytes: float
    kv_transfer_s: float
    """The best pair's transfer (NVLink when a prefill and a decode replica fit one NVLink domain): the plan row's
    mean-field figure; each pair's is in ``kv``."""
    kv_link: str
    kv: KvPairs
    """The placement of the replicas and each (prefill, decode) pair's transfer the simulation ran with."""
    prefill_s: float
    """One prompt alone on a prefill replica (:func:`prefill_alone_s`)."""
    decode_batch_mean_field: int
    """Sequences per decode replica by Little's law at ``qps / D`` (:func:`decode_batch`)."""
    warmup_requests: int
    num_requests: int
    sessions: dict[str, Any] | None = None
    """A multi-turn run's ``sessions`` block (:func:`fmstack.perfmodel.inference_sim_disagg_session.
    simulate_disagg_sessions`); None: independent requests."""


def run_split(
    cluster_of: ClusterOf, model: ModelArch, cfg: ServeConfig, name: str, qps: float, prefill_replicas: int,
    decode_replicas: int, seed: int, length_spread: float = 0.0, decode_cfg: ServeConfig | None = None,
    efficiency_for: EfficiencyFor | None = None, prefix: PrefixWorkload | None = None, router: str = "round-robin",
    kv_router: KvRouterConfig | None = None, sessions: SessionWorkload | None = None,
    kv_offload: KvOffload | None = None,
) -> SplitRun:  # fmt: skip
    """Poisson arrivals at ``qps`` over ``P`` prefill and ``D`` decode replicas of ``cfg`` on ``name``, each replica
    on its own nodes (as the plan prices it), the KV link priced on two replicas' nodes. The warm-up is the requests
    in flight by Little's law (``qps x`` the mean-field TTFT, an M/D/1 wait per prefill replica at ``qps / P``,
    plus ``D`` decode batches of :func:`decode_batch`), then at least twice as many are measured (``SIM_MEASURED``
    at least; ``SIM_REQUESTS_MAX`` in all), or more near the busier pool's capacity (:func:`split_warmup`). `plan serve` and `estimate serve --prefill-replicas P
    --decode-replicas D` both run this: the same seed gives the same percentiles. The replicas are placed on the
    split's whole nodes (:func:`fmstack.perfmodel.inference_disagg_place.place_split`) and each pair's KV moves over
    NVLink when both lie in one NVLink domain, else over the scale-out fabric. ``decode_cfg``: the decode pool's
    layout when it differs (heterogeneous pools; the KV transfer re-slices the heads, :func:`fmstack.perfmodel.inference_disagg.kv_transfer_s`).
    ``efficiency_for``: each replica's efficiency (a calibration profile's; None: the default curves). InputError
    ``qps`` when the rate exceeds the prefill or the decode pool's capacity (:func:`check_split_load`), or comes so
    near it that no run reaches the steady state (:func:`split_warmup`). ``prefix``: a shared-prefix workload, each
    prefill replica caching prefixes behind ``router`` (``kv_router``: the KV router's settings;
    :mod:`fmstack.perfmodel.inference_sim_disagg_prefix`); the load check and the warm-up are those of full prompts,
    or where full prompts exceed the prefill pool, of prompts shortened by the most the prefill caches could serve
    (:func:`fmstack.perfmodel.inference_open_loop.sizing_hit_rate` on a prefill replica, as a colocated run sizes
    itself): the simulation decides the hits. ``sessions``: a multi-turn workload, its history cached by the prefill
    replicas behind ``router``, sized at its mean turn (:mod:`fmstack.perfmodel.inference_plan_disagg_session`) and
    simulated by :mod:`fmstack.perfmodel.inference_sim_disagg_session`."""
    gpn = cluster_of(name, 1).instance.num_gpus
    dc = cfg if decode_cfg is None else decode_cfg
    per_replica = _replica_nodes(cfg, gpn)
    d = deployment_for(model, cluster_of(name, per_replica), cfg, efficiency_for)
    dd = d if decode_cfg is None else deployment_for(model, cluster_of(name, _replica_nodes(dc, gpn)), dc,
                                                     efficiency_for)  # fmt: skip
    two = _two_replicas(cluster_of, name, cfg, per_replica, dc)
    sized, dsized = cfg, dc  # the prompts the run is sized for
    if sessions is not None:
        from fmstack.perfmodel.inference_plan_disagg_session import split_session_configs

        sized, dsized = split_session_configs(cfg, dc, sessions, router, prefill_replicas, prefix, d)
    try:
        utilization, busier = check_split_load(pool_capacity(d, sized, dd, dsized), qps, prefill_replicas,
                                               decode_replicas)  # fmt: skip
    except InputError as exc:
        # sessions: split_session_configs already counted their first turns' prefix hits in ``sized``
        if prefix is None or exc.field != "qps" or sessions is not None:
            raise
        from fmstack.perfmodel.inference_open_loop import sizing_hit_rate

        sized = replace(cfg, prefix_hit_rate=sizing_hit_rate(d, cfg, prefix, prefill_replicas, router))
        utilization, busier = check_split_load(pool_capacity(d, sized, dd, dc), qps, prefill_replicas,
                                               decode_replicas)  # fmt: skip
    kv = kv_pair_times(model, two, cfg, d, None if decode_cfg is None else dd, prefill_replicas, decode_replicas,
                       gpn, cluster_of(name, 1).nodes_per_domain)  # fmt: skip
    kv_bytes, kv_s, link = kv.kv_bytes, kv.best_s, kv.best_link
    prefill = prefill_alone_s(d, sized)
    batch = decode_batch(dd, dsized, qps / decode_replicas)
    itl = float(step_time(dd, float(batch), dsized.input_len + cfg.output_len / 2.0).total_s)
    rho = qps * prefill / (prefill_replicas * prefill_servers(sized))
    wait = rho * prefill / (2 * (1 - rho)) if rho < 1 else math.inf
    inflight = qps * (prefill + wait + kv_s + itl) + decode_replicas * batch
    warmup, n = split_warmup(inflight, utilization, busier, qps)
    sim = SimConfig(request_rate_per_s=qps, num_requests=n, warmup_requests=warmup, seed=seed,
                    length_spread=length_spread, kv_offload=kv_offload)  # fmt: skip
    if prefix is not None or sessions is not None:
        sim = replace(sim, prefix=prefix, sessions=sessions, router=router, kv_router=kv_router or KvRouterConfig())
    if sessions is not None:
        from fmstack.perfmodel.inference_plan_disagg_session import session_kv
        from fmstack.perfmodel.inference_sim_disagg_session import simulate_disagg_sessions

        kv_time, kv_bytes_of = session_kv(model, two, cfg, d, None if decode_cfg is None else dd, prefill_replicas,
                                          decode_replicas, gpn, cluster_of(name, 1).nodes_per_domain)  # fmt: skip
        result, stats, block = simulate_disagg_sessions(
            d, cfg, sim, prefill_replicas=prefill_replicas, decode_replicas=decode_replicas, kv_time=kv_time,
            kv_bytes=kv_bytes_of, decode=None if decode_cfg is None else dd, decode_cfg=decode_cfg,
        )  # fmt: skip
        return SplitRun(result=result, stats=stats, kv_bytes=kv_bytes, kv_transfer_s=kv_s, kv_link=link, kv=kv,
                        prefill_s=prefill, decode_batch_mean_field=batch,
                        warmup_requests=int(block["warmup_requests"]), num_requests=int(block["num_requests"]),
                        sessions=block)  # fmt: skip
    result, stats = simulate_disagg_stats(d, cfg, sim, prefill_replicas=prefill_replicas,
                                          decode_replicas=decode_replicas, kv_transfer_s=kv.pair_s,
                                          decode=None if decode_cfg is None else dd, decode_cfg=decode_cfg)  # fmt: skip
    return SplitRun(result=result, stats=stats, kv_bytes=kv_bytes, kv_transfer_s=kv_s, kv_link=link, kv=kv,
                    prefill_s=prefill, decode_batch_mean_field=batch, warmup_requests=warmup, num_requests=n)  # fmt: skip


class DecodePools:
    """A plan's decode pools, each decode layout's figures over its slots computed once: :func:`decode_at_slo`
    and :func:`decode_capacity_rps` from one decode-only curve (not under attention DP, whose capacity prices the
    busiest rank). Every split with that decode pool, of any prefill layout, shares them; short sequences give a
    decode replica 10^4 to 10^6 slots, so each curve is a large array (16/4 tokens: 30 decode layouts, each priced
    for 4 prefill layouts and twice, 8 curves of up to 641,449 points each, 4.3 s of a 10 s plan). One plan: one
    model, SLO, lengths and efficiency; keyed by instance, nodes and the decode layout's config."""

    def __init__(self) -> None:
        self._figures: dict[tuple[object, ...], tuple[DecodeAtSlo, float]] = {}

    def figures(
        self, name: str, nodes: int, dd: Deployment, dc: ServeConfig, slo: SLO, slots: int
    ) -> tuple[DecodeAtSlo, float]:
        """(:func:`decode_at_slo` over ``1 .. slots``, :func:`decode_capacity_rps`) of ``dd``, a replica of ``dc`` on
        ``nodes`` nodes of ``name``."""
        sp = dc.speculative  # its draft model is not hashable: the spec by its fields and the draft's name
        spec = (
            None if sp is None else (sp.method, sp.tokens, sp.acceptance, None if sp.draft is None else sp.draft.name)
        )
        key = (name, nodes, replace(dc, speculative=None), spec)
        if key not in self._figures:
            conc = np.arange(1, slots + 1, dtype=np.float64)
            itl = decode_itl(dd, dc, conc)
            self._figures[key] = (decode_at_slo(dd, dc, slo, conc, itl), decode_capacity_rps(dd, dc, itl))
        return self._figures[key]


@dataclass(frozen=True, kw_only=True, slots=True)
class _Pools:
    """A layout's per-replica pool figures (mean field) and the prefill queue's p99 budget."""

    d: Deployment
    pools: PoolRates
    service_s: float
    """One prompt alone on a prefill replica (:func:`prefill_alone_s`)."""
    budget_s: float
    """The TTFT target less one prompt alone, the KV transfer and two decode iterations (whole iterations under
    speculative decoding)."""
    servers: int
    """Prefill servers per prefill replica (:func:`prefill_servers`)."""
    capacity: PoolCapacity


def _pools(
    cfg: ServeConfig, cluster_of: ClusterOf, model: ModelArch, slo: SLO, name: str, nodes_per_replica: int,
    decode_cfg: ServeConfig | None = None, efficiency_for: EfficiencyFor | None = None,
    decode_pools: DecodePools | None = None,
) -> _Pools | None:  # fmt: skip
    cluster = cluster_of(name, nodes_per_replica)
    d = deployment_for(model, cluster, cfg, efficiency_for)
    dd, dc, decode_nodes = d, cfg, nodes_per_replica
    if decode_cfg is not None:
        dc = decode_cfg
        decode_nodes = _replica_nodes(dc, cluster.instance.num_gpus)
        dd = deployment_for(model, cluster_of(name, decode_nodes), dc, efficiency_for)
    limit = max_concurrency(dd, dc)
    if dc.attention_dp:  # the decode simulation's slots: max_concurrency // tp on each rank
        limit = limit // dc.tp * dc.tp
    if limit < 1 or (decode_cfg is not None and max_concurrency(d, cfg) < 1):  # each pool's replica holds a prompt
        return None
    two = _two_replicas(cluster_of, name, cfg, nodes_per_replica, dc)
    conc = np.arange(1, limit + 1, dtype=np.float64)
    at, decode_rps = None, None
    if decode_pools is not None:  # the same lengths in both pools' configs: the same figures
        at, decode_rps = decode_pools.figures(name, decode_nodes, dd, dc, slo, limit)
    pools = pool_rates(model, two, cfg, slo, d, conc, None if decode_cfg is None else dd, decode_at=at)
    service = prefill_alone_s(d, cfg)
    return _Pools(d=d, pools=pools, service_s=service, servers=prefill_servers(cfg),
                  budget_s=slo.ttft_s - service - pools.kv_s - 2 * pools.decode_iteration_s,
                  capacity=pool_capacity(d, cfg, dd, dc, decode_rps=decode_rps))  # fmt: skip


def _figures(p: _Pools, qps: float, n_pre: int, n_dec: int) -> tuple[float, float]:
    """A ``n_pre``:``n_dec`` split's goodput per replica and mean TTFT at ``qps`` (the row's figures): mean-field,
    as a colocated row's (the p99 is the simulation's)."""
    rho = qps / (n_pre * p.servers / p.service_s)
    wait = rho * p.service_s / (2 * (1 - rho)) if rho < 1 else math.inf
    goodput = min(n_pre * p.servers * p.pools.per_prefill_rps, n_dec * p.pools.per_decode_rps)
    return goodput / (n_pre + n_dec), p.service_s + wait + p.pools.kv_s + p.pools.decode_iteration_s


def disagg_analytic(
    cfg: ServeConfig, cluster_of: ClusterOf, model: ModelArch, qps: float, slo: SLO, name: str, nodes_per_replica: int,
    decode_cfg: ServeConfig | None = None, efficiency_for: EfficiencyFor | None = None,
    decode_pools: DecodePools | None = None, prefix: PrefixWorkload | None = None, router: str = "round-robin",
) -> Candidate | None:  # fmt: skip
    """The split of ``cfg``'s replicas that serves ``qps`` within the SLO, or None. ``prefix``: a shared-prefix
    workload, the prefill pool priced with the prompt-token share its caches could serve (:func:`prefill_hit`),
    the row carrying it (``prefix_hit_rate``, ``prefix_request_hit_rate``); the simulation decides. The replica is built on its own
    nodes (as a colocated one), the KV transfer priced on the nodes of two replicas. The decode pool holds the
    mean-field rate (decode-only ITL at the target caps a replica's sequences). The prefill pool's *cost* comes from
    the mean-field size (an M/D/1 mean wait per replica inside the TTFT target: optimistic, so a cheaper split is
    never left unsimulated; the simulation decides and a miss grows the pool); within the nodes that size pays for,
    it then takes up to the p99 size (the fewest replicas whose Kingman p99 wait,
    :func:`fmstack.perfmodel.inference_disagg.prefill_replicas_p99`, fits the TTFT target less one prefill, the KV
    transfer and two decode iterations), which is free and usually spares the retry. ``decode_cfg``: the decode
    pool in another layout of the same instance and precision (heterogeneous pools; ``cfg`` is the prefill pool's),
    the nodes priced on both pools' GPUs together (:func:`split_nodes`). Attention DP in either pool: an attention-DP
    prefill replica counts as ``tp`` servers (:func:`prefill_servers`). ``decode_pools``: the plan's decode figures,
    shared by the splits (:class:`DecodePools`; None: computed here)."""
    share = request_hit = 0.0
    if prefix is not None and not cfg.attention_dp:  # an attention-DP prefill pool runs no prefix cache
        d = deployment_for(model, cluster_of(name, nodes_per_replica), cfg, efficiency_for)
        share, request_hit = prefill_hit(d, cfg, prefix, router)
        if decode_cfg is None:  # the decode pool computes no prompt: its figures from the plain layout
            decode_cfg = cfg
        cfg = replace(cfg, prefix_hit_rate=share)
    dc = cfg if decode_cfg is None else decode_cfg
    p = _pools(cfg, cluster_of, model, slo, name, nodes_per_replica, decode_cfg, efficiency_for, decode_pools)
    if p is None or p.pools.per_decode_rps <= 0:
        return None
    pools, cluster = p.pools, cluster_of(name, nodes_per_replica)
    servers = prefill_replicas_p99(qps, p.service_s, p.budget_s)
    p99 = None if servers is None else math.ceil(servers / p.servers)
    mean = math.ceil(qps / (p.servers * pools.per_prefill_rps)) if pools.per_prefill_rps > 0 else p99
    if mean is None:
        return None
    n_dec = math.ceil(qps / pools.per_decode_rps)
    gpn = cluster.instance.num_gpus
    nodes = split_nodes(mean, n_dec, cfg, dc, gpn)
    n_pre = mean
    while p99 is not None and n_pre < p99 and split_nodes(n_pre + 1, n_dec, cfg, dc, gpn) == nodes:
        n_pre += 1  # free: the nodes are paid for
    try:  # the mean-field sizes sit below capacity; a split that would not is no candidate
        check_split_load(p.capacity, qps, n_pre, n_dec)
    except InputError:
        return None
    rate, ttft = _figures(p, qps, n_pre, n_dec)
    return Candidate(
        instance=name, gpu=cluster.gpu.name, precision=cfg.precision, tp=cfg.tp, ep=cfg.ep, pp=cfg.pp,
        attention_dp=cfg.attention_dp, nodes_per_replica=nodes_per_replica, replicas=n_pre + n_dec, nodes=nodes, num_gpus=nodes * gpn,
        cost_per_hour_usd=nodes * (cluster.instance.price_per_hour_usd or 0.0), max_num_tokens=cfg.max_num_tokens,
        concurrency=pools.decode_concurrency, mean_itl_s=pools.decode_itl_s, mode="disaggregated",
        prefill_replicas=n_pre, decode_replicas=n_dec, kv_transfer_s=pools.kv_s, rate_per_replica_rps=rate, mean_ttft_s=ttft,
        decode_tp=dc.tp, decode_pp=dc.pp, decode_ep=dc.ep, decode_attention_dp=dc.attention_dp,
        prefix_hit_rate=share, prefix_request_hit_rate=request_hit, speculative=cfg.speculative,
    )  # fmt: skip


def prefill_hit(d: Deployment, cfg: ServeConfig, prefix: PrefixWorkload, router: str) -> tuple[float, float]:
    """(prompt-token share, request hit rate) a prefill replica ``d``'s prefix cache could serve: Che's screened
    rate (:func:`fmstack.perfmodel.inference_prefix.screen_hit_rates`) with one prompt in flight and the rest of its
    KV pool holding prefixes (:func:`fmstack.perfmodel.inference_open_loop.sizing_hit_rate`: a prefill replica holds
    only the prompts not yet moved), each replica's own room (the pooled room of an affinity router is not counted:
    the pool's size is not known yet); optimistic, the simulation decides."""
    from fmstack.perfmodel.inference_open_loop import sizing_hit_rate

    share = sizing_hit_rate(d, cfg, prefix, 1, router)
    return share, share * cfg.input_len / min(prefix.prefix_len, cfg.input_len - 1)


def simulate_split(
    cluster_of: ClusterOf, model: ModelArch, c: Candidate, qps: float, isl: int, osl: int, seed: int,
    efficiency_for: EfficiencyFor | None = None, prefix: PrefixWorkload | None = None, router: str = "round-robin",
    kv_router: KvRouterConfig | None = None, sessions: SessionWorkload | None = None,
) -> SimResult:  # fmt: skip
    """:func:`run_split` of the candidate's ``P`` prefill and ``D`` decode replicas at ``qps`` (with a shared-prefix
    workload or sessions of turns of ``isl`` new tokens: the prefill replicas' caches behind ``router``)."""
    dc = decode_config_of(c, isl, osl) if c.heterogeneous else None
    return run_split(cluster_of, model, config_of(c, isl, osl), c.instance, qps, c.prefill_replicas,
                     c.decode_replicas, seed, decode_cfg=dc, efficiency_for=efficiency_for, prefix=prefix,
                     router=router, kv_router=kv_router, sessions=sessions).result  # fmt: skip


def grow_split(cluster_of: ClusterOf, model: ModelArch, option: Candidate, first: Candidate, factor: float,
               missed: SimResult, slo: SLO, qps: float, isl: int, osl: int,
               efficiency_for: EfficiencyFor | None = None, sessions: SessionWorkload | None = None,
               router: str = "round-robin", prefix: PrefixWorkload | None = None) -> Candidate:  # fmt: skip
    """``option`` after a p99 miss: the prefill pool at ``factor`` x the analytic count if TTFT missed, the decode
    pool if ITL missed (each at least one more than before); its rate per replica, mean TTFT and (``sessions``: the
    mean turn's, its prefill caches behind ``router``, with ``prefix`` its first turns' system prefix) screened
    cached share are those of the new split."""
    n_pre, n_dec = option.prefill_replicas, option.decode_replicas
    if missed.ttft_s[99] > slo.ttft_s:
        n_pre = max(n_pre + 1, math.ceil(first.prefill_replicas * factor))
    if missed.itl_s[99] > slo.itl_s:
        n_dec = max(n_dec + 1, math.ceil(first.decode_replicas * factor))
    grown = with_replicas(cluster_of, option, n_pre + n_dec, n_pre, n_dec)
    dc = decode_config_of(option, isl, osl) if option.heterogeneous else None
    cfg = config_of(option, isl, osl)
    if sessions is not None:  # the mean turn, the hits of the grown prefill pool's caches
        from fmstack.perfmodel.inference_plan_disagg_session import split_session_configs

        d = deployment_for(model, cluster_of(option.instance, option.nodes_per_replica), cfg, efficiency_for)
        cfg, dc = split_session_configs(cfg, cfg if dc is None else dc, sessions, router, n_pre, prefix, d)
    elif option.prefix_hit_rate > 0:  # the prefill pool as the row was screened; the decode pool's plain
        dc = cfg if dc is None else dc
        cfg = replace(cfg, prefix_hit_rate=option.prefix_hit_rate)
    p = _pools(cfg, cluster_of, model, slo, option.instance, option.nodes_per_replica, dc, efficiency_for)
    if p is None:
        return grown
    rate, ttft = _figures(p, qps, n_pre, n_dec)
    return replace(grown, rate_per_replica_rps=rate, mean_ttft_s=ttft, prefix_hit_rate=cfg.prefix_hit_rate)
