"""Where a disaggregated split's replicas sit, and which link each prefill -> decode pair moves its KV cache over.

The plan prices a split on ``ceil((P x prefill GPUs + D x decode GPUs) / gpus_per_node)`` whole nodes
(:func:`fmstack.perfmodel.inference_plan_candidate.split_nodes`); :func:`place_split` packs the replicas onto those
nodes as an operator of NVIDIA Dynamo or SGLang PD would lay them out, deterministically:

1. decode replicas first, spread over the NVLink domains (decode replica ``k`` to domain ``k mod domains``, the
   first node there with room), so that each domain's prefill replicas find a decode replica beside them;
2. then the prefill replicas, first fit in node order (the domains holding decode replicas come first);
3. a replica larger than a node takes whole consecutive free nodes (TP / PP across nodes), inside one domain where
   a run of free nodes there allows it;
4. where the spread leaves no room for a replica in the paid nodes (a decode replica smaller than a prefill replica
   can split a node's room: 2 decode tp 2 + 3 prefill tp 4 on two 8-GPU nodes), the whole split is packed again
   largest replica first, first fit (no spread), which fills the nodes without gaps when the sizes divide one
   another (powers of two); a layout that still does not fit takes one more node (the links only; the cost stays
   the plan's).

A pair shares an NVLink domain when both replicas lie wholly in one domain (a p5 node; an UltraServer's 72 GPUs on
p6e-gb200: 18 nodes of 4 GPUs, so a split of at most 18 such nodes is all NVLink); every other pair moves its KV over
the scale-out fabric (EFA / IB). :func:`kv_pair_times` prices both links once with
:func:`fmstack.perfmodel.inference_disagg.kv_transfer_s` (through ``kv_move``) and gives the (P, D) pair times the
split simulations take (:class:`~fmstack.perfmodel.inference_kv_pairs.PairTimes`: each replica's domain, no matrix).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fmstack.catalog.schema import ModelArch
from fmstack.catalog.topology import Cluster
from fmstack.errors import InputError
from fmstack.perfmodel.inference import ServeConfig
from fmstack.perfmodel.inference_disagg import kv_move
from fmstack.perfmodel.inference_kv_pairs import PairTimes
from fmstack.perfmodel.inference_step import Deployment


@dataclass(frozen=True, kw_only=True, slots=True)
class SplitPlacement:
    """The nodes and NVLink domains of a split's replicas (replica ``i`` of a pool: ``i``-th entry)."""

    nodes: int
    """Nodes the layout uses (the plan's whole nodes; one more only where they do not hold it)."""
    prefill_nodes: tuple[tuple[int, ...], ...]
    decode_nodes: tuple[tuple[int, ...], ...]
    prefill_domain: tuple[int | None, ...]
    """NVLink domain of each prefill replica (None: it spans domains)."""
    decode_domain: tuple[int | None, ...]

    def pair_times(self, near_s: float, far_s: float) -> PairTimes:
        """Each pair's seconds: ``near_s`` in one NVLink domain, else ``far_s``."""
        return PairTimes(near_s, far_s, self.prefill_domain, self.decode_domain)

    def same_domain(self, p: int, r: int) -> bool:
        """Whether prefill replica ``p`` and decode replica ``r`` lie in one NVLink domain."""
        return self.pair_times(0.0, 0.0).near(p, r)

    @property
    def nvlink_pairs_share(self) -> float:
        """Share of the ``P x D`` pairs that lie in one NVLink domain."""
        pairs = self.pair_times(0.0, 0.0)
        return pairs.near_pairs() / (pairs.shape[0] * pairs.shape[1])


def _fits(
    free: list[int], size: int, gpn: int, npd: int, domain: int | None, first: dict[int, int] | None = None
) -> tuple[int, ...] | None:
    """The nodes a replica of ``size`` GPUs takes (first fit; in ``domain`` when given), or None. ``first``: for a
    fit in any domain, the lowest node a replica of each size could still start at (nodes only lose room, so a node
    that once had too little never fits that size again); it turns the first fit of ``R`` replicas on ``N`` nodes
    from ``R x N`` steps into ``R + N``."""
    n_nodes = len(free)
    lo = 0 if first is None or domain is not None else first.get(size, 0)
    span = range(lo, n_nodes) if domain is None else range(domain * npd, min(n_nodes, (domain + 1) * npd))
    got: tuple[int, ...] | None = None
    if size <= gpn:
        got = next(((n,) for n in span if free[n] >= size), None)
    else:
        k = math.ceil(size / gpn)
        for n in span:
            run = tuple(range(n, n + k))
            if run[-1] < n_nodes and all(free[m] == gpn for m in run) and (domain is None or run[-1] in span):
                got = run
                break
    if first is not None and domain is None:
        first[size] = n_nodes if got is None else got[0]
    return got


def _take(free: list[int], nodes: tuple[int, ...], size: int, gpn: int) -> None:
    for n in nodes:
        free[n] -= size if size <= gpn else gpn


