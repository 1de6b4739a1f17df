"""`plan serve`'s analytic screening of one colocated layout (:func:`analytic`): the highest per-replica rate within
the SLO on the analytic curve, and the replicas and nodes it needs (:mod:`fmstack.perfmodel.inference_plan`).

With a shared-prefix workload (:class:`~fmstack.perfmodel.inference_prefix.PrefixWorkload`) each point of the curve
is priced at the prefix hit rate a replica can expect there (:func:`~fmstack.perfmodel.inference_prefix.
screen_hit_rates`: Che's approximation, the cache's room being the KV pool the running sequences leave plus the
prefixes they hold (at most one each, shared since session 17), the groups a replica sees depending on the router;
under attention DP each rank's share of both, as each rank caches on its own), as ``estimate serve --prefix-hit-rate`` prices a scalar one: those prompt
tokens skip their prefill. The estimate errs optimistic, so that screening keeps every deployment the simulation
could accept; the simulation (:mod:`fmstack.perfmodel.inference_plan_verify`) decides. Under the cache-aware (or kv) router
the hit rate grows with the replicas (their caches together hold more groups), so the replica count is the smallest
``N`` whose own rate serves ``qps`` (``ceil(qps / rate(N)) <= N``, found by bisection: ``rate(N)`` rises with ``N``).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
from numpy.typing import NDArray

from fmstack.catalog.schema import ModelArch
from fmstack.catalog.topology import Cluster
from fmstack.perfmodel.efficiency import EfficiencyFor
from fmstack.perfmodel.inference import (
    Curve,
    ServeConfig,
    deployment_for,
    max_concurrency,
    running_limit,
    serve_curve,
    validate_serve,
)
from fmstack.perfmodel.inference_disagg import SLO
from fmstack.perfmodel.inference_plan_candidate import Candidate, deployment_nodes
from fmstack.perfmodel.inference_plan_session import fewest_replicas, holds_conversation
from fmstack.perfmodel.inference_plan_spec import chunk_gap_s
from fmstack.perfmodel.inference_prefix import PrefixWorkload, screen_hit_rates, token_share
from fmstack.perfmodel.inference_router import ROUTERS_AFFINITY
from fmstack.perfmodel.inference_session import SessionWorkload
from fmstack.perfmodel.inference_session_mean import (
    HISTORY_ROUTERS,
    cache_units,
    first_turn_prefix,
    hit_turns,
    screen_config,
)
from fmstack.perfmodel.inference_step import Deployment, RankLoad, step_time

F = NDArray[np.float64]

ALL_HIT = 0.99
"""A screened request hit rate at or above this: fewer than 1 % of prompts miss, so the p99-aware filter prices the
prompt-chunk iteration of a hit (its uncached suffix) instead of a miss's whole prompt."""


