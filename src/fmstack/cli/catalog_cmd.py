"""`fmstack catalog`: list and show the building blocks (GPUs, instances, fabrics, storage, models)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.table import Table

from fmstack.catalog import load_catalog
from fmstack.catalog.loader import Catalog
from fmstack.catalog.params import count_params
from fmstack.catalog.schema import GPU, Entry, Fabric, Instance, ModelArch, StorageTier, UltraServer
from fmstack.cli.common import catalog_option, console, json_option, print_json
from fmstack.errors import InputError

_KIND_ALIASES = {
    "gpu": "gpu", "gpus": "gpu",
    "instance": "instance", "instances": "instance",
    "ultraserver": "ultraserver", "ultraservers": "ultraserver",
    "fabric": "fabric", "fabrics": "fabric",
    "storage": "storage", "storages": "storage",
    "model": "model", "models": "model",
}  # fmt: skip


def _kind(value: str) -> str:
    kind = _KIND_ALIASES.get(value.lower())
    if kind is None:
        raise InputError("KIND", f"unknown kind {value!r}; allowed: gpu, instance, ultraserver, fabric, storage, model")
    return kind


def entry_dict(entry: Entry) -> dict[str, Any]:
    """An entry as JSON-ready data, with derived values (GiB, PFLOP/s, parameter counts) added."""
    data = entry.model_dump(mode="json", exclude_none=True)
    if isinstance(entry, GPU):
        data["bf16_dense_pflops"] = entry.bf16_dense_tflops / 1000
        data["hbm_gib"] = round(entry.hbm_gib, 2)
    if isinstance(entry, ModelArch):
        counts = count_params(entry)
        data["params_total"] = counts.total
        data["params_active"] = counts.active
    return data


def _summary(entry: Entry) -> list[str]:
    if isinstance(entry, GPU):
        fp8 = f"{entry.fp8_dense_tflops:g}" if entry.fp8_dense_tflops else "-"
        fp4 = f"{entry.fp4_dense_tflops:g}" if entry.fp4_dense_tflops else "-"
        return [f"{entry.bf16_dense_tflops:g}", fp8, fp4, f"{entry.hbm_gb:g}", f"{entry.hbm_bw_tbps:g}",
                f"{entry.nvlink_bw_gbps:g}" if entry.nvlink_bw_gbps else "-", f"{entry.tdp_w:g}"]  # fmt: skip
    if isinstance(entry, Instance):
        price = f"{entry.price_per_hour_usd:.2f}" if entry.price_per_hour_usd else "-"
        nvme = "-" if entry.local_nvme_tb is None else f"{entry.local_nvme_tb:g}"
        return [entry.gpu, str(entry.num_gpus), f"{entry.gpu_memory_gb:,.0f}", str(entry.nvlink_domain_gpus),
                entry.network, f"{entry.network_bw_gbps:,g}", nvme, price]  # fmt: skip
    if isinstance(entry, ModelArch):
        counts = count_params(entry)
        moe = f"{entry.moe.num_experts}x top-{entry.moe.top_k}" if entry.moe else "-"
        return [entry.family, f"{counts.total / 1e9:,.2f}", f"{counts.active / 1e9:,.2f}", str(entry.num_layers),
                str(entry.hidden_size), f"{entry.num_heads}/{entry.num_kv_heads}", moe, f"{entry.max_seq_len:,}"]  # fmt: skip
    if isinstance(entry, UltraServer):
        price = f"{entry.price_per_hour_usd:.2f}" if entry.price_per_hour_usd else "-"
        return [entry.instance, str(entry.num_instances), str(entry.num_gpus), f"{entry.hbm_aggregate_tb:g}",
                entry.network, f"{entry.network_bw_gbps:,g}", price]  # fmt: skip
    if isinstance(entry, Fabric):
        return [entry.scope, entry.generation, _fabric_bandwidth(entry), f"{entry.latency_us:g}",
                _opt(entry.ll_latency_us), f"{entry.bw_efficiency:g}", "yes" if entry.nvls else "no",
                f"{entry.collective_speedup:g}"]  # fmt: skip
    if isinstance(entry, StorageTier):
        capacity = "-"
        if entry.min_capacity_tib is not None:
            capacity = f"{entry.min_capacity_tib:g}, then +{_opt(entry.capacity_step_tib)}"
        return [entry.tier, _storage_throughput(entry), _opt(entry.latency_ms), capacity]
    return [entry.description or "", ", ".join(f"{k}={v}" for k, v in _numbers(entry).items())]


def _opt(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _fabric_bandwidth(fabric: Fabric) -> str:
    """Scale-up: per GPU, one direction; scale-out: per node of the generation's reference instance."""
    if fabric.bw_per_gpu_gbps is not None:
        return f"{fabric.bw_per_gpu_gbps:g} per GPU"
    if fabric.node_bw_gbps is not None:
        return f"{fabric.node_bw_gbps:g} per {fabric.node_gpus or '?'}-GPU node"
    return "-"


