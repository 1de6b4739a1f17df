"""The algorithms NCCL can run for each collective on a two-tier cluster (NVLink domains + scale-out fabric).

For a group of n ranks with g ranks in each of n/g NVLink domains, each function returns the time of every
candidate algorithm, each the best of NCCL's Simple (bandwidth) and LL (latency) protocols. The formulas
and their sources are in docs/collectives.md; the low-level alpha-beta pieces are in ``collectives.py``.
Everything is vectorised over NumPy arrays of sizes and group shapes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fmstack.errors import InputError
from fmstack.perfmodel.num import Num, minimum
from fmstack.perfmodel.num import all_finite as _all_finite
from fmstack.perfmodel.num import any_true as _any
from fmstack.perfmodel.num import ceil_log2 as _ceil_log2
from fmstack.perfmodel.num import maximum as _maximum
from fmstack.perfmodel.num import sqrt as _sqrt
from fmstack.perfmodel.num import where as _where

if TYPE_CHECKING:
    from collections.abc import Callable

    from fmstack.catalog.topology import Cluster

_INF = math.inf
PROTOCOLS = ("simple", "ll")


@dataclass(frozen=True, kw_only=True, slots=True)
class LinkParams:
    """One tier of links as the model sees it: bandwidth, and latency per protocol."""

    bw_gbps: float
    """Achievable large-message bandwidth per GPU (line rate x efficiency), GB/s."""
    latency_s: float
    """Per-step latency with NCCL's Simple protocol (bandwidth mode)."""
    ll_latency_s: float
    """Per-step latency with NCCL's LL protocol (small messages)."""
    ll_bw_fraction: float
    """Fraction of ``bw_gbps`` the LL protocol reaches."""
    stage_s: float = 0.0
    """Per-stage chunk overhead of pipelined algorithms (tree, NVLS), see ``pipelined_time_s``."""


def link_params(cluster: Cluster, scope: str) -> LinkParams | None:
    """Per-GPU parameters of the scale-up (NVLink) or scale-out tier of ``cluster`` (None: no NVLink).

    Scale-out bandwidth is rail-optimised: each GPU has its own NICs (p5: 4 x 100 Gb/s EFA = 50 GB/s per GPU
    = node bandwidth / GPUs per node); a group with g ranks in a domain uses g times that share.
    """
    fab = cluster.scale_up if scope == "scale-up" else cluster.scale_out
    if fab is None:
        return None
    if scope == "scale-up":
        line_gbps = fab.bw_per_gpu_gbps if fab.bw_per_gpu_gbps is not None else (cluster.gpu.nvlink_bw_gbps or 0) / 2
        bw = line_gbps * fab.bw_efficiency
    else:
        bw = cluster.network_bw_gbps_per_gpu * fab.bw_efficiency * fab.collective_speedup
    return LinkParams(
        bw_gbps=bw,
        latency_s=fab.latency_us * 1e-6,
        ll_latency_s=(fab.ll_latency_us if fab.ll_latency_us is not None else fab.latency_us) * 1e-6,
        ll_bw_fraction=fab.ll_bw_fraction if fab.ll_bw_fraction is not None else 1.0,
        stage_s=(fab.pipeline_stage_us or 0.0) * 1e-6,
    )


def _pipe(latency: Num, fill: Num, transfer: Num) -> Num:
    """``latency + (sqrt(fill) + sqrt(transfer))^2``: see ``collectives.pipelined_time_s``."""
    return latency + (_sqrt(fill) + _sqrt(transfer)) ** 2


@dataclass(frozen=True, kw_only=True, slots=True)
class Tiers:
    """One evaluation: sizes, group shape (arrays) and the two link tiers."""

    s: Num
    n: Num
    g: Num
    domains: Num
    up: LinkParams | None
    out: LinkParams
    nvls: bool
    nvls_latency_s: float
    nvls_speedup: float

    bw: dict[str, Num]
    """Bytes/s by tier and protocol ("up_simple", "out_ll", ...): see :func:`_tier_bandwidths`."""

    def up_bw(self, proto: str) -> Num:
        """Per-rank NVLink bandwidth (bytes/s); infinite when the group has one rank per domain."""
        return self.bw["up_" + proto]

    def out_bw(self, proto: str) -> Num:
        """Scale-out bandwidth (bytes/s) of the group's g ranks in one domain together (rail-optimised)."""
        return self.bw["out_" + proto]

    def up_lat(self, proto: str) -> float:
        if self.up is None:
            return 0.0
        return self.up.ll_latency_s if proto == "ll" else self.up.latency_s

    def out_lat(self, proto: str) -> float:
        return self.out.ll_latency_s if proto == "ll" else self.out.latency_s

    def up_stage(self, proto: str) -> float:
        return self.up.stage_s if (self.up is not None and proto == "simple") else 0.0

    def out_stage(self, proto: str) -> float:
        return self.out.stage_s if proto == "simple" else 0.0


