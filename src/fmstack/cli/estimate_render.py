"""How `fmstack estimate train` prints one estimate: the configuration line, the step, communication and memory
tables, MFU, the time to train with checkpoints and failures, its cost, and what would make a misfit fit."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from fmstack.catalog.topology import Cluster
from fmstack.cli.common import console, duration_text, parts_table
from fmstack.perfmodel.training import TrainingEstimate


def render_estimate(est: TrainingEstimate, data: dict[str, Any], *, cost_line: str | None = None) -> None:
    c = est.config
    out = console()
    recompute = c.recompute + (f" ({', '.join(c.recompute_modules)})" if c.recompute_modules else "")
    if c.recompute_layers:
        recompute += f" + full on {c.recompute_layers} layers per chunk"
    out.print(
        f"[bold]{est.model}[/] on {est.num_gpus} {est.instance} GPUs: tp {c.tp} pp {c.pp}"
        f"{f' (v{c.virtual_stages})' if c.virtual_stages > 1 else ''} dp {c.dp} cp {c.cp} ep {c.ep}, "
        f"mb {c.micro_batch} x gb {c.global_batch} x seq {c.seq_len}, {c.precision}, recompute {recompute}, "
        f"{c.sharding}{', sp' if c.sequence_parallel else ''}"
    )
    out.print(parts_table("step breakdown", "part of the step", est.parts_s, est.step_time_s))
    comm = Table("link", "on the link (s)", "exposed (s)", title="communication", title_justify="left")
    for name, link in est.comm.items():
        if link.link_s > 0:
            comm.add_row(name, f"{link.link_s:.4f}", f"{link.exposed_s:.4f}")
    out.print(comm)
    m = est.memory
    mem = Table("memory per GPU", "GiB", title="memory (most loaded stage)", title_justify="left")
    for label, value in (
        ("weights", m.weights_gib), ("gradients", m.grads_gib), ("optimizer", m.optimizer_gib),
        ("activations", m.activations_gib), ("temporary", m.temporary_gib), ("total", m.total_gib),
    ):  # fmt: skip
        mem.add_row(label, f"{value:.1f}")
    mem.add_row("capacity - reserve", f"{m.capacity_gib - m.reserve_gib:.1f}")
    out.print(mem)
    fits = "[green]fits[/]" if m.fits else "[red]does NOT fit[/]"
    # HFU counts what runs (the causal half of the attention core, plus recompute), MFU the full 6N + attention
    hfu_note = " (causal attention as run)" if est.hfu < est.mfu else ""
    out.print(
        f"MFU {est.mfu * 100:.1f} %  HFU {est.hfu * 100:.1f} %{hfu_note}  {est.tflops_per_gpu:.0f} model TFLOP/s/GPU  "
        f"{est.tokens_per_s:,.0f} tokens/s ({est.tokens_per_s_per_gpu:,.0f} per GPU)  memory {fits}"
    )
    if not m.fits:
        out.print(memory_hint(est), markup=False, soft_wrap=True)
    if est.mfu - est.mfu_causal >= 0.005:  # long sequences: the two counts Megatron has used differ visibly
        out.print(
            f"with the attention core halved for the causal mask (as Megatron-LM logs count it): "
            f"MFU {est.mfu_causal * 100:.1f} %, {est.tflops_per_gpu_causal:.0f} model TFLOP/s/GPU"
        )
    if "time_to_train_s" in data:
        lost = ", ".join(f"{k} {duration_text(v)}" for k, v in data["lost_time_s"].items() if v > 0)
        out.print(
            f"checkpoint {data['checkpoint_size_gib']:,.0f} GiB to {data['checkpoint_tier']}: write "
            f"{data['checkpoint_write_s']:,.1f} s ({'async' if data['checkpoint_async'] else 'sync'}, stalls "
            f"{data['checkpoint_blocking_s']:.2f} s), every {data['checkpoint_interval_s'] / 60:,.1f} min"
        )  # one fact per line: a 140-column log broke the longer lines mid-phrase
        out.print(f"FSx {data['fsx_tier']} {data['fsx_capacity_tib_needed']:,.1f} TiB needed ({_fsx_needs(data)})")
        out.print(
            f"failures: MTBF {duration_text(data['mtbf_s'])} at this scale ({data['failure_model']}), "
            f"{_count_text(data['expected_failures'])} expected; recovery {data['recovery']}; goodput "
            f"{data['goodput'] * 100:.1f} %"
        )
        out.print(f"time lost: {lost or 'nothing'}")
        out.print(
            f"time to train {data['time_to_train_s'] / 86400:,.1f} days "
            f"(ideal {data['ideal_time_to_train_s'] / 86400:,.1f} days without failures or checkpoints)"
        )
        if cost_line is not None:
            out.print(cost_line, markup=False)
    out.print(f"bottleneck: [bold]{est.bottleneck}[/]")


def cost_text(data: dict[str, Any], cluster: Cluster) -> str:
    if data.get("cost_per_hour_usd") is None:
        return f"cost: no price for {cluster.name} in the catalog (price_per_hour_usd in a --catalog file)"
    return (
        f"cost ${data['cost_usd']:,.0f} (ideal ${data['ideal_cost_usd']:,.0f}) at ${data['cost_per_hour_usd']:,.2f}/h: "
        f"{data['num_nodes']} nodes x ${data['price_per_node_hour_usd']:,.2f}/h (on-demand list price in the catalog)"
    )


def _count_text(expected: float) -> str:
    """An expected count: two significant digits below 10 (0.0045 failures is not "0"), thousands separators above."""
    return f"{expected:.2g}" if expected < 10 else f"{expected:,.0f}"


def _fsx_needs(data: dict[str, Any]) -> str:
    """What sizes the file system: data reads, checkpoint writes within the waste target, or space (a synchronous
    checkpoint at scale asks for a write-driven size far beyond the others: the cue to save asynchronously)."""
    by = data["fsx_capacity_tib_by"]
    return ", ".join(f"{k} {by[k]:,.1f}" for k in ("read", "write", "space")) + " TiB"


def memory_hint(est: TrainingEstimate) -> str:
    """What would make a configuration that does not fit fit: the largest part and the levers that shrink it."""
    m, c = est.memory, est.config
    parts = {"weights": m.weights_gib, "gradients": m.grads_gib, "optimizer": m.optimizer_gib,
             "activations": m.activations_gib}  # fmt: skip
    top = max(parts, key=lambda k: parts[k])
    over = m.total_gib - (m.capacity_gib - m.reserve_gib)
    if top == "activations":
        recompute = {"none": "--recompute selective or full", "selective": "--recompute full"}.get(c.recompute)
        smaller_mb = "a smaller --micro-batch" if c.micro_batch > 1 else None
        others = ", ".join(x for x in (recompute, smaller_mb) if x)
        levers = (
            f"{others}, or more --tp (with --sp), --cp or --pp" if others else "more --tp (with --sp), --cp or --pp"
        )
    elif c.dp == 1:  # nothing to shard the states over: only more GPUs (or more HBM) shrink them
        levers = ("more nodes (data parallelism is 1, so --sharding cannot split anything) with more --tp / --pp / "
                  "--dp across them, or an instance with more HBM per GPU")  # fmt: skip
    elif top == "optimizer" and c.sharding == "none":
        levers = "--sharding zero1 (the optimizer state split over data parallelism), or more --tp / --pp"
    elif c.sharding in ("zero3", "fsdp", "hsdp"):
        levers = "more --tp / --pp, or more nodes to shard over"
    else:
        levers = "--sharding fsdp (weights, gradients and optimizer split over data parallelism), or more --tp / --pp"
    return (
        f"memory: {over:,.1f} GiB over; the largest part is {top} ({parts[top]:,.1f} GiB): try {levers}; "
        "fmstack plan train searches the layouts that fit"
    )
