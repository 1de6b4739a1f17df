"""Checkpoint size and the time to write and read it on each storage tier.

Size: parameters (``count_params(model).total``) x bytes per parameter for weights, fp32 master weights
and optimizer state (Adam keeps two fp32 moments, m and v: Kingma and Ba 2015, Alg. 1; mixed precision keeps
an fp32 master copy: Micikevicius et al. 2018, sec. 3.1). Llama 3.1 405B: 405.85e9 x (2 + 4 + 4 + 4) B = 5.68 TB.

Time: every node writes an equal shard (PyTorch DCP deduplicates replicated state and spreads the write over
ranks), so a transfer takes ``bytes / min(limits) + latency`` where the limits are aggregate GB/s:
- local NVMe: nodes x devices x GB/s per device (storage.yaml, STO-013);
- FSx for Lustre: capacity (TiB) x min(network, disk) MB/s per TiB (FSx User Guide, STO-001..006), and the
  nodes' NICs;
- S3: prefixes x requests/s per prefix x part size (S3 User Guide, STO-008/009), and nodes x the per-node
  client target (AWS CRT, STO-010) capped by the NIC.
Asynchronous saves (PyTorch DCP ``async_save``) stall training only for the device-to-host copy of each GPU's
shard; the write then runs in the background (PyTorch blog "Reducing Model Checkpointing Times by Over 10x",
STO-014..016: 7B model, 148.8 s sync vs 6.3 s async downtime). Tiered saves write local NVMe first and copy to
a durable tier (FSx or S3) in the background.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fmstack.catalog.loader import Catalog
from fmstack.catalog.params import count_params
from fmstack.catalog.schema import ModelArch, StorageTier
from fmstack.catalog.topology import Cluster
from fmstack.errors import InputError

TIB = 2.0**40
GIB = 2.0**30
MIB = 2.0**20

OPTIMIZER_BYTES_PER_PARAM: dict[str, float] = {"adam": 8.0, "adamw": 8.0, "sgd": 4.0, "none": 0.0}
"""fp32 optimizer state per parameter: Adam(W) m and v (4 + 4 B), SGD momentum (4 B)."""
MASTER_BYTES_PER_PARAM = 4.0
DEFAULT_D2H_GBPS_PER_GPU = 64.0
"""Device-to-host copy per GPU: PCIe Gen5 x16, 128 GB/s both directions = 64 GB/s one way (NVIDIA H100
datasheet). A line rate, so an upper bound; calibrate with a measured staging time where one exists."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointSize:
    """Bytes of one full checkpoint by part."""

    num_params: int
    weights_bytes: float
    master_bytes: float
    optimizer_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.weights_bytes + self.master_bytes + self.optimizer_bytes

    @property
    def total_gib(self) -> float:
        return self.total_bytes / GIB

    def per_rank_bytes(self, num_writers: int) -> float:
        """Bytes each of ``num_writers`` ranks writes when the checkpoint is sharded evenly."""
        if num_writers <= 0:
            raise InputError("num_writers", f"must be a positive number of ranks, got {num_writers}")
        return self.total_bytes / num_writers