def _storage_throughput(tier: StorageTier) -> str:
    if tier.throughput_mbps_per_tib is not None:  # FSx: the network baseline (and burst) and the disks behind it
        burst = f" (burst {tier.burst_mbps_per_tib:g})" if tier.burst_mbps_per_tib else ""
        disk = ""
        if tier.disk_read_mbps_per_tib is not None:
            disk = f", disk {tier.disk_read_mbps_per_tib:g} read / {_opt(tier.disk_write_mbps_per_tib)} write"
        return f"MB/s per TiB: network {tier.throughput_mbps_per_tib:g}{burst}{disk}"
    if tier.read_gbps_per_device is not None:
        return f"{tier.read_gbps_per_device:g} / {_opt(tier.write_gbps_per_device)} GB/s read / write per device"
    if tier.get_per_s_per_prefix is not None:
        client = f", {tier.client_gbps_per_node:g} GB/s per node" if tier.client_gbps_per_node else ""
        return f"{tier.get_per_s_per_prefix:g} GET / {_opt(tier.put_per_s_per_prefix)} PUT per s per prefix{client}"
    return "-"


def _numbers(entry: Entry) -> dict[str, Any]:
    skip = {"name", "aliases", "description", "sources", "kind"}
    return {k: v for k, v in entry.model_dump(exclude_none=True).items() if k not in skip}


_HEADERS = {
    "gpu": ["BF16 TFLOP/s", "FP8 TFLOP/s", "FP4 TFLOP/s", "HBM GB", "HBM TB/s", "NVLink GB/s", "TDP W"],
    "instance": ["GPU", "GPUs", "GPU mem GB", "NVLink domain", "network", "net GB/s", "NVMe TB", "$/h"],
    "model": ["family", "params (B)", "active (B)", "layers", "hidden", "heads/kv", "MoE", "max context"],
    "ultraserver": ["instance", "instances", "GPUs (NVLink domain)", "HBM TB", "network", "net GB/s", "$/h"],
    "fabric": [
        "scope",
        "generation",
        "bandwidth GB/s",
        "latency us",
        "LL latency us",
        "bw efficiency",
        "NVLS",
        "collective speed-up",
    ],
    "storage": ["tier", "throughput", "latency ms", "capacity TiB (min, step)"],
}
"""Columns of ``catalog list`` per kind (UltraServers, fabrics and storage printed an empty description column and
every value as one "k=v, ..." cell); ``catalog show`` and --json keep every value with its source."""


@click.group(epilog="Example:\n\n  fmstack catalog list gpus\n\n  fmstack catalog show gpu H100 --json")
def catalog() -> None:
    """Browse the infrastructure catalog: GPUs, instances, UltraServers, fabrics, storage, models."""


@catalog.command("list", epilog="Example:\n\n  fmstack catalog list models --json")
@click.argument("kind", required=False)
@catalog_option
@json_option
def list_cmd(kind: str | None, catalog_dir: Path | None, as_json: bool) -> None:
    """List entries of KIND (gpu, instance, ultraserver, fabric, storage, model), or of every kind."""
    cat = load_catalog(catalog_dir)
    kinds = [_kind(kind)] if kind else list(cat.entries)
    if as_json:
        print_json({k: [entry_dict(e) for e in cat.all(k)] for k in kinds})
        return
    out = console()
    for k in kinds:
        headers = _HEADERS.get(k, ["description", "values"])
        table = Table("name", *headers, title=f"{k} ({len(cat.all(k))})", title_justify="left")
        for entry in cat.all(k):
            table.add_row(entry.name, *_summary(entry))
        out.print(table)


def _lookup(cat: Catalog, kind: str, name: str) -> Entry:
    """``cat.get``; for kind instance also the UltraServers, which every command taking --instance accepts; for kind
    model also a model YAML file, as every --model takes (``catalog show model my.yaml`` said "unknown model")."""
    if kind == "model":
        return cat.model(name)
    try:
        return cat.get(kind, name)
    except InputError:
        if kind != "instance":
            raise
    try:
        return cat.get("ultraserver", name)
    except InputError:
        message = cat.unknown_message("instance or ultraserver", name, ["instance", "ultraserver"])
        raise InputError("instance", message) from None


@catalog.command(
    "show",
    epilog="Example:\n\n  fmstack catalog show instance p5.48xlarge\n\n  fmstack catalog show model my-model.yaml",
)
@click.argument("kind")
@click.argument("name")
@catalog_option
@json_option
def show_cmd(kind: str, name: str, catalog_dir: Path | None, as_json: bool) -> None:
    """Show one entry with every value and its source (an UltraServer is found as an instance too)."""
    cat = load_catalog(catalog_dir)
    kind = _kind(kind)
    entry = _lookup(cat, kind, name)
    kind = str(getattr(entry, "kind"))  # noqa: B009 - every concrete entry has a kind literal
    data = entry_dict(entry)
    if as_json:
        print_json(data)
        return
    sources = data.pop("sources", {})
    table = Table("field", "value", "source", title=f"{kind} {entry.name}", title_justify="left")
    for key, value in data.items():
        table.add_row(key, str(value), sources.get(key, ""))
    console().print(table)
