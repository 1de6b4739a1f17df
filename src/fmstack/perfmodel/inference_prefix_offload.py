"""A host-memory (CPU DRAM) tier under a replica's prefix / session cache
(:class:`fmstack.perfmodel.inference_prefix.PrefixCache`), as vLLM's KV offloading connector
(``vllm/v1/kv_offload``, ``--kv-transfer-config '{"kv_connector": "OffloadingConnector"}'``), LMCache's local CPU
backend and NVIDIA Dynamo's KV Block Manager (KVBM, tier G2 = host memory) keep KV blocks that no longer fit on the GPU.

Model (``estimate serve --kv-offload-gib X``, per replica): an entry the GPU cache evicts (least recently used, in
the KV pool's free part) moves to the host tier, itself least recently used within ``X`` GiB, i.e.
``X x 2^30 / kv_bytes_per_token`` tokens (the model's whole KV per token: one copy of every GPU's shard). A later
lookup that finds the entry there is a hit: the entry moves back to the GPU (exclusive tiers: the host copy is
dropped, and written again when the GPU evicts it), and its blocks are copied host -> device first. The copy of a
tensor-parallel (and pipeline-parallel) sharded KV runs in parallel, each GPU over its own link, so it takes
``tokens x kv_bytes_per_token_gpu / host_to_device_bandwidth`` (the catalog's ``host_to_device_gbps`` per GPU:
PCIe Gen4 x16 31.5 GB/s, Gen5 x16 63 GB/s, GB200's NVLink-C2C 450 GB/s per direction).

Overlap, as vLLM's offloading connector does it (``get_num_new_matched_tokens`` returns ``load_kv_async=True``: the
request waits in ``WAITING_FOR_REMOTE_KVS`` while the engine keeps running the other requests, and is scheduled once
the load finishes): the copy overlaps the other requests' iterations and delays only its own request. The simulation
holds the request's KV reservation from admission (the blocks the copy fills) and gives it its first chunk no earlier
than ``admission + copy time``; a request that finds its entry on the host only as it would get its first chunk
(:func:`fmstack.perfmodel.inference_sim_prefix.late_hit`) waits the copy from then. Not modelled: contention of
several copies (or of GPUs behind one PCIe switch) for a link, a layer-by-layer pipelined load (LMCache's
``use_layerwise``), the device -> host write on eviction (asynchronous in all three engines), the CPU tier's block
granularity (an entry moves whole), attention DP (refused).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fmstack.errors import InputError

if TYPE_CHECKING:
    from fmstack.perfmodel.inference_sim_io import SimRequest

GIB = 2**30


@dataclass(frozen=True, kw_only=True, slots=True)
class KvOffload:
    """A replica's host-memory KV tier: its size and the host -> device link that copies an entry back."""

    capacity_gib: float
    """Host memory for offloaded KV per replica (``--kv-offload-gib``); > 0."""
    kv_bytes_per_token: float
    """The model's KV bytes per token, all layers and heads (what the host stores per token)."""
    kv_bytes_per_token_gpu: float
    """One GPU's share of it (its TP / PP shard), copied over its own link."""
    gpus: int
    """GPUs of the replica (each copies its shard)."""
    host_to_device_gbps: float
    """Host -> device bandwidth per GPU, GB/s (1e9 bytes/s)."""

    def __post_init__(self) -> None:
        check_offload_gib(self.capacity_gib, math.inf)
        if not self.capacity_gib > 0:
            raise InputError("kv-offload-gib", f"a host tier needs > 0 GiB, got {self.capacity_gib}")
        if not (self.kv_bytes_per_token > 0 and self.kv_bytes_per_token_gpu > 0 and self.host_to_device_gbps > 0):
            raise InputError("host_to_device_gbps", "KV bytes per token and the link's GB/s must be > 0")

    @property
    def capacity_tokens(self) -> float:
        """Tokens the tier holds: ``capacity_gib x 2^30 / kv_bytes_per_token``."""
        return self.capacity_gib * GIB / self.kv_bytes_per_token

    def copy_s(self, tokens: int) -> float:
        """Seconds to copy ``tokens`` host -> device: every GPU its shard over its own link, in parallel."""
        return tokens * self.kv_bytes_per_token_gpu / (self.host_to_device_gbps * 1e9)

    def copy_bytes(self, tokens: int) -> float:
        """Bytes that cross the host -> device links (all GPUs) to load ``tokens``."""
        return tokens * self.kv_bytes_per_token_gpu * self.gpus


