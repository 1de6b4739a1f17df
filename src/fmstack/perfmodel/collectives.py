"""Alpha-beta cost model of NCCL collectives on NVLink domains and scale-out fabrics.

Every time is ``latency + bytes / bandwidth`` (Hockney's alpha-beta model; Thakur, Rabenseifner and Gropp,
"Optimization of Collective Communication Operations in MPICH", IJHPCA 2005, sec. 4). Sizes are the
nccl-tests buffer sizes (nccl-tests ``doc/PERFORMANCE.md``): the whole buffer for all-reduce and broadcast,
the whole output of all-gather, the whole input of reduce-scatter, the whole send buffer of all-to-all.
Bandwidths are GB/s (1e9 bytes/s); latencies are seconds. Every function takes NumPy arrays of sizes and
group sizes as well as floats (the planner evaluates millions of configurations at once). docs/collectives.md
lists each formula with its source.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from fmstack.errors import InputError
from fmstack.perfmodel.collectives_algos import BUILDERS, make_tiers
from fmstack.perfmodel.num import Num, minimum

if TYPE_CHECKING:
    from fmstack.catalog.topology import Cluster

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.integer[Any]]
Real = float | int | npt.ArrayLike
Time = float | FloatArray

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv")
ALGORITHMS = ("auto", "ring", "tree", "nvls", "hierarchical")

BUSBW_FACTOR_DOC = "nccl-tests doc/PERFORMANCE.md: busbw = algbw * factor(n)"


def _f(x: Real) -> FloatArray:
    return np.asarray(x, dtype=np.float64)


def _out(x: FloatArray | float) -> Time:
    return float(x) if isinstance(x, float) or x.ndim == 0 else x


def _bw_bytes_per_s(bw_gbps: Real) -> FloatArray:
    return _f(bw_gbps) * 1e9


def ring_all_reduce_time_s(size_bytes: Real, n: Real, bw_gbps: Real, latency_s: Real) -> Time:
    """Ring all-reduce: ``2(n-1) alpha + 2(n-1)/n * S / B`` (Thakur et al. 2005 sec. 4; Patarasuk and
    Yuan 2009). ``B`` is the per-rank link bandwidth the ring runs at; n = 1 costs nothing."""
    s, k = _f(size_bytes), _f(n)
    t = 2 * (k - 1) * _f(latency_s) + 2 * (k - 1) / k * s / _bw_bytes_per_s(bw_gbps)
    return _out(np.where(k > 1, t, 0.0))


def ring_all_gather_time_s(size_bytes: Real, n: Real, bw_gbps: Real, latency_s: Real) -> Time:
    """Ring all-gather of an ``S``-byte output: ``(n-1) alpha + (n-1)/n * S / B`` (Thakur et al. 2005 sec. 4)."""
    s, k = _f(size_bytes), _f(n)
    t = (k - 1) * _f(latency_s) + (k - 1) / k * s / _bw_bytes_per_s(bw_gbps)
    return _out(np.where(k > 1, t, 0.0))


def ring_reduce_scatter_time_s(size_bytes: Real, n: Real, bw_gbps: Real, latency_s: Real) -> Time:
    """Ring reduce-scatter of an ``S``-byte input: same cost as the ring all-gather (Thakur et al. 2005 sec. 4)."""
    return ring_all_gather_time_s(size_bytes, n, bw_gbps, latency_s)


def pipelined_time_s(latency_s: Real, fill_s: Real, transfer_s: Real) -> Time:
    """A pipelined algorithm with the best chunk size: ``latency + (sqrt(fill) + sqrt(transfer))^2``.

    Moving S bytes through k pipeline stages in chunks of c bytes costs ``(k - 1 + S/c) (o + c/B)``; the
    optimal c = sqrt(S o B / (k - 1)) gives ``(sqrt((k-1) o) + sqrt(S/B))^2`` (Johnsson and Ho 1989,
    "Optimum broadcasting and personalized communication in hypercubes", IEEE TC 38(9): optimal packet size
    of a pipelined broadcast). ``fill = (k-1) o`` is the sum of the stages'
    per-chunk overheads and ``transfer = S/B``. NCCL shrinks its chunks for mid-size messages in the same
    spirit (``src/enqueue.cc``: NVLS and NVLS-tree chunk sizes halve while nBytes < k * concurrentOps * chunk).
    """
    return _out(_f(latency_s) + (np.sqrt(_f(fill_s)) + np.sqrt(_f(transfer_s))) ** 2)


def tree_all_reduce_time_s(size_bytes: Real, n: Real, bw_gbps: Real, latency_s: Real, *, stage_s: Real = 0.0) -> Time:
    """NCCL double binary tree all-reduce, pipelined: ``2 ceil(log2 n) alpha + k S / B`` (stage_s = 0).

    Each of the two trees carries half the buffer up (reduce) and down (broadcast); a rank that is an inner
    node of one tree and a leaf of the other moves 2S each way, so k = 2 (NCCL ``src/graph/tuning.cc``: tree
    algbw = busbw / 2). With two ranks each rank is the root of one tree and the leaf of the other: k = 1.
    Latency is logarithmic (Sanders, Speck and Traeff 2009, "Two-tree algorithms for full bandwidth
    broadcast, reduction and scan"; NVIDIA blog "Massively Scale Your Deep Learning Training with NCCL 2.4").
    With ``stage_s`` > 0 the 2 ceil(log2 n) stages also fill the pipeline (:func:`pipelined_time_s`).
    """
    s, k = _f(size_bytes), _f(n)
    depth = np.ceil(np.log2(np.maximum(k, 1.0)))
    factor = np.where(k <= 2, 1.0, 2.0)
    t = _f(pipelined_time_s(2 * depth * _f(latency_s), 2 * depth * _f(stage_s), factor * s / _bw_bytes_per_s(bw_gbps)))
    return _out(np.where(k > 1, t, 0.0))


def nvls_all_reduce_time_s(
    size_bytes: Real, n: Real, bw_gbps: Real, latency_s: Real, speedup: Real, *, stage_s: Real = 0.0
) -> Time:
    """NVLink SHARP all-reduce (reduction in the NVSwitch): ``alpha_nvls + 2(n-1)/n * S / (B * speedup)``.

    Expressed, as NVIDIA does, as a bus-bandwidth gain over the ring on the same links: nccl-tests issue 212
    (maintainer: ~480 GB/s NVLS busbw vs ~370 GB/s ring on H100) = COL-030, COL-031. Two pipeline stages
    (multimem load-reduce, multimem store) fill with ``stage_s`` each (:func:`pipelined_time_s`).
    """
    s, k = _f(size_bytes), _f(n)
    transfer = 2 * (k - 1) / k * s / (_bw_bytes_per_s(bw_gbps) * _f(speedup))
    t = _f(pipelined_time_s(latency_s, 2 * _f(stage_s), transfer))
    return _out(np.where(k > 1, t, 0.0))


def all_to_all_time_s(size_bytes: Real, n: Real, bw_gbps: Real, latency_s: Real) -> Time:
    """Pairwise all-to-all of an ``S``-byte send buffer: ``(n-1) alpha + (n-1)/n * S / B`` (Thakur et al.
    2005 sec. 4): each rank keeps S/n and sends S/n to each of the n-1 others."""
    return ring_all_gather_time_s(size_bytes, n, bw_gbps, latency_s)


def broadcast_time_s(size_bytes: Real, n: Real, bw_gbps: Real, latency_s: Real) -> Time:
    """Pipelined chain (NCCL ring) broadcast: ``(n-1) alpha + S / B`` (nccl-tests busbw factor 1)."""
    s, k = _f(size_bytes), _f(n)
    t = (k - 1) * _f(latency_s) + s / _bw_bytes_per_s(bw_gbps)
    return _out(np.where(k > 1, t, 0.0))


def send_recv_time_s(size_bytes: Real, bw_gbps: Real, latency_s: Real) -> Time:
    """Point-to-point: ``alpha + S / B``."""
    return _out(_f(latency_s) + _f(size_bytes) / _bw_bytes_per_s(bw_gbps))


def busbw_factor(op: str, n: Real) -> Time:
    """nccl-tests' bus-bandwidth factor: 2(n-1)/n all-reduce; (n-1)/n all-gather, reduce-scatter,
    all-to-all; 1 broadcast, reduce, send/recv (nccl-tests doc/PERFORMANCE.md)."""
    k = _f(n)
    if op == "all_reduce":
        return _out(2 * (k - 1) / k)
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return _out((k - 1) / k)
    if op in ("broadcast", "reduce", "send_recv"):
        return _out(np.ones_like(k))
    raise InputError("op", f"unknown collective {op!r}; allowed: {', '.join((*OPS, 'reduce'))}")


def algbw_gbps(size_bytes: Real, time_s: Real) -> Time:
    """nccl-tests algorithm bandwidth: ``algbw = S / t`` in GB/s (doc/PERFORMANCE.md)."""
    return _out(_f(size_bytes) / _f(time_s) / 1e9)


def busbw_gbps(op: str, size_bytes: Real, time_s: Real, n: Real) -> Time:
    """nccl-tests bus bandwidth: ``busbw = algbw * factor(op, n)`` in GB/s (doc/PERFORMANCE.md)."""
    return _out(_f(algbw_gbps(size_bytes, time_s)) * _f(busbw_factor(op, n)))


@dataclass(frozen=True, kw_only=True, slots=True)
class GroupPlacement:
    """Where a communicator's ranks sit: how many in all, and how many share one NVLink domain."""

    num_ranks: int | IntArray
    """Ranks in the group (an integer array evaluates many groups at once)."""
    ranks_per_domain: int | IntArray
    """Ranks of the group inside one NVLink domain: 8 for TP in a p5 node, 1 for DP one rank per node."""

    def __post_init__(self) -> None:
        n, g = self.num_ranks, self.ranks_per_domain
        # one valid group: plain checks (np.any costs ~2 us a call); anything else is checked below
        if isinstance(n, int) and isinstance(g, int) and n >= 1 and 1 <= g <= n and n % g == 0:
            return
        n, g = np.asarray(n), np.asarray(g)
        if np.any(n < 1):
            raise InputError("num_ranks", f"must be >= 1, got {self.num_ranks}")
        if np.any(g < 1) or np.any(g > n):
            raise InputError(
                "ranks_per_domain", f"must be between 1 and num_ranks({self.num_ranks}), got {self.ranks_per_domain}"
            )
        if np.any(n % g):
            raise InputError(
                "ranks_per_domain",
                f"num_ranks({self.num_ranks}) must be a multiple of ranks_per_domain({self.ranks_per_domain})",
            )


def _inputs(size_bytes: Real, placement: GroupPlacement) -> tuple[Num, Num, Num]:
    """Floats when every input is a scalar (the fast path), else float arrays that broadcast."""
    s, n, g = _f(size_bytes), _f(placement.num_ranks), _f(placement.ranks_per_domain)
    if s.ndim == 0 and n.ndim == 0 and g.ndim == 0:
        return float(s), float(n), float(g)
    return s, n, g


def algorithm_times_s(op: str, size_bytes: Real, placement: GroupPlacement, cluster: Cluster) -> dict[str, Time]:
    """Time of each algorithm NCCL could run for ``op`` (each already the best of its protocols)."""
    if op not in BUILDERS:
        raise InputError("op", f"unknown collective {op!r}; allowed: {', '.join(OPS)}")
    s, n, g = _inputs(size_bytes, placement)
    cands = BUILDERS[op](make_tiers(s, n, g, cluster))
    if isinstance(s, float):
        return {k: _out(v) for k, v in cands.items()}
    shape = np.broadcast_shapes(np.shape(s), np.shape(n), np.shape(g))
    return {k: np.broadcast_to(np.asarray(v, dtype=np.float64), shape).copy() for k, v in cands.items()}


def collective_time_s(
    op: str, size_bytes: Real, placement: GroupPlacement, cluster: Cluster, *, algorithm: str = "auto"
) -> Time:
    """Time of one collective of ``size_bytes`` (nccl-tests buffer size) on ``placement`` in ``cluster``.

    ``algorithm="auto"`` takes the fastest candidate, as NCCL's tuner does (ring, tree, NVLS or NVLS-tree,
    each with the Simple or LL protocol; all-reduce also a hierarchical reduce-scatter / inter-domain
    all-reduce / all-gather). The other ops have one algorithm, named "ring".
    """
    if algorithm not in ALGORITHMS:
        raise InputError("algorithm", f"unknown algorithm {algorithm!r}; allowed: {', '.join(ALGORITHMS)}")
    cands = algorithm_times_s(op, size_bytes, placement, cluster)
    if algorithm == "auto":
        return _out(minimum(list(cands.values())))
    if algorithm not in cands:
        raise InputError("algorithm", f"{op} on {cluster.instance.name} supports: auto, {', '.join(cands)}")
    return cands[algorithm]


def best_algorithm(op: str, size_bytes: float, placement: GroupPlacement, cluster: Cluster) -> str:
    """Name of the algorithm ``auto`` picks for one (scalar) case."""
    cands = algorithm_times_s(op, size_bytes, placement, cluster)
    return min(cands, key=lambda k: float(np.min(cands[k])))
