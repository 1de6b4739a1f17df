"""Data loading and file-system sizing: the read throughput that keeps the GPUs fed, and the FSx capacity for it.

Tokens on disk: Megatron-LM's indexed datasets store token ids as uint16 (2 bytes) when the vocabulary has
fewer than 65,500 entries and int32 (4 bytes) otherwise (``megatron/core/datasets/indexed_dataset.py``,
``DType.optimal_dtype``): Llama 3's 128,256-token vocabulary needs 4 bytes.
Required read GB/s = tokens/s x bytes per token x read amplification / 1e9, where the amplification counts
bytes read but not used (random access to shuffled samples reading whole file-system blocks; 1.0 for a
pre-shuffled, sequentially read dataset).
FSx for Lustre throughput scales with capacity: GB/s = TiB x MB/s per TiB / 1000 (FSx User Guide,
"Performance characteristics"; storage-measurements.csv STO-001..006). Reads larger than the server cache
and long writes run at the disk rate, so fmstack uses min(network, disk) MB/s per TiB. Capacities come in
steps: 1.2 TiB, then multiples of 2.4 TiB (FSx User Guide).
"""

from __future__ import annotations

import math

from fmstack.catalog.loader import Catalog
from fmstack.catalog.schema import StorageTier
from fmstack.errors import InputError

MEGATRON_UINT16_MAX_VOCAB = 65500
"""Megatron-LM ``DType.optimal_dtype``: uint16 below this cardinality, int32 at or above it."""
TIB = 2.0**40


def bytes_per_token_for_vocab(vocab_size: int) -> float:
    """2 bytes (uint16) for a vocabulary under 65,500 tokens, else 4 (int32), as Megatron-LM stores them."""
    if vocab_size <= 0:
        raise InputError("vocab_size", f"must be positive, got {vocab_size}")
    return 2.0 if vocab_size < MEGATRON_UINT16_MAX_VOCAB else 4.0


def dataload_requirement(tokens_per_s: float, *, bytes_per_token: float = 2, read_amplification: float = 1.0) -> float:
    """Read throughput in GB/s (1e9 B/s) that training at ``tokens_per_s`` needs from the file system."""
    if not (math.isfinite(tokens_per_s) and tokens_per_s >= 0):
        raise InputError("tokens_per_s", f"must be a non-negative number, got {tokens_per_s}")
    if not (math.isfinite(bytes_per_token) and bytes_per_token > 0):
        raise InputError("bytes_per_token", f"must be positive (2 for uint16 ids, 4 for int32), got {bytes_per_token}")
    if not (math.isfinite(read_amplification) and read_amplification >= 1.0):
        raise InputError(
            "read_amplification", f"must be at least 1 (bytes read per byte used), got {read_amplification}"
        )
    return tokens_per_s * bytes_per_token * read_amplification / 1e9


def lustre_tier(tier: str, catalog: Catalog, field: str = "tier") -> StorageTier:
    """The FSx for Lustre tier ``tier``; InputError naming the Lustre tiers otherwise."""
    lustre = sorted(e.name for e in catalog.all("storage") if isinstance(e, StorageTier) and e.tier == "lustre")
    try:
        entry = catalog.storage(tier)
    except InputError:
        raise InputError(field, f"unknown storage tier {tier!r}; FSx for Lustre tiers: {', '.join(lustre)}") from None
    if entry.tier != "lustre":
        raise InputError(field, f"{entry.name} is not an FSx for Lustre tier; allowed: {', '.join(lustre)}")
    return entry


def mbps_per_tib(entry: StorageTier, op: str) -> float:
    """Sustained MB/s per TiB for ``op`` ('read' or 'write'): min(network, disk)."""
    if entry.throughput_mbps_per_tib is None:
        raise InputError("tier", f"storage tier {entry.name} has no throughput_mbps_per_tib in the catalog")
    disk = entry.disk_read_mbps_per_tib if op == "read" else entry.disk_write_mbps_per_tib
    return min(entry.throughput_mbps_per_tib, disk) if disk is not None else entry.throughput_mbps_per_tib


def round_capacity_tib(capacity_tib: float, entry: StorageTier) -> float:
    """Round up to a size FSx offers: the minimum, or a whole number of capacity steps above it."""
    minimum = entry.min_capacity_tib or 0.0
    if capacity_tib <= minimum:
        return minimum
    step = entry.capacity_step_tib
    if step is None:
        return capacity_tib
    return round(math.ceil(capacity_tib / step - 1e-9) * step, 6)


def fsx_capacity_for(required_gbps: float, tier: str, catalog: Catalog, *, op: str = "read") -> float:
    """FSx capacity (TiB, rounded up to the tier's step) whose throughput reaches ``required_gbps``."""
    if not (math.isfinite(required_gbps) and required_gbps >= 0):
        raise InputError("required_gbps", f"must be a non-negative GB/s, got {required_gbps}")
    if op not in ("read", "write"):
        raise InputError("op", f"must be 'read' or 'write', got {op!r}")
    entry = lustre_tier(tier, catalog)
    return round_capacity_tib(required_gbps * 1000.0 / mbps_per_tib(entry, op), entry)


def fsx_throughput_gbps(capacity_tib: float, tier: str, catalog: Catalog, *, op: str = "read") -> float:
    """Sustained GB/s of ``capacity_tib`` of ``tier``."""
    if not (math.isfinite(capacity_tib) and capacity_tib > 0):
        raise InputError("fsx_capacity_tib", f"must be a positive number of TiB, got {capacity_tib}")
    return capacity_tib * mbps_per_tib(lustre_tier(tier, catalog), op) / 1000.0


def fsx_capacity_needed(
    tier: str,
    catalog: Catalog,
    *,
    read_gbps: float = 0.0,
    write_gbps: float = 0.0,
    stored_bytes: float = 0.0,
) -> float:
    """Smallest offered FSx size that reads ``read_gbps``, writes ``write_gbps`` and holds ``stored_bytes``.

    Reads and writes are sized separately (they rarely peak together; a checkpoint write is a burst between
    data reads), and the capacity must also hold the data and checkpoints kept on it.
    """
    if not (math.isfinite(stored_bytes) and stored_bytes >= 0):
        raise InputError("stored_bytes", f"must be non-negative, got {stored_bytes}")
    entry = lustre_tier(tier, catalog)
    by_read = fsx_capacity_for(read_gbps, tier, catalog, op="read")
    by_write = fsx_capacity_for(write_gbps, tier, catalog, op="write")
    by_space = round_capacity_tib(stored_bytes / TIB, entry)
    return max(by_read, by_write, by_space)
