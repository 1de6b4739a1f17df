"""The fleet: nodes of one instance type from the catalog topology, in NVLink domains under leaf and spine
switches, with node states and spare nodes.

A node is UP (idle or allocated, by its free GPUs), DRAINING (planned maintenance pending), DOWN (failed, not yet
handled), REBOOTING, REPLACING, RESETTING (a GPU reset), or SPARE (standby, outside the schedulable pool, as
SageMaker HyperPod's spare capacity). Placement: a multi-node job takes whole nodes by Slurm topology/block
(:func:`fmstack.orchestration.policies.placement.block_place`); a job of at most one node takes the best-fitting
partly used node, else an idle node from the leaf with the fewest idle nodes (keeps large blocks free).
"""

from __future__ import annotations

import enum

from fmstack.catalog.topology import Cluster
from fmstack.orchestration.policies.placement import block_place


class NodeState(enum.IntEnum):
    UP = 0
    DRAINING = 1
    DOWN = 2
    RESETTING = 3
    REBOOTING = 4
    REPLACING = 5
    SPARE = 6


OUT_OF_SERVICE = frozenset({NodeState.DOWN, NodeState.RESETTING, NodeState.REBOOTING, NodeState.REPLACING})
"""States of a node that is neither schedulable (UP, DRAINING) nor a spare on standby."""
_IN_SERVICE = (NodeState.UP, NodeState.DRAINING)

Alloc = list[tuple[int, int]]
"""(node, GPUs) pairs of one job."""


