"""Cluster topology: which GPUs share NVLink, which cross the scale-out fabric, and how many hops.

A cluster is ``num_nodes`` instances of one type. GPUs are numbered node-major (GPU ``g`` is on node
``g // gpus_per_node``). NVLink domains hold ``nvlink_domain_gpus`` GPUs: one node on p5, 18 nodes of 4
GPUs on a GB200 NVL72 UltraServer, or part of a node (a PCIe server: 1; two NVLink islands of 4 in an
8-GPU node: 4). Nodes hang under leaf switches of ``nodes_per_leaf`` nodes and leaves under spines of
``leaves_per_spine`` leaves (an EC2 UltraCluster is modelled as such a tree; AWS does not publish its block
sizes, so these are documented defaults a user can change).

Assumption for a domain smaller than its node: GPUs of one node in different NVLink domains exchange data at
the scale-out tier's per-GPU parameters (the node's network bandwidth / GPUs per node, the fabric's latency).
The catalog has no PCIe fabric; NCCL would go through PCIe peer-to-peer or host memory, whose per-GPU rate (PCIe
Gen4 x16 about 25 GB/s per direction, Gen5 about 50) is of the order of one GPU's NIC share (HDR: 25 GB/s).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fmstack.catalog.loader import Catalog
from fmstack.catalog.schema import GPU, Fabric, Instance, UltraServer
from fmstack.errors import InputError

DEFAULT_NODES_PER_LEAF = 16
DEFAULT_LEAVES_PER_SPINE = 16
MAX_CLUSTER_GPUS = 1 << 20
"""The most GPUs one cluster (a training job, an RL step, one serving plan) may have: 1,048,576 (2^20), several
times the largest clusters built (a few hundred thousand GPUs). Past it nothing real is modelled, and counts such
as 10^12 nodes gave step times and costs with no meaning (``estimate train --nodes 999999999999`` printed 9e16
tokens/s)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Cluster:
    """``num_nodes`` instances of one type, with their NVLink domains and network tree."""

    instance: Instance
    gpu: GPU
    scale_up: Fabric | None
    """NVLink fabric inside a domain (None for a single-GPU node)."""
    scale_out: Fabric
    num_nodes: int
    nodes_per_leaf: int = DEFAULT_NODES_PER_LEAF
    leaves_per_spine: int = DEFAULT_LEAVES_PER_SPINE
    name: str = field(default="")
    whole_domains: bool = False
    """Require whole NVLink domains (set when the cluster is named by its UltraServer)."""

    def __post_init__(self) -> None:
        if self.num_nodes <= 0:
            raise InputError("nodes", f"must be a positive number of nodes, got {self.num_nodes}")
        if self.nodes_per_leaf <= 0 or self.leaves_per_spine <= 0:
            raise InputError("nodes_per_leaf", "leaf and spine sizes must be positive")
        nodes_per_domain = self.nodes_per_domain
        # a job may use part of one large domain (8 GPUs of an NVL72 rack), but whole UltraServers otherwise
        partial_ok = self.instance.ultraserver is None or (self.num_nodes < nodes_per_domain and not self.whole_domains)
        if nodes_per_domain > 1 and self.num_nodes % nodes_per_domain and not partial_ok:
            raise InputError(
                "nodes",
                f"num_nodes({self.num_nodes}) must be a multiple of {nodes_per_domain} {self.instance.name} nodes "
                f"per {self.instance.nvlink_domain_gpus}-GPU NVLink domain "
                f"({nodes_per_domain} x {self.instance.num_gpus} GPUs); nearest: "
                + " or ".join(
                    f"{d * nodes_per_domain} nodes ({d * self.instance.nvlink_domain_gpus} GPUs)"
                    for d in (self.num_nodes // nodes_per_domain, self.num_nodes // nodes_per_domain + 1)
                    if d >= 1
                )
                + (
                    f"; to use part of one UltraServer name its instance, --instance {self.instance.name}"
                    if self.num_nodes < nodes_per_domain and self.instance.name != self.name
                    else ""
                ),
            )

    @property
    def gpus_per_node(self) -> int:
        return self.instance.num_gpus

    @property
    def num_gpus(self) -> int:
        return self.num_nodes * self.instance.num_gpus

    @property
    def gpus_per_domain(self) -> int:
        """GPUs that share one NVLink domain: ``nvlink_domain_gpus`` (which may be less than a node), 1 without
        an NVLink fabric (every pair of GPUs then talks over the scale-out tier, see the module docstring)."""
        return self.instance.nvlink_domain_gpus if self.scale_up is not None else 1

    @property
    def nodes_per_domain(self) -> int:
        return max(1, self.instance.nvlink_domain_gpus // self.instance.num_gpus)

    @property
    def num_domains(self) -> int:
        return -(-self.num_gpus // self.gpus_per_domain)

    @property
    def network_bw_gbps_per_node(self) -> float:
        return self.instance.network_bw_gbps

    @property
    def network_bw_gbps_per_gpu(self) -> float:
        return self.instance.network_bw_gbps / self.instance.num_gpus

    def node_of(self, gpu: int) -> int:
        self._check_gpu(gpu)
        return gpu // self.gpus_per_node

    def domain_of(self, gpu: int) -> int:
        self._check_gpu(gpu)
        return gpu // self.gpus_per_domain

    def leaf_of(self, gpu: int) -> int:
        return self.node_of(gpu) // self.nodes_per_leaf

    def spine_of(self, gpu: int) -> int:
        return self.leaf_of(gpu) // self.leaves_per_spine

    def hops(self, gpu_a: int, gpu_b: int) -> int:
        """Switch hops between two GPUs on the scale-out network (0: same NVLink domain)."""
        if self.domain_of(gpu_a) == self.domain_of(gpu_b):
            return 0
        if self.leaf_of(gpu_a) == self.leaf_of(gpu_b):
            return 1
        if self.spine_of(gpu_a) == self.spine_of(gpu_b):
            return 3
        return 5

    def group_in_domain(self, group_size: int, stride: int = 1) -> bool:
        """Whether a group of ``group_size`` ranks ``stride`` apart (node-major placement) stays in one domain."""
        return group_size * stride <= self.gpus_per_domain

    def _check_gpu(self, gpu: int) -> None:
        if not 0 <= gpu < self.num_gpus:
            raise InputError("gpu", f"GPU index {gpu} outside 0..{self.num_gpus - 1}")


def build_cluster(
    catalog: Catalog,
    instance: str,
    num_nodes: int,
    *,
    nodes_per_leaf: int = DEFAULT_NODES_PER_LEAF,
    leaves_per_spine: int = DEFAULT_LEAVES_PER_SPINE,
    part_of_domain: bool = False,
) -> Cluster:
    """A cluster of ``num_nodes`` of ``instance`` (an instance or UltraServer name).

    For an UltraServer name, ``num_nodes`` still counts component instances and must be a multiple
    of the UltraServer's instance count, unless ``part_of_domain`` (a job given part of one UltraServer, as the
    fleet twin places them) and fewer nodes than one UltraServer holds.
    """
    if num_nodes <= 0:
        raise InputError("nodes", f"must be a positive number of nodes, got {num_nodes}")
    inst = resolve_instance(catalog, instance)
    check_cluster_gpus(num_nodes * inst.num_gpus, f"{num_nodes:,} nodes x {inst.num_gpus} GPUs = ", "nodes")
    gpu = catalog.gpu(inst.gpu)
    return Cluster(
        instance=inst,
        gpu=gpu,
        scale_up=nvlink_fabric(catalog, inst, gpu),
        scale_out=catalog.fabric(inst.network),
        num_nodes=num_nodes,
        nodes_per_leaf=nodes_per_leaf,
        leaves_per_spine=leaves_per_spine,
        name=instance,
        whole_domains=not part_of_domain
        and inst.ultraserver is not None
        and inst.ultraserver.lower() == instance.lower(),
    )


def check_cluster_gpus(num_gpus: int, arithmetic: str = "", field: str = "gpus") -> None:
    """Refuse more than :data:`MAX_CLUSTER_GPUS` GPUs in one cluster; ``arithmetic`` shows how the count came about
    (``"4 nodes x 8 GPUs = "``)."""
    if num_gpus > MAX_CLUSTER_GPUS:
        raise InputError(
            field,
            f"{arithmetic}{num_gpus:,} GPUs; allowed: at most {MAX_CLUSTER_GPUS:,} (2^20) in one cluster, several "
            "times the largest built: plan a share of the fleet",
        )


def nvlink_fabric(catalog: Catalog, inst: Instance, gpu: GPU) -> Fabric | None:
    """The NVLink fabric of ``inst``'s domains: its GPU's generation, None for a domain of one GPU or no NVLink."""
    if inst.nvlink_domain_gpus > 1 and gpu.nvlink_generation is not None:
        return catalog.fabric(f"nvlink-{gpu.nvlink_generation}")
    return None


def resolve_instance(catalog: Catalog, name: str) -> Instance:
    """The instance ``name``, or for an UltraServer name its component instance as that UltraServer defines it."""
    try:
        return catalog.instance(name)
    except InputError as not_instance:
        try:
            us = catalog.ultraserver(name)
        except InputError:
            message = catalog.unknown_message("instance", name, ["instance", "ultraserver"])
            raise InputError("instance", message) from not_instance
        return ultraserver_instance(catalog.instance(us.instance), us)


def ultraserver_instance(base: Instance, us: UltraServer) -> Instance:
    """One of ``us``'s ``num_instances`` instances, with every field the UltraServer declares taking precedence.

    Whole-UltraServer values are split evenly per instance, the unit the model counts in (a cluster costs
    ``price_per_hour_usd x num_nodes``; scale-out bandwidth is per node): ``price_per_hour_usd`` (per UltraServer
    hour), ``network_bw_gbps`` and ``hbm_aggregate_tb`` are divided by ``num_instances``; ``num_gpus`` becomes the
    NVLink domain, ``network`` the scale-out fabric. A price the UltraServer leaves out is the instance's own.
    """
    n = us.num_instances
    update: dict[str, object] = {
        "nvlink_domain_gpus": us.num_gpus,
        "ultraserver": us.name,
        "network": us.network,
        "network_bw_gbps": us.network_bw_gbps / n,
        "gpu_memory_gb": us.hbm_aggregate_tb * 1000.0 / n,
    }
    if us.price_per_hour_usd is not None:
        update["price_per_hour_usd"] = us.price_per_hour_usd / n
        update["price_as_of"] = us.price_as_of
    return base.model_copy(update=update)