def checkpoint_size(
    model: ModelArch, *, weight_dtype_bytes: float = 2, master_weights: bool = True, optimizer: str = "adam"
) -> CheckpointSize:
    """Checkpoint bytes = parameters x (weight dtype + fp32 master + optimizer state)."""
    if not (math.isfinite(weight_dtype_bytes) and weight_dtype_bytes > 0):
        raise InputError("weight_dtype_bytes", f"must be a positive number of bytes, got {weight_dtype_bytes}")
    key = optimizer.lower()
    if key not in OPTIMIZER_BYTES_PER_PARAM:
        raise InputError(
            "optimizer", f"unknown optimizer {optimizer!r}; allowed: {', '.join(OPTIMIZER_BYTES_PER_PARAM)}"
        )
    n = count_params(model).total
    return CheckpointSize(
        num_params=n,
        weights_bytes=n * float(weight_dtype_bytes),
        master_bytes=n * MASTER_BYTES_PER_PARAM if master_weights else 0.0,
        optimizer_bytes=n * OPTIMIZER_BYTES_PER_PARAM[key],
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class Transfer:
    """One checkpoint write or read on one tier: its time and which limit set it."""

    tier: str
    op: str
    bytes_total: float
    time_s: float
    limits_gbps: dict[str, float]
    """Aggregate GB/s each part of the path allows (nodes' NICs, file system, request rate, devices)."""

    @property
    def bottleneck(self) -> str:
        return min(self.limits_gbps, key=self.limits_gbps.__getitem__)

    @property
    def gbps(self) -> float:
        return self.limits_gbps[self.bottleneck]


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointIO:
    """What saving and restoring one checkpoint costs, and what of it stalls training."""

    size: CheckpointSize
    tier: str
    durable_tier: str | None
    write: Transfer
    durable_write: Transfer | None
    restore: Transfer
    async_save: bool
    blocking_s: float
    """Training stalls this long per checkpoint: the device-to-host copy (async) or the first write (sync)."""
    background_s: float
    """Time after the stall until the checkpoint is on its last tier (the write runs beside training)."""
    fsx_capacity_tib: float | None
    durable: bool
    """Whether the checkpoint survives the loss of a node (it reaches FSx or S3)."""

    @property
    def write_s(self) -> float:
        return self.write.time_s

    @property
    def read_s(self) -> float:
        return self.restore.time_s

    @property
    def persist_s(self) -> float:
        """From the start of a save until the checkpoint is durable (blocking plus background)."""
        return self.blocking_s + self.background_s


def storage_tier(catalog: Catalog, name: str, field: str) -> StorageTier:
    try:
        return catalog.storage(name)
    except InputError:
        known = ", ".join(sorted(catalog.names("storage")))
        raise InputError(field, f"unknown storage tier {name!r}; known: {known}") from None


def _check_capacity(entry: StorageTier, capacity_tib: float | None, size: CheckpointSize) -> float:
    if capacity_tib is None:
        raise InputError("fsx_capacity_tib", f"tier {entry.name} needs a capacity in TiB (see fsx_capacity_for)")
    if not (math.isfinite(capacity_tib) and capacity_tib > 0):
        raise InputError("fsx_capacity_tib", f"must be a positive number of TiB, got {capacity_tib}")
    minimum = entry.min_capacity_tib or 0.0
    if capacity_tib < minimum:
        raise InputError("fsx_capacity_tib", f"{capacity_tib} TiB is below {entry.name}'s minimum of {minimum} TiB")
    if size.total_bytes > capacity_tib * TIB:
        raise InputError(
            "fsx_capacity_tib",
            f"checkpoint of {size.total_bytes / TIB:.2f} TiB does not fit in {capacity_tib} TiB of {entry.name}",
        )
    return capacity_tib


def transfer(
    entry: StorageTier,
    cluster: Cluster,
    size: CheckpointSize,
    *,
    op: str,
    capacity_tib: float | None = None,
    s3_prefixes: int = 1,
    field: str = "tier",
) -> Transfer:
    """Time for all nodes together to write or read ``size`` on one tier (see the module docstring)."""
    nodes = cluster.num_nodes
    inst = cluster.instance
    nic = nodes * inst.network_bw_gbps
    limits: dict[str, float]
    if entry.tier == "nvme":
        if not inst.local_nvme_tb or not inst.local_nvme_devices:
            listed = (
                "not listed in the catalog" if inst.local_nvme_tb is None else f"local_nvme_tb {inst.local_nvme_tb}"
            )
            raise InputError(field, f"{inst.name} has no local NVMe ({listed}); use an FSx tier or s3")
        per_node = size.total_bytes / nodes
        if per_node > inst.local_nvme_tb * 1e12:
            raise InputError(field, f"shard of {per_node / 1e12:.2f} TB per node exceeds {inst.local_nvme_tb} TB NVMe")
        per_device = entry.write_gbps_per_device if op == "write" else entry.read_gbps_per_device
        limits = {"nvme-devices": nodes * inst.local_nvme_devices * _need(per_device, entry, f"{op}_gbps_per_device")}
    elif entry.tier == "lustre":
        cap = _check_capacity(entry, capacity_tib, size)
        net = _need(entry.throughput_mbps_per_tib, entry, "throughput_mbps_per_tib")
        disk = entry.disk_write_mbps_per_tib if op == "write" else entry.disk_read_mbps_per_tib
        per_tib = min(net, disk) if disk is not None else net
        limits = {"node-nic": nic, "fsx-throughput": cap * per_tib / 1000.0}
    else:
        if s3_prefixes <= 0:
            raise InputError("s3_prefixes", f"must be a positive number of prefixes, got {s3_prefixes}")
        rate = entry.put_per_s_per_prefix if op == "write" else entry.get_per_s_per_prefix
        part_bytes = (entry.part_size_mib or 8.0) * MIB
        client = min(inst.network_bw_gbps, entry.client_gbps_per_node or inst.network_bw_gbps)
        limits = {
            "node-nic" if client == inst.network_bw_gbps else "s3-client": nodes * client,
            "s3-request-rate": s3_prefixes * _need(rate, entry, f"{op} requests per prefix") * part_bytes / 1e9,
        }
    latency_s = (entry.latency_ms or 0.0) / 1000.0
    time_s = size.total_bytes / 1e9 / min(limits.values()) + latency_s
    return Transfer(tier=entry.name, op=op, bytes_total=size.total_bytes, time_s=time_s, limits_gbps=limits)


def _need(value: float | None, entry: StorageTier, what: str) -> float:
    if value is None:
        raise InputError("tier", f"storage tier {entry.name} has no {what} in the catalog")
    return value


def checkpoint_io(
    size: CheckpointSize,
    cluster: Cluster,
    *,
    tier: str,
    fsx_capacity_tib: float | None,
    async_save: bool,
    catalog: Catalog,
    durable_tier: str | None = None,
    s3_prefixes: int = 1,
    d2h_gbps_per_gpu: float = DEFAULT_D2H_GBPS_PER_GPU,
) -> CheckpointIO:
    """Write, read, blocking and background time of one checkpoint of ``size`` on ``cluster``.

    ``tier`` takes the first write; with ``durable_tier`` (tiered save) ``tier`` must be local NVMe and the
    copy to FSx or S3 runs in the background. Restores read from the durable tier when there is one.
    ``fsx_capacity_tib`` sizes whichever tier is FSx for Lustre.
    """
    if not (math.isfinite(d2h_gbps_per_gpu) and d2h_gbps_per_gpu > 0):
        raise InputError("d2h_gbps_per_gpu", f"must be a positive GB/s, got {d2h_gbps_per_gpu}")
    first = storage_tier(catalog, tier, "tier")
    cap, pre = fsx_capacity_tib, s3_prefixes
    write = transfer(first, cluster, size, op="write", capacity_tib=cap, s3_prefixes=pre)
    durable_write = None
    last = first
    if durable_tier is not None:
        second = storage_tier(catalog, durable_tier, "durable_tier")
        if first.tier != "nvme" or second.tier == "nvme":
            raise InputError(
                "durable_tier",
                f"a tiered save writes local NVMe first, then FSx or S3; got tier {first.name} ({first.tier}) "
                f"then {second.name} ({second.tier})",
            )
        durable_write = transfer(
            second, cluster, size, op="write", capacity_tib=cap, s3_prefixes=pre, field="durable_tier"
        )
        last = second
    restore = transfer(last, cluster, size, op="read", capacity_tib=cap, s3_prefixes=pre)
    per_node = size.total_bytes / cluster.num_nodes
    host_bytes = cluster.instance.host_memory_gib * GIB
    if async_save and per_node > host_bytes:
        raise InputError(
            "async_save",
            f"a node's shard ({per_node / GIB:.0f} GiB) does not fit its host memory "
            f"({cluster.instance.host_memory_gib:.0f} GiB) for staging; use a synchronous save or more nodes",
        )
    later = durable_write.time_s if durable_write is not None else 0.0
    if async_save:
        blocking = size.per_rank_bytes(cluster.num_gpus) / 1e9 / d2h_gbps_per_gpu
        background = write.time_s + later
    else:
        blocking = write.time_s
        background = later
    return CheckpointIO(
        size=size,
        tier=first.name,
        durable_tier=durable_write.tier if durable_write is not None else None,
        write=write,
        durable_write=durable_write,
        restore=restore,
        async_save=async_save,
        blocking_s=blocking,
        background_s=background,
        fsx_capacity_tib=fsx_capacity_tib,
        durable=last.tier != "nvme",
    )
