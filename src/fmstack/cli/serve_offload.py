"""`estimate serve --kv-offload-gib X`: a host-memory tier under each colocated replica's prefix / session cache
(:mod:`fmstack.perfmodel.inference_prefix_offload`): the flag, its checks, the tier it builds and its text line."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from fmstack.catalog.topology import Cluster
from fmstack.errors import InputError
from fmstack.perfmodel.inference import ServeConfig
from fmstack.perfmodel.inference_kv import KV_BYTES, kv_bytes_per_token, kv_split
from fmstack.perfmodel.inference_prefix_offload import KvOffload, check_offload_gib, host_share_gib
from fmstack.perfmodel.inference_step import Deployment

F = TypeVar("F", bound=Callable[..., Any])


def offload_option(f: F) -> F:
    """The ``--kv-offload-gib`` flag."""
    return click.option(
        "--kv-offload-gib", "kv_offload_gib", type=float, default=0.0, show_default=True,
        help="Host memory (GiB per replica) for KV evicted from the GPU prefix / session cache (vLLM's offloading "
        "connector, LMCache, Dynamo KVBM G2); a hit there is copied back over the host-to-device link first. "
        "0 = off. With --prefix-groups or --turns, --qps; colocated replicas, or a split's prefill replicas.",
    )(f)  # fmt: skip


def check_offload(
    gib: float, *, cfg: ServeConfig, cluster: Cluster, split: object, disagg: bool, simulate: bool,
    prefix: object, sessions: object,
) -> float:  # fmt: skip
    """``gib`` checked against the run it applies to (one line, exit 2, where it does not): 0 = off."""
    share = host_share_gib(cluster.instance.host_memory_gib, cluster.instance.num_gpus, cfg.tp * cfg.pp)
    check_offload_gib(gib, share)
    if gib == 0:
        return 0.0
    why = None
    if disagg:
        why = (
            "is simulated, not priced by --disagg's mean field: drop --disagg (--prefill-replicas / "
            "--decode-replicas simulate a split with it)"
        )
    elif prefix is None and sessions is None:
        why = "offloads the prefix / session cache: give --prefix-groups or --turns"
    elif not simulate or cfg.request_rate_per_s is None:
        why = "is simulated at an open-loop rate: give --qps and drop --no-simulate"
    elif cfg.attention_dp:
        why = "is not simulated under attention DP"
    elif cfg.scheduler == "static":
        why = "is simulated with continuous batching only: drop --scheduler static"
    elif cluster.instance.host_to_device_gbps is None:
        why = f"instance {cluster.instance.name} has no host_to_device_gbps in the catalog: add it (GB/s per GPU)"
    if why is not None:
        raise InputError("kv-offload-gib", why)
    return gib


def kv_offload(gib: float, d: Deployment, cluster: Cluster) -> KvOffload | None:
    """The tier of ``gib`` GiB for deployment ``d`` on ``cluster`` (None: 0, off)."""
    if gib == 0:
        return None
    bw = cluster.instance.host_to_device_gbps
    assert bw is not None, "check_offload refuses an instance without a host-to-device bandwidth"
    full = kv_bytes_per_token(d.model, KV_BYTES[d.kv_dtype])
    return KvOffload(capacity_gib=gib, kv_bytes_per_token=full, gpus=d.tp * d.pp, host_to_device_gbps=bw,
                     kv_bytes_per_token_gpu=full / kv_split(d.model, d.attn_split) / d.pp)  # fmt: skip


def offload_text(data: dict[str, Any]) -> str:
    """The host tier's line."""
    k = data["kv_offload"]
    hit_s = k["added_ttft_s_mean_host_hits"]
    per_hit = "no host hits" if hit_s is None or hit_s != hit_s else f"{hit_s * 1e3:.2f} ms per host hit"
    return (f"KV offload: {k['capacity_gib']:g} GiB host tier per replica ({int(k['capacity_tokens']):,} tokens), "
            f"{k['host_hit_rate']:.1%} of requests hit there ({k['host_token_hit_rate']:.1%} of prompt tokens), "
            f"{k['copied_bytes_per_request'] / 1e6:,.1f} MB copied host->device per request at "
            f"{k['host_to_device_gbps_per_gpu']:g} GB/s per GPU, adding {k['added_ttft_s_mean'] * 1e3:.2f} ms to the "
            f"mean TTFT ({per_hit})")  # fmt: skip