def check_offload_gib(gib: float, most_gib: float) -> None:
    """``--kv-offload-gib``: finite, >= 0 and at most ``most_gib`` (the replica's share of its hosts' memory)."""
    if not (math.isfinite(gib) and gib >= 0):
        raise InputError("kv-offload-gib", f"must be a finite number >= 0 (GiB of host memory), got {gib}")
    if gib > most_gib:
        raise InputError("kv-offload-gib", f"{gib:g} GiB exceeds the replica's share of host memory, "
                         f"{most_gib:g} GiB (the instance's host_memory_gib x its GPUs / the node's)")  # fmt: skip


def host_share_gib(host_memory_gib: float, gpus_per_node: int, replica_gpus: int) -> float:
    """A replica's share of host memory: ``host_memory_gib x replica_gpus / gpus_per_node`` (its nodes' whole
    memory when it spans nodes)."""
    return host_memory_gib * replica_gpus / gpus_per_node


class HostTier:
    """The host tier's entries, least recently used first, within :attr:`KvOffload.capacity_tokens`; and what the
    tier served (hits, tokens loaded)."""

    def __init__(self, offload: KvOffload) -> None:
        self.offload = offload
        self._entries: OrderedDict[int, int] = OrderedDict()
        self.tokens = 0
        self.capacity_tokens = offload.capacity_tokens
        self.hits = 0
        """Entries copied back to the GPU."""
        self.loaded_tokens = 0
        """Tokens copied back to the GPU."""

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def size(self, key: int) -> int:
        return self._entries[key]

    def put(self, key: int, tokens: int) -> None:
        """The GPU evicted ``key`` (``tokens`` long): it moves here as the most recently used, evicting the least
        recently used to make room (dropped for good); longer than the tier: dropped."""
        self.drop(key)
        if tokens > self.capacity_tokens:
            return
        while self._entries and self.tokens + tokens > self.capacity_tokens:
            _, n = self._entries.popitem(last=False)
            self.tokens -= n
        self._entries[key] = tokens
        self.tokens += tokens

    def take(self, key: int) -> int:
        """A hit on ``key``: it leaves the tier for the GPU; the tokens to copy."""
        n = self._entries.pop(key)
        self.tokens -= n
        self.hits += 1
        self.loaded_tokens += n
        return n

    def drop(self, key: int) -> None:
        """A stale copy of ``key`` (the GPU holds a newer one): gone."""
        self.tokens -= self._entries.pop(key, 0)


def offload_stats(measured: Sequence[SimRequest], offload: KvOffload) -> dict[str, float]:
    """The ``kv_offload`` JSON block over the measured requests: the tier's size, the share of requests that hit on
    the host tier and of their prompt tokens served from it, the bytes copied host -> device per request (all
    requests; all GPUs' links), and the TTFT the copies add: the mean over all requests and over host hits."""
    n = len(measured)
    prompt = sum(q.input_len for q in measured)
    host = [q for q in measured if q.host_tokens > 0]
    nan = math.nan
    return {
        "capacity_gib": offload.capacity_gib, "capacity_tokens": offload.capacity_tokens,
        "host_to_device_gbps_per_gpu": offload.host_to_device_gbps,
        "host_hit_rate": len(host) / n if n else nan,
        "host_token_hit_rate": sum(q.kv_shared for q in host) / prompt if prompt else nan,
        "copied_bytes_per_request": sum(offload.copy_bytes(q.host_tokens) for q in host) / n if n else nan,
        "added_ttft_s_mean": sum(q.copy_s for q in host) / n if n else nan,
        "added_ttft_s_mean_host_hits": sum(q.copy_s for q in host) / len(host) if host else nan,
    }  # fmt: skip
