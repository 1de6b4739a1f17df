"""Topology-aware placement: Kueue TAS BestFit / LeastFreeCapacity / balanced, KAI domain bin-packing, and
Slurm topology/block (smallest block level that fits, best fit inside it).

Sources: kubernetes-sigs/kueue keps/2724-topology-aware-scheduling/README.md (BestFit: largest domains first,
the last domain the tightest fit; LeastFreeCapacity: least free first; balanced: as few domains as possible,
evenly filled); NVIDIA/KAI-Scheduler docs/topology/README.md (pick the feasible domain with the least free
capacity, then fill its sub-domains with the most free first); Slurm doc/man/man5/topology.conf.5 and
doc/html/topology.shtml (block: smallest block level that can satisfy the job; best fit inside).
All functions return how many units to take from each domain, by domain index.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def best_fit(free: Sequence[int], need: int) -> dict[int, int] | None:
    """Kueue BestFit: take the largest domains first; the last one is the tightest domain that fits the rest."""
    if need <= 0:
        return {}
    if sum(free) < need:
        return None
    order = sorted(range(len(free)), key=lambda i: (-free[i], i))
    take: dict[int, int] = {}
    left = need
    for pos, i in enumerate(order):
        rest = [j for j in order[pos:] if free[j] >= left]
        if rest:
            tight = min(rest, key=lambda j: (free[j], j))
            take[tight] = left
            return take
        take[i] = free[i]
        left -= free[i]
    return None


def least_free_capacity(free: Sequence[int], need: int) -> dict[int, int] | None:
    """Kueue LeastFreeCapacity: fill domains from the least free upwards."""
    if sum(free) < need:
        return None
    take: dict[int, int] = {}
    left = need
    for i in sorted(range(len(free)), key=lambda i: (free[i], i)):
        if left == 0:
            break
        if free[i] == 0:
            continue
        n = min(free[i], left)
        take[i] = n
        left -= n
    return take


def balanced(free: Sequence[int], need: int) -> dict[int, int] | None:
    """Balanced placement: the fewest domains that hold ``need`` (largest first), filled as evenly as possible."""
    if sum(free) < need:
        return None
    order = sorted(range(len(free)), key=lambda i: (-free[i], i))
    k, acc = 0, 0
    while acc < need:
        acc += free[order[k]]
        k += 1
    chosen = sorted(order[:k], key=lambda i: (free[i], i))
    take: dict[int, int] = {}
    left = need
    for pos, i in enumerate(chosen):
        share = -(-left // (k - pos))
        n = min(free[i], share)
        take[i] = n
        left -= n
    return take


def kai_place(zones: Mapping[str, Sequence[int]], pods: int) -> tuple[str, dict[int, int]] | None:
    """KAI: required zone, preferred rack. Bin-pack the zone (least free that fits), spread to racks most free."""
    feasible = [(sum(r), z) for z, r in zones.items() if sum(r) >= pods]
    if not feasible:
        return None
    _, zone = min(feasible)
    racks = zones[zone]
    take: dict[int, int] = {}
    left = pods
    for i in sorted(range(len(racks)), key=lambda i: (-racks[i], i)):
        if left == 0:
            break
        n = min(racks[i], left)
        if n:
            take[i] = n
            left -= n
    return zone, take


def block_place(idle_per_leaf: Sequence[int], leaves_per_spine: int, nodes: int) -> dict[int, int] | None:
    """Slurm topology/block for whole nodes: one leaf if any fits (the tightest), else one spine block
    (BestFit over its leaves), else BestFit over all leaves. Returns nodes per leaf index."""
    fits = [i for i, n in enumerate(idle_per_leaf) if n >= nodes]
    if fits:
        leaf = min(fits, key=lambda i: (idle_per_leaf[i], i))
        return {leaf: nodes}
    num_spines = -(-len(idle_per_leaf) // leaves_per_spine)
    best: tuple[int, int] | None = None
    for s in range(num_spines):
        idle = sum(idle_per_leaf[s * leaves_per_spine : (s + 1) * leaves_per_spine])
        if idle >= nodes and (best is None or idle < best[0]):
            best = (idle, s)
    if best is not None:
        lo = best[1] * leaves_per_spine
        got = best_fit(idle_per_leaf[lo : lo + leaves_per_spine], nodes)
        return None if got is None else {lo + i: n for i, n in got.items()}
    return best_fit(idle_per_leaf, nodes)