class Fleet:
    """Node states and free GPUs, with the indexes placement needs."""

    def __init__(self, cluster: Cluster, spares: int = 0) -> None:
        self.cluster = cluster
        self.gpn = cluster.gpus_per_node
        self.nodes_per_leaf = cluster.nodes_per_leaf
        self.leaves_per_spine = cluster.leaves_per_spine
        self.pool_nodes = cluster.num_nodes
        total = cluster.num_nodes + spares
        self.num_leaves = -(-total // self.nodes_per_leaf)
        self.state = [NodeState.UP] * cluster.num_nodes + [NodeState.SPARE] * spares
        self.free = [self.gpn] * cluster.num_nodes + [0] * spares
        self.idle_by_leaf: list[set[int]] = [set() for _ in range(self.num_leaves)]
        self.idle_count = [0] * self.num_leaves
        self.partial: list[set[int]] = [set() for _ in range(self.gpn)]
        self.spares: list[int] = list(range(cluster.num_nodes, total))
        self.allocated_gpus = 0
        self.schedulable_gpus = cluster.num_nodes * self.gpn
        self.out_nodes = 0
        """Nodes in an :data:`OUT_OF_SERVICE` state."""
        self.out_held_gpus = 0
        """GPUs jobs still hold on out-of-service nodes (a failed node's jobs hold it until the failure is detected)."""
        self.version = 0
        """Changes with every change of a node's free GPUs or state (a placement that failed fails again until)."""
        for n in range(cluster.num_nodes):
            self._index(n)

    @property
    def total_gpus(self) -> int:
        return self.pool_nodes * self.gpn

    def leaf(self, node: int) -> int:
        return node // self.nodes_per_leaf

    def _unindex(self, n: int) -> None:
        f = self.free[n]
        if f == self.gpn:
            lf = self.leaf(n)
            self.idle_by_leaf[lf].discard(n)
            self.idle_count[lf] = len(self.idle_by_leaf[lf])
        elif f > 0:
            self.partial[f].discard(n)

    def _index(self, n: int) -> None:
        if self.state[n] != NodeState.UP:
            return
        f = self.free[n]
        if f == self.gpn:
            lf = self.leaf(n)
            self.idle_by_leaf[lf].add(n)
            self.idle_count[lf] = len(self.idle_by_leaf[lf])
        elif f > 0:
            self.partial[f].add(n)

    def place(self, num_gpus: int) -> Alloc | None:
        """Whole-job placement or None (gang: all or nothing)."""
        if num_gpus <= self.gpn:
            for f in range(num_gpus, self.gpn):
                if self.partial[f]:
                    return self._take([(min(self.partial[f]), num_gpus)])
            leaves = [(c, lf) for lf, c in enumerate(self.idle_count) if c > 0]
            if not leaves:
                return None
            _, lf = min(leaves)
            return self._take([(min(self.idle_by_leaf[lf]), num_gpus)])
        nodes = -(-num_gpus // self.gpn)
        if sum(self.idle_count) < nodes:
            return None
        per_leaf = block_place(self.idle_count, self.leaves_per_spine, nodes)
        if per_leaf is None:
            return None
        alloc: Alloc = []
        for lf in sorted(per_leaf):
            alloc += [(n, self.gpn) for n in sorted(self.idle_by_leaf[lf])[: per_leaf[lf]]]
        return self._take(alloc)

    def place_on(self, node: int, gpus: int) -> tuple[int, int]:
        """Take ``gpus`` on one given UP node (a spare swapped into a job)."""
        if self.state[node] != NodeState.UP or self.free[node] < gpus:
            raise ValueError(f"node {node} cannot take {gpus} GPUs (state {self.state[node].name})")
        self._take([(node, gpus)])
        return node, gpus

    def take(self, alloc: Alloc) -> Alloc:
        """Take exactly ``alloc`` (GPUs that are free on those nodes), e.g. to undo a trial release."""
        return self._take(alloc)

    def _take(self, alloc: Alloc) -> Alloc:
        self._add(alloc, -1)
        return alloc

    def release(self, alloc: Alloc) -> None:
        self._add(alloc, 1)

    def _add(self, alloc: Alloc, sign: int) -> None:
        """Free GPUs of each node += sign x its GPUs in ``alloc``; as _unindex, change, _index per node."""
        free, state, gpn, per_leaf = self.free, self.state, self.gpn, self.nodes_per_leaf
        idle, idle_count, partial = self.idle_by_leaf, self.idle_count, self.partial
        up = NodeState.UP
        total = 0
        held_out = 0
        for n, g in alloc:
            f = free[n]
            lf = n // per_leaf
            if f == gpn:
                idle[lf].discard(n)
                idle_count[lf] = len(idle[lf])
            elif f > 0:
                partial[f].discard(n)
            f += sign * g
            free[n] = f
            total += g
            if state[n] == up:
                if f == gpn:
                    idle[lf].add(n)
                    idle_count[lf] = len(idle[lf])
                elif f > 0:
                    partial[f].add(n)
            elif state[n] in OUT_OF_SERVICE:
                held_out += g
        self.allocated_gpus -= sign * total
        self.out_held_gpus -= sign * held_out
        self.version += 1

    def leaves_of(self, alloc: Alloc) -> int:
        return len({self.leaf(n) for n, _ in alloc})

    def set_state(self, node: int, state: NodeState) -> None:
        """Change a node's state; a node leaving UP keeps its GPUs' allocation until the job releases them."""
        old = self.state[node]
        if old == state:
            return
        if old == NodeState.UP:
            self._unindex(node)
        if (old in _IN_SERVICE) and state not in _IN_SERVICE:
            self.schedulable_gpus -= self.gpn
        if old not in _IN_SERVICE and state in _IN_SERVICE:
            self.schedulable_gpus += self.gpn
        if old == NodeState.SPARE:
            self.free[node] = self.gpn
        self._move_out(node, old, state)
        self.state[node] = state
        if state == NodeState.UP:
            self._index(node)
        self.version += 1

    def _move_out(self, node: int, old: NodeState, new: NodeState) -> None:
        """Keep :attr:`out_nodes` and :attr:`out_held_gpus` as a node enters or leaves the out-of-service states."""
        was, now = old in OUT_OF_SERVICE, new in OUT_OF_SERVICE
        if was != now:
            sign = 1 if now else -1
            self.out_nodes += sign
            self.out_held_gpus += sign * (self.gpn - self.free[node])

    def take_spare(self) -> int | None:
        """A spare node joins the pool (UP), or None if there is none."""
        if not self.spares:
            return None
        node = self.spares.pop(0)
        self.free[node] = self.gpn
        self.state[node] = NodeState.UP
        self.schedulable_gpus += self.gpn
        self._index(node)
        self.version += 1
        return node

    def to_spare(self, node: int) -> None:
        """A repaired node goes back to the spare pool instead of the schedulable pool."""
        self._unindex(node)
        if self.state[node] in _IN_SERVICE:
            self.schedulable_gpus -= self.gpn
        self._move_out(node, self.state[node], NodeState.SPARE)
        self.state[node] = NodeState.SPARE
        self.free[node] = 0
        self.spares.append(node)
        self.version += 1

    def count(self, state: NodeState) -> int:
        return sum(1 for s in self.state if s == state)