def _tier_bandwidths(up: LinkParams | None, out: LinkParams, g: Num, domains: Num) -> dict[str, Num]:
    """NVLink per rank (infinite with one rank per domain) and the network of the group's g ranks in a domain
    together (infinite inside one domain), for the Simple and LL protocols, in bytes/s."""
    bws = {}
    for proto in PROTOCOLS:
        if up is None:
            bws["up_" + proto] = _where(g > 0, _INF, _INF)
        else:
            frac = up.ll_bw_fraction if proto == "ll" else 1.0
            bws["up_" + proto] = _where(g > 1, up.bw_gbps * frac * 1e9, _INF)
        frac = out.ll_bw_fraction if proto == "ll" else 1.0
        bws["out_" + proto] = _where(domains > 1, g * out.bw_gbps * frac * 1e9, _INF)
    return bws


def _show(x: Num) -> str:
    return str(int(x)) if isinstance(x, float) else str(x.astype(int).tolist())


def make_tiers(size_bytes: Num, n: Num, g: Num, cluster: Cluster) -> Tiers:
    """Check the group against the cluster and collect the link parameters."""
    if _any(g > cluster.gpus_per_domain):
        raise InputError(
            "ranks_per_domain",
            f"{_show(g)} ranks per domain > {cluster.gpus_per_domain} GPUs per NVLink domain "
            f"of {cluster.instance.name}",
        )
    if _any(n > cluster.num_gpus):
        raise InputError("num_ranks", f"{_show(n)} ranks > {cluster.num_gpus} GPUs in the cluster")
    if _any(size_bytes < 0) or not _all_finite(size_bytes):
        raise InputError("size_bytes", "must be finite and >= 0")
    up = link_params(cluster, "scale-up")  # None only where gpus_per_domain is 1, so g is 1 (checked above)
    out = link_params(cluster, "scale-out")
    if out is None:  # pragma: no cover - every Cluster has a scale-out fabric
        raise InputError("instance", f"{cluster.instance.name} has no scale-out fabric")
    fab = cluster.scale_up
    domains = n / g
    return Tiers(
        s=size_bytes,
        n=n,
        g=g,
        domains=domains,
        up=up,
        out=out,
        bw=_tier_bandwidths(up, out, g, domains),
        nvls=bool(fab is not None and fab.nvls),
        nvls_latency_s=((fab.nvls_latency_us or fab.latency_us) * 1e-6) if fab is not None else 0.0,
        nvls_speedup=fab.nvls_speedup if fab is not None else 1.0,
    )


def _steps_latency(t: Tiers, proto: str, steps: Num, inter_steps: Num) -> Num:
    """NCCL's ring latency: intra-domain steps at the NVLink latency, inter-domain steps at the network's
    (NCCL ``src/graph/tuning.cc``: ``(nsteps - nInterSteps) * intraLat + nInterSteps * interLat``)."""
    return (steps - inter_steps) * t.up_lat(proto) + inter_steps * t.out_lat(proto)


def _ring_bw(t: Tiers, proto: str) -> Num:
    """A ring crosses each domain boundary once per channel, so it runs at min(NVLink, domain network)."""
    return minimum([t.up_bw(proto), t.out_bw(proto)])


def _best(values: list[Num]) -> Num:
    return minimum(values)