def analytic(
    cfg: ServeConfig, cluster: Cluster, model: ModelArch, qps: float, slo: SLO, name: str, nodes_per_replica: int,
    efficiency_for: EfficiencyFor | None = None, *, prefix: PrefixWorkload | None = None, router: str = "round-robin",
    sessions: SessionWorkload | None = None,
) -> Candidate | None:  # fmt: skip
    """The highest per-replica rate within the SLO on the analytic curve, and the replicas and nodes it needs.
    The configuration passes `estimate serve`'s checks (:func:`validate_serve`: a prompt longer than the model's
    context is refused here as there). ``prefix``: each point priced at its screened hit rate (module docstring).
    ``sessions``: a multi-turn workload, priced as its mean turn (:mod:`fmstack.perfmodel.inference_plan_session`)."""
    validate_serve(cfg, model, cluster)
    d = deployment_for(model, cluster, cfg, efficiency_for)
    limit = max_concurrency(d, cfg)
    if limit < 1:
        return None
    request_hit = 0.0
    point: tuple[float, int, Curve, float, float] | None
    if sessions is not None:
        if not holds_conversation(d, cfg, sessions):
            return None
        got = _session_point(d, cfg, slo, qps, sessions, router, prefix)
        if got is None:
            return None
        replicas, (point, cfg, request_hit) = got
    elif prefix is None or router not in ROUTERS_AFFINITY:  # the hit rate does not depend on the replicas
        point = _best_point(d, cfg, slo, limit, prefix, 1, router)
        replicas = 0 if point is None else math.ceil(qps / point[0])
    else:  # the smallest N with ceil(qps / rate(N)) <= N; rate(N) rises with N (more room in all)
        # from N = groups on, every group fits in the replicas' room together wherever one prefix fits in each:
        # rate(N) is at its most, and N = max(groups, ceil(qps / that rate)) serves qps
        top = _best_point(d, cfg, slo, limit, prefix, prefix.groups, router)
        if top is None:
            return None
        hi = max(prefix.groups, math.ceil(qps / top[0]))
        lo = 0  # invariant: lo replicas do not serve qps (0: none), hi do
        best = top if hi == prefix.groups else _best_point(d, cfg, slo, limit, prefix, hi, router)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            at = _best_point(d, cfg, slo, limit, prefix, mid, router)
            if at is not None and math.ceil(qps / at[0]) <= mid:
                hi, best = mid, at
            else:
                lo = mid
        point, replicas = best, hi
    if point is None:
        return None
    rate, i, curve, token_hit, prefix_request_hit = point
    if sessions is not None:
        token_hit = cfg.prefix_hit_rate  # the mean turn's: estimate serve --input-len L --prefix-hit-rate h
    else:
        request_hit = prefix_request_hit
    gpn = cluster.instance.num_gpus
    nodes = deployment_nodes(replicas, cfg, gpn)
    return Candidate(
        instance=name, gpu=cluster.gpu.name, precision=cfg.precision, tp=cfg.tp, ep=cfg.ep,
        attention_dp=cfg.attention_dp, pp=cfg.pp,
        nodes_per_replica=nodes_per_replica, replicas=replicas, nodes=nodes, num_gpus=nodes * gpn,
        cost_per_hour_usd=nodes * (cluster.instance.price_per_hour_usd or 0.0), max_num_tokens=cfg.max_num_tokens,
        rate_per_replica_rps=rate, concurrency=i + 1, mean_ttft_s=float(curve.ttft_s[i]),
        mean_itl_s=float(curve.itl_s[i]), prefix_hit_rate=token_hit, prefix_request_hit_rate=request_hit,
        speculative=cfg.speculative,
    )  # fmt: skip


def _session_point(
    d: Deployment, cfg: ServeConfig, slo: SLO, qps: float, sessions: SessionWorkload, router: str,
    prefix: PrefixWorkload | None = None,
) -> tuple[int, tuple[tuple[float, int, Curve, float, float], ServeConfig, float]] | None:  # fmt: skip
    """A multi-turn workload's replicas and best point: the mean turn (:func:`screen_config`) with the history hits
    of the replicas' caches (:func:`cache_units`; behind a blind router the fewest replicas that serve ``qps``,
    :func:`fewest_replicas`) and, with a shared system prefix ``prefix``, its first turns' hits
    (:func:`first_turn_prefix`), the priced configuration and the share of turns that hit."""
    ranks = d.tp if d.attention_dp else 1

    def at(
        replicas: int | None,
    ) -> tuple[float, tuple[tuple[float, int, Curve, float, float], ServeConfig, float]] | None:
        units = cache_units(router, replicas, ranks)
        priced = screen_config(cfg, sessions, units)
        first_hit, first_cached = first_turn_prefix(prefix, d, priced, cfg.input_len, replicas, router)
        priced = screen_config(cfg, sessions, units, first_cached)
        limit = max_concurrency(d, priced)
        if limit < 1:
            return None
        # the chunk a p99 gap sees: the last budget's worth of the mean prompt (a miss's last chunk, over the longest
        # context), or the new tokens past a cached history where every later turn hits one
        last = max(0, priced.input_len - priced.max_num_tokens)
        every = units == 1  # one cache per session: every later turn hits (hit_turns exactly (N - 1) / N)
        cached = max(last, math.floor(priced.prefix_hit_rate * priced.input_len) if every else 0)
        point = _best_point(d, priced, slo, limit, None, 1, router, cached=cached)
        return None if point is None else (point[0], (point, priced, hit_turns(sessions, units, first_hit)))

    if router in HISTORY_ROUTERS:
        got = at(1)
        return None if got is None else (math.ceil(qps / got[0]), got[1])
    return fewest_replicas(at, qps)


