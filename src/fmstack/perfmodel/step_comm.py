"""Where a parallel group's ranks sit and what its collective costs, per configuration row of the step model.

:func:`placement_per_domain` turns a group (size, rank stride in the node-major order tp -> cp -> dp -> pp) into
the ranks that share one NVLink domain; :func:`comm` prices one collective on that placement with
:func:`fmstack.perfmodel.collectives.collective_time_s`, for an array of rows or one row of floats (the plain-float
path avoids NumPy's per-call overhead, which would dominate one estimate).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from fmstack.catalog.topology import Cluster
from fmstack.perfmodel.collectives import GroupPlacement, collective_time_s
from fmstack.perfmodel.num import Num, floor, maximum


def placement_per_domain(size: Num, stride: Num, gpus_per_domain: float) -> Num:
    """Ranks of a group (``stride`` apart in the node-major rank order) that share one NVLink domain: the
    largest divisor of the group size that fits in the domain (computed once per distinct pair)."""
    cap = maximum(floor(gpus_per_domain / stride), 1.0)
    if isinstance(size, float) and isinstance(cap, float):
        return float(_largest_divisor_at_most(int(size), int(cap)))
    size, cap = np.asarray(size, dtype=np.float64), np.asarray(cap, dtype=np.float64)
    if size.shape[0] <= 8:  # one or a few rows: plain Python is faster than np.unique
        return np.array(
            [_largest_divisor_at_most(int(n), int(c)) for n, c in zip(size, cap, strict=True)], dtype=np.float64
        )
    # one int64 key per (size, cap) pair: a 1-D np.unique sorts plain integers, several times faster than
    # np.unique(axis=0) over row pairs (which dominated a large MoE search)
    sizes = size.astype(np.int64)
    caps = np.minimum(cap, size).astype(np.int64)
    stride = int(caps.max()) + 1
    unique, inverse = np.unique(sizes * stride + caps, return_inverse=True)
    best = np.array([_largest_divisor_at_most(int(k // stride), int(k % stride)) for k in unique], dtype=np.float64)
    out: NDArray[np.float64] = best[inverse.reshape(-1)]
    return out


def _largest_divisor_at_most(n: int, cap: int) -> int:
    for d in range(min(n, cap), 0, -1):
        if n % d == 0:
            return d
    return 1


def comm(op: str, size_bytes: Num, ranks: Num, per_domain: Num, cluster: Cluster) -> Num:
    """Seconds of one ``op`` of ``size_bytes`` (nccl-tests size) over ``ranks`` with ``per_domain`` of them per
    NVLink domain; 0 where the group has one rank or nothing to send."""
    if isinstance(ranks, float) and isinstance(size_bytes, float) and isinstance(per_domain, float):
        return _comm_one(op, size_bytes, ranks, per_domain, cluster)
    shape = np.broadcast_shapes(np.shape(ranks), np.shape(size_bytes))
    if np.size(ranks) == 1 and np.size(size_bytes) == 1 and np.size(per_domain) == 1:
        # one row: the collectives' plain-float path gives the same numbers without NumPy's per-call overhead
        one = _comm_one(
            op, float(np.ravel(size_bytes)[0]), float(np.ravel(ranks)[0]), float(np.ravel(per_domain)[0]), cluster
        )
        return np.full(shape, one)
    if not np.any(ranks > 1) or not np.any(size_bytes > 0):
        return np.zeros(shape)
    out = collective_time_s(op, size_bytes, GroupPlacement(num_ranks=ranks, ranks_per_domain=per_domain), cluster)  # type: ignore[arg-type]
    return np.where(ranks > 1, np.asarray(out, dtype=np.float64), 0.0)


def _comm_one(op: str, size_bytes: float, ranks: float, per_domain: float, cluster: Cluster) -> float:
    n = int(ranks)
    if n <= 1 or size_bytes <= 0:
        return 0.0
    one = GroupPlacement(num_ranks=n, ranks_per_domain=int(per_domain))
    return float(collective_time_s(op, size_bytes, one, cluster))