def all_reduce(t: Tiers) -> dict[str, Num]:
    """Ring, tree (chain in the domain + double binary tree across), NVLS / NVLS-tree, hierarchical."""
    n, g, dom, s = t.n, t.g, t.domains, t.s
    depth = _ceil_log2(dom)
    tree_k = _where(dom <= 2, 1.0, 2.0)  # network bytes per buffer byte, see tree_all_reduce_time_s
    across = dom > 1
    ring = _best(
        [_steps_latency(t, p, 2 * (n - 1), 2 * (dom - 1)) + 2 * (n - 1) / n * s / _ring_bw(t, p) for p in PROTOCOLS]
    )
    tree = _best(
        [
            _pipe(
                2 * ((g - 1) * t.up_lat(p) + depth * t.out_lat(p)),
                2 * ((g - 1) * t.up_stage(p) + depth * t.out_stage(p)),
                _maximum(_where(g > 1, 2 * s / t.up_bw(p), 0.0), _where(across, tree_k * s / t.out_bw(p), 0.0)),
            )
            for p in PROTOCOLS
        ]
    )
    cands = {"ring": ring, "tree": tree}
    if t.nvls:
        nvls_algbw = t.up_bw("simple") * t.nvls_speedup * g / _maximum(2 * (g - 1), 1)
        nvls = _pipe(
            t.nvls_latency_s + 2 * depth * t.out_lat("simple"),
            2 * t.up_stage("simple") + 2 * depth * t.out_stage("simple"),
            _maximum(s / nvls_algbw, _where(across, tree_k * s / t.out_bw("simple"), 0.0)),
        )
        cands["nvls"] = _where(g > 2, nvls, _INF)
    hier = []
    for p in PROTOCOLS:
        per_rank_out, shard = t.out_bw(p) / g, s / g
        inter = minimum(
            [
                2 * (dom - 1) * t.out_lat(p) + 2 * (dom - 1) / dom * shard / per_rank_out,
                _pipe(2 * depth * t.out_lat(p), 2 * depth * t.out_stage(p), tree_k * shard / per_rank_out),
            ]
        )
        intra = (g - 1) * t.up_lat(p) + (g - 1) / g * s / t.up_bw(p)
        hier.append(2 * intra + _where(across, inter, 0.0))
    cands["hierarchical"] = _best(hier)
    return {k: _where(n > 1, v, 0.0) for k, v in cands.items()}


def all_gather(t: Tiers) -> dict[str, Num]:
    """Ring over all ranks; the same cost for reduce-scatter (nccl-tests sizes: output / input buffer)."""
    n, dom, s = t.n, t.domains, t.s
    ring = _best([_steps_latency(t, p, n - 1, dom - 1) + (n - 1) / n * s / _ring_bw(t, p) for p in PROTOCOLS])
    return {"ring": _where(n > 1, ring, 0.0)}


def all_to_all(t: Tiers) -> dict[str, Num]:
    """Bytes that stay in the domain go over NVLink, the fraction (n-g)/n that leaves it over the domain's
    network links, in parallel; one start-up latency per tier (NCCL posts all n-1 sends of a grouped
    all-to-all at once)."""
    n, g, dom, s = t.n, t.g, t.domains, t.s
    t_up = _where(g > 1, (g - 1) / n * s / t.up_bw("simple"), 0.0)
    t_out = _where(dom > 1, g * (n - g) / n * s / t.out_bw("simple"), 0.0)
    lat = _where(g > 1, t.up_lat("simple"), 0.0) + _where(dom > 1, t.out_lat("simple"), 0.0)
    return {"ring": _where(n > 1, lat + _maximum(t_up, t_out), 0.0)}


def broadcast(t: Tiers) -> dict[str, Num]:
    """Pipelined chain through the ranks (NCCL ring broadcast): n-N NVLink hops, N-1 network hops."""
    n, dom, s = t.n, t.domains, t.s
    ring = _best(
        [
            _pipe(
                _steps_latency(t, p, n - 1, dom - 1),
                (n - dom) * t.up_stage(p) + (dom - 1) * t.out_stage(p),
                s / _ring_bw(t, p),
            )
            for p in PROTOCOLS
        ]
    )
    return {"ring": _where(n > 1, ring, 0.0)}


def send_recv(t: Tiers) -> dict[str, Num]:
    """Each rank sends S to its peer: over NVLink inside a domain, else over its own NICs."""
    res = []
    for p in PROTOCOLS:
        inside = t.up_lat(p) + t.s / t.up_bw(p)
        across = t.out_lat(p) + t.s / (t.out_bw(p) / t.g)
        res.append(_where(t.domains > 1, across, inside))
    return {"ring": _where(t.n > 1, _best(res), 0.0)}


BUILDERS: dict[str, Callable[[Tiers], dict[str, Num]]] = {
    "all_reduce": all_reduce,
    "all_gather": all_gather,
    "reduce_scatter": all_gather,
    "all_to_all": all_to_all,
    "broadcast": broadcast,
    "send_recv": send_recv,
}