def _best_point(
    d: Deployment,
    cfg: ServeConfig,
    slo: SLO,
    limit: int,
    prefix: PrefixWorkload | None,
    replicas: int,
    router: str,
    *,
    cached: int = 0,
) -> tuple[float, int, Curve, float, float] | None:
    """The curve's highest rate within the SLO: (rate, its index, the curve, the token and request hit rates
    screened there); None where no point meets the SLO. ``cached``: the prompt tokens the p99-aware chunk iteration
    starts past (:func:`chunk_iteration_s`; without a shared-prefix workload)."""
    request_hit = np.zeros(0)
    if prefix is not None:
        most = replace(cfg, prefix_hit_rate=token_share(prefix, cfg.input_len, 1.0))
        # beyond the sequences the token budget keeps running (at most, with every prefix cached) the rate is flat
        limit = min(limit, math.ceil(running_limit(d, most)))
        conc = np.arange(1, limit + 1, dtype=np.float64)
        # the free part of the pool, plus one prefix per running sequence (each may hold its own prefix, shared);
        # attention DP: each rank caches in its share of the pool and sees every group the replica gets
        room = (max_concurrency(d, replace(cfg, max_batch=None)) - conc) * (cfg.input_len + cfg.output_len)
        ranks = d.tp if d.attention_dp else 1
        request_hit = screen_hit_rates(prefix, (room / prefix.prefix_len + conc) / ranks, replicas=replicas,
                                       router=router)  # fmt: skip
        curve, spike = _stitched(d, cfg, conc, prefix, request_hit)
    else:
        # beyond the sequences the token budget keeps running the rate is flat and the TTFT only grows (clients
        # wait for a slot): the first point at or past that limit is the one the argmax below would pick among them
        limit = min(limit, math.ceil(running_limit(d, cfg)))
        conc = np.arange(1, limit + 1, dtype=np.float64)
        curve, spike = serve_curve(d, cfg, conc), chunk_iteration_s(d, cfg, conc, cached=cached)
    # one output token: no inter-token gap, the ITL target binds nothing (the prompt iteration is TTFT's)
    # speculation splits a chunk iteration's gap over the tokens it emits (inference_plan_spec.chunk_gap_s)
    gaps_ok = (np.maximum(curve.itl_s, chunk_gap_s(spike, conc, cfg)) <= slo.itl_s) | (cfg.output_len == 1)
    ok = (curve.ttft_s + spike <= slo.ttft_s) & gaps_ok
    if not ok.any():
        return None
    i = int(np.argmax(np.where(ok, curve.requests_per_s, -1.0)))
    if prefix is None:
        return float(curve.requests_per_s[i]), i, curve, 0.0, 0.0
    h = float(request_hit[i])
    return float(curve.requests_per_s[i]), i, curve, token_share(prefix, cfg.input_len, h), h


def _stitched(d: Deployment, cfg: ServeConfig, conc: F, prefix: PrefixWorkload, request_hit: F) -> tuple[Curve, F]:
    """The curve and the chunk iteration at each concurrency, each priced at its own screened hit rate (one
    vectorised curve per distinct rate)."""
    n = conc.size
    cols = {
        k: np.empty(n) for k in ("running", "ttft_s", "itl_s", "latency_s", "requests_per_s", "output_tokens_per_s")
    }
    spike = np.empty(n)
    for h in np.unique(request_hit):
        at = request_hit == h
        priced = replace(cfg, prefix_hit_rate=token_share(prefix, cfg.input_len, float(h)))
        part = serve_curve(d, priced, conc[at])
        for k, v in cols.items():
            v[at] = getattr(part, k)
        skip = min(prefix.prefix_len, cfg.input_len - 1) if h >= ALL_HIT else 0
        spike[at] = chunk_iteration_s(d, cfg, conc[at], cached=skip)
    return Curve(concurrency=conc, **cols), spike


def chunk_iteration_s(d: Deployment, cfg: ServeConfig, conc: F, *, cached: int = 0) -> F:
    """An iteration that carries a whole prompt chunk next to ``conc - 1`` decodes: the gap a p99 ITL sees once
    more than 1 % of iterations carry a prompt, and the extra wait of a prompt queued behind another's chunk.
    ``cached``: the prompt's first tokens are in the prefix cache, the chunk starts past them. Attention DP: the
    chunk lives on one rank, which also runs its ``(conc - 1) / tp`` decodes, and the iteration takes that busiest
    rank's time (:func:`step_time` with ``busiest``; the experts see every rank's tokens)."""
    chunk = float(min(cfg.input_len - cached, cfg.max_num_tokens))
    ctx = cfg.input_len + cfg.output_len / 2.0
    chunk_ctx = chunk * cached + chunk * (chunk + 1.0) / 2.0
    busy = None
    if d.attention_dp:
        busy = RankLoad(decode_seqs=(conc - 1.0) / d.tp, decode_ctx=ctx, prefill_tokens=chunk,
                        prefill_token_ctx=chunk_ctx, prefill_seqs=1.0)  # fmt: skip
    return step_time(d, conc - 1.0, ctx, chunk, chunk_ctx, 1.0, busiest=busy).total_s