def _pack(sizes: list[tuple[int, int]], nodes: int, gpn: int, npd: int, spread: int) -> list[tuple[int, ...]] | None:
    """Nodes of each ``(size, spread?)`` replica in order: the first ``spread`` ones to domain ``k mod domains``
    first, the rest first fit; None when one does not fit."""
    free = [gpn] * nodes
    domains = -(-nodes // npd)
    out: list[tuple[int, ...]] = []
    first: dict[int, int] = {}
    for k, (size, _) in enumerate(sizes):
        got = _fits(free, size, gpn, npd, k % domains) if k < spread else None
        got = got or _fits(free, size, gpn, npd, None, first)
        if got is None:
            return None
        _take(free, got, size, gpn)
        out.append(got)
    return out


def place_split(
    prefill: int, decode: int, prefill_gpus: int, decode_gpus: int, gpus_per_node: int, nodes_per_domain: int = 1
) -> SplitPlacement:
    """The module's packing of ``prefill`` replicas of ``prefill_gpus`` GPUs and ``decode`` of ``decode_gpus`` onto
    whole nodes of ``gpus_per_node`` GPUs, ``nodes_per_domain`` nodes to an NVLink domain (consecutive nodes)."""
    if prefill < 1 or decode < 1 or prefill_gpus < 1 or decode_gpus < 1 or gpus_per_node < 1 or nodes_per_domain < 1:
        raise InputError("disagg", f"cannot place {prefill}:{decode} replicas of {prefill_gpus}/{decode_gpus} GPUs")
    nodes = math.ceil((prefill * prefill_gpus + decode * decode_gpus) / gpus_per_node)
    spread = [(decode_gpus, 1)] * decode + [(prefill_gpus, 0)] * prefill
    order = list(range(decode + prefill))
    got = _pack(spread, nodes, gpus_per_node, nodes_per_domain, decode)
    if got is None:  # largest first (decode first at equal size), no spread
        order = sorted(order, key=lambda i: -spread[i][0])
        while (got := _pack([spread[i] for i in order], nodes, gpus_per_node, nodes_per_domain, 0)) is None:
            nodes += 1
    at = dict(zip(order, got, strict=True))
    dec = tuple(at[i] for i in range(decode))
    pre = tuple(at[decode + i] for i in range(prefill))

    def dom(ns: tuple[int, ...]) -> int | None:
        ds = {n // nodes_per_domain for n in ns}
        return ds.pop() if len(ds) == 1 else None

    return SplitPlacement(nodes=nodes, prefill_nodes=pre, decode_nodes=dec,
                          prefill_domain=tuple(dom(n) for n in pre), decode_domain=tuple(dom(n) for n in dec))  # fmt: skip


@dataclass(frozen=True, kw_only=True, slots=True)
class KvPairs:
    """The KV transfer of every (prefill, decode) pair of a placed split."""

    kv_bytes: float
    """One prompt's KV cache."""
    pair_s: PairTimes
    """Seconds to move it from prefill replica ``p`` to decode replica ``r``: ``pair_s.at(p, r)``."""
    by_link: dict[str, float]
    """Seconds per link the placement uses (NVLink and / or the scale-out fabric)."""
    best_s: float
    """The fastest link a pair of one prefill and one decode replica could have (NVLink when both fit one domain):
    the mean-field figure (``kv_move``), the plan row's ``kv_transfer_s``."""
    best_link: str
    nvlink_pairs_share: float
    """Share of the ``P x D`` pairs whose KV moves over NVLink."""
    placement: SplitPlacement


def kv_pair_times(
    model: ModelArch, cluster: Cluster, cfg: ServeConfig, d: Deployment, decode: Deployment | None,
    prefill_replicas: int, decode_replicas: int, gpus_per_node: int, nodes_per_domain: int,
) -> KvPairs:  # fmt: skip
    """:func:`place_split` of the pools and each pair's transfer time, priced on ``cluster`` (the nodes of one
    prefill and one decode replica, as ``kv_move`` prices it) over NVLink for a pair in one domain, else over the
    scale-out fabric."""
    dd = d if decode is None else decode
    place = place_split(prefill_replicas, decode_replicas, d.num_gpus, dd.num_gpus, gpus_per_node, nodes_per_domain)
    kv_bytes, best_s, best_link, can_share = kv_move(model, cluster, cfg, d, decode)
    _, far_s, far_link, _ = kv_move(model, cluster, cfg, d, decode, same_domain=False)
    near_s = best_s if can_share else far_s
    pairs = place.pair_times(near_s, far_s)
    near = pairs.near_pairs() if can_share else 0
    links = [(best_link, best_s)] * bool(near) + [(far_link, far_s)] * (near < prefill_replicas * decode_replicas)
    by_link = dict(links if can_share and pairs.near(0, 0) else links[::-1])  # in the order pair (0, 0) first
    return KvPairs(kv_bytes=kv_bytes, pair_s=pairs, by_link=by_link, best_s=best_s, best_link=best_link,
                   nvlink_pairs_share=near / (prefill_replicas * decode_replicas), placement=place)  # fmt: skip
