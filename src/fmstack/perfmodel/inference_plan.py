"""`plan_serve`: the cheapest deployment (instance, precision, TP / EP, replicas) that serves a request rate at an SLO.

Search: every priced instance x precision x TP (x EP = 1 or TP for MoE) that fits is evaluated on the vectorised analytic curve
(:func:`fmstack.perfmodel.inference.serve_curve`, every concurrency at once); the highest per-replica request
rate whose mean TTFT and ITL meet the targets gives ``replicas = ceil(qps / rate)`` and whole nodes give the cost.
Means are optimistic for p99 targets: the filter also asks that an iteration carrying a whole prompt chunk meets
the ITL target and adds it to the TTFT (a prompt may queue behind one). The cheapest candidates are then checked with the batching simulation
(:mod:`fmstack.perfmodel.inference_sim`, Poisson arrivals at ``qps / replicas`` per replica): a candidate whose
simulated p99 misses the SLO gets more replicas until it meets it (or is dropped).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from fmstack.catalog.loader import Catalog
from fmstack.catalog.schema import ModelArch
from fmstack.catalog.topology import Cluster, build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel.efficiency import default_efficiency
from fmstack.perfmodel.inference import ServeConfig, deployment, max_concurrency, serve_curve
from fmstack.perfmodel.inference_disagg import SLO
from fmstack.perfmodel.inference_kv import check_tp
from fmstack.perfmodel.inference_sim import SimConfig, SimResult, simulate
from fmstack.perfmodel.inference_step import Deployment, step_time

F = NDArray[np.float64]

VERIFY_TOP = 3
"""Candidates checked by simulation at least (cheapest first); more while an unchecked one could still be cheaper
than the cheapest checked one that meets the SLO (the analytic cost is a lower bound), up to ``VERIFY_MAX``."""
VERIFY_MAX = 8
REPLICA_FACTORS = (1.0, 1.5, 2.0, 3.0)
"""Replica counts tried, as multiples of the analytic count, for a candidate whose simulated p99 misses the SLO
before it is dropped (means understate p99: queueing behind another prompt's prefill)."""
CHUNK_CHOICES = (2048, 512)
"""Prompt-token budgets per iteration the plan tries (vLLM's ``max_num_batched_tokens`` with chunked prefill): a
smaller chunk keeps a prompt from dominating p99 ITL at the price of more iterations to the first token."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Candidate:
    """One deployment option and what it costs."""

    instance: str
    gpu: str
    precision: str
    tp: int
    ep: int
    """Expert parallel degree inside TP (MoE: 1 or tp)."""
    replicas: int
    nodes: int
    num_gpus: int
    cost_per_hour_usd: float
    max_num_tokens: int
    """Prompt-token budget per iteration (chunked prefill) the deployment runs with."""
    rate_per_replica_rps: float
    """Highest request rate one replica serves within the SLO (analytic means)."""
    mean_ttft_s: float
    mean_itl_s: float
    sim: dict[str, float] | None = None
    """Simulated p50/p90/p99 at the planned rate (None for candidates not simulated)."""
    meets_slo: bool | None = None
    """Simulated p99 within the SLO (None when not simulated)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ServePlan:
    """The cheapest verified deployment and the runners-up."""

    model: str
    qps: float
    input_len: int
    output_len: int
    slo: SLO
    best: Candidate
    candidates: list[Candidate]
    curve: dict[str, list[float]]
    """The best candidate's per-replica curve: concurrency, requests_per_s, ttft_s, itl_s."""


def _fits_tp(model: ModelArch, tp: int, gpd: int) -> bool:
    try:
        check_tp(model, tp, gpd)
    except InputError:
        return False
    return True


def _precisions(gpu_has: list[str], wanted: tuple[str, ...] | None) -> list[str]:
    return [p for p in (wanted or ("bf16", "fp8")) if p in gpu_has]


def plan_serve(
    catalog: Catalog,
    model: ModelArch,
    *,
    qps: float,
    input_len: int,
    output_len: int,
    slo: SLO,
    instances: tuple[str, ...] | None = None,
    precisions: tuple[str, ...] | None = None,
    seed: int = 0,
) -> ServePlan:
    """The cheapest deployment of ``model`` serving ``qps`` requests/s within ``slo`` (p99 checked by simulation)."""
    if qps <= 0:
        raise InputError("qps", f"must be > 0, got {qps}")
    names = list(instances) if instances else [n for n in catalog.names("instance")]
    found: list[Candidate] = []
    for name in names:
        cluster = build_cluster(catalog, name, 1)
        inst = cluster.instance
        if inst.price_per_hour_usd is None:
            if instances:
                raise InputError("instance", f"{name} has no price in the catalog; add price_per_hour_usd")
            continue
        gpn = inst.num_gpus
        has = [p for p in ("bf16", "fp8", "fp4") if getattr(cluster.gpu, f"{p}_dense_tflops", None) is not None]
        for precision in _precisions(has, precisions):
            for tp in (t for t in (1, 2, 4, 8, 16, 32, 64, 72) if t <= gpn and gpn % t == 0):
                if not _fits_tp(model, tp, cluster.gpus_per_domain):
                    continue
                eps = [1] + ([tp] if model.moe is not None and tp > 1 and model.moe.num_experts % tp == 0 else [])
                for ep in eps:
                    for chunk in CHUNK_CHOICES:
                        cfg = ServeConfig(tp=tp, ep=ep, precision=precision, input_len=input_len,
                                          output_len=output_len, max_num_tokens=chunk)  # fmt: skip
                        option = _analytic(cfg, cluster, model, qps, slo, name)
                        if option is not None:
                            found.append(option)
    if not found:
        raise InputError(
            "slo", f"no deployment meets TTFT {slo.ttft_s:g} s and ITL {slo.itl_s:g} s for {model.name} at "
            f"{input_len}/{output_len} tokens on any priced instance, precision and TP (even one request at a time)",
        )  # fmt: skip
    ranked = _verify_cheapest(catalog, model, found, qps, input_len, output_len, slo, seed)
    best = ranked[0]
    if not best.meets_slo:
        raise InputError(
            "slo", f"no deployment meets the p99 SLO (TTFT {slo.ttft_s:g} s, ITL {slo.itl_s:g} s) in simulation; "
            f"the cheapest analytic candidate {best.instance} tp {best.tp} {best.precision} misses it",
        )  # fmt: skip
    cluster = build_cluster(catalog, best.instance, 1)
    cfg = ServeConfig(tp=best.tp, ep=best.ep, precision=best.precision, input_len=input_len, output_len=output_len,
                      max_num_tokens=best.max_num_tokens)  # fmt: skip
    d = deployment(model, cluster, cfg)
    conc = np.arange(1, max_concurrency(d, cfg) + 1, dtype=np.float64)
    curve = serve_curve(d, cfg, conc)
    return ServePlan(
        model=model.name, qps=qps, input_len=input_len, output_len=output_len, slo=slo, best=best,
        candidates=ranked,
        curve={"concurrency": conc.tolist(), "requests_per_s": curve.requests_per_s.tolist(),
               "ttft_s": curve.ttft_s.tolist(), "itl_s": curve.itl_s.tolist()},
    )  # fmt: skip


def _analytic(
    cfg: ServeConfig, cluster: Cluster, model: ModelArch, qps: float, slo: SLO, name: str
) -> Candidate | None:
    """The highest per-replica rate within the SLO on the analytic curve, and the replicas and nodes it needs."""
    d = deployment(model, cluster, cfg, default_efficiency(cluster.gpu))
    limit = max_concurrency(d, cfg)
    if limit < 1:
        return None
    conc = np.arange(1, limit + 1, dtype=np.float64)
    curve = serve_curve(d, cfg, conc)
    spike = _chunk_iteration_s(d, cfg, conc)
    ok = (curve.ttft_s + spike <= slo.ttft_s) & (np.maximum(curve.itl_s, spike) <= slo.itl_s)
    if not ok.any():
        return None
    i = int(np.argmax(np.where(ok, curve.requests_per_s, -1.0)))
    rate = float(curve.requests_per_s[i])
    gpn = cluster.instance.num_gpus
    replicas = math.ceil(qps / rate)
    nodes = math.ceil(replicas * cfg.tp / gpn)
    return Candidate(
        instance=name, gpu=cluster.gpu.name, precision=cfg.precision, tp=cfg.tp, ep=cfg.ep, replicas=replicas, nodes=nodes,
        num_gpus=nodes * gpn, cost_per_hour_usd=nodes * (cluster.instance.price_per_hour_usd or 0.0),
        max_num_tokens=cfg.max_num_tokens, rate_per_replica_rps=rate, mean_ttft_s=float(curve.ttft_s[i]),
        mean_itl_s=float(curve.itl_s[i]),
    )  # fmt: skip


def _chunk_iteration_s(d: Deployment, cfg: ServeConfig, conc: F) -> F:
    """An iteration that carries a whole prompt chunk next to ``conc - 1`` decodes: the gap a p99 ITL sees once
    more than 1 % of iterations carry a prompt, and the extra wait of a prompt queued behind another's chunk."""
    chunk = float(min(cfg.input_len, cfg.max_num_tokens))
    ctx = cfg.input_len + cfg.output_len / 2.0
    return step_time(d, conc - 1.0, ctx, chunk, chunk * (chunk + 1.0) / 2.0, 1.0).total_s


def _verify_cheapest(
    catalog: Catalog, model: ModelArch, found: list[Candidate], qps: float, isl: int, osl: int, slo: SLO, seed: int
) -> list[Candidate]:
    def key(c: Candidate) -> tuple[float, int, float]:
        return (c.cost_per_hour_usd, c.replicas * c.tp, -c.rate_per_replica_rps)  # then fewest GPUs busy

    pending = sorted(found, key=key)
    checked: list[Candidate] = []
    while pending and len(checked) < VERIFY_MAX:
        passing = [c.cost_per_hour_usd for c in checked if c.meets_slo]
        if len(checked) >= VERIFY_TOP and passing and min(passing) <= pending[0].cost_per_hour_usd:
            break
        checked.append(_verify(catalog, model, pending.pop(0), qps, isl, osl, slo, seed))
    return sorted(checked, key=lambda c: (not c.meets_slo, *key(c))) + pending


def _verify(
    catalog: Catalog, model: ModelArch, c: Candidate, qps: float, isl: int, osl: int, slo: SLO, seed: int
) -> Candidate:
    cluster = build_cluster(catalog, c.instance, 1)
    cfg = ServeConfig(
        tp=c.tp, ep=c.ep, precision=c.precision, input_len=isl, output_len=osl, max_num_tokens=c.max_num_tokens
    )
    d = deployment(model, cluster, cfg)
    gpn = cluster.instance.num_gpus
    result: SimResult | None = None
    for factor in REPLICA_FACTORS:
        replicas = math.ceil(c.replicas * factor)
        sim = SimConfig(request_rate_per_s=qps / replicas, num_requests=150, warmup_requests=15, seed=seed)
        result = simulate(d, cfg, sim)
        if result.ttft_s[99] <= slo.ttft_s and result.itl_s[99] <= slo.itl_s:
            nodes = math.ceil(replicas * c.tp / gpn)
            price = cluster.instance.price_per_hour_usd or 0.0
            return replace(c, replicas=replicas, nodes=nodes, num_gpus=nodes * gpn, cost_per_hour_usd=nodes * price,
                           sim=result.percentiles(), meets_slo=True)  # fmt: skip
    assert result is not None
    return replace(c, sim=result.percentiles(), meets_slo=False)
