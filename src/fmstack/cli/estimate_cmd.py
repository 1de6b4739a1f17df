"""`fmstack estimate train`: one configuration, its step time, MFU, memory and bottleneck."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from fmstack.catalog import load_catalog
from fmstack.catalog.topology import Cluster, build_cluster, resolve_instance
from fmstack.cli.common import (
    SubcommandGroup,
    calibrated,
    calibration_argv,
    calibration_options,
    catalog_option,
    choice,
    console,
    duration_text,
    json_option,
    parts_table,
    print_json,
    whole_nodes_hint,
)
from fmstack.errors import InputError
from fmstack.perfmodel.config import (
    PRECISION_CHOICES,
    RECOMPUTE_CHOICES,
    RECOMPUTE_MODULES,
    SHARDING_CHOICES,
    TrainConfig,
    default_seq_len,
    fill_defaults,
)
from fmstack.perfmodel.pricing import cost_json
from fmstack.perfmodel.training import TrainingEstimate, estimate_training

TRAIN_EXAMPLE = """Example:

\b
  fmstack estimate train --model llama3.1-70b --instance p5.48xlarge --nodes 64 --tp 8 --pp 4 \\
      --micro-batch 1 --global-batch 1024 --seq-len 8192 --recompute selective
"""


@click.group(
    cls=SubcommandGroup,
    epilog="Example:\n\n  fmstack estimate train --model llama3.1-8b --instance p5.48xlarge --nodes 1",
)
def estimate() -> None:
    """Estimate one workload on one cluster: train, serve, or rl (one PPO / GRPO step)."""


def cluster_options(func: Any) -> Any:
    """--model, --instance, --nodes / --gpus, --catalog."""
    for option in reversed(
        [
            click.option("--model", required=True, help="Zoo model name or a model YAML file."),
            click.option("--instance", required=True, help="Instance or UltraServer name from the catalog."),
            click.option(
                "--nodes", type=int, default=None, help="Number of instances (nodes) [1, or --gpus / GPUs per node]."
            ),
            click.option("--gpus", type=int, default=None, help="Number of GPUs (a multiple of GPUs per node)."),
        ]
    ):
        func = option(func)
    return catalog_option(func)


def resilience_options(func: Any) -> Any:
    """Checkpoint tier, FSx size, recovery mode, spares and failure rate for the time to train."""
    from fmstack.perfmodel.goodput import RecoveryMode

    for option in reversed(
        [
            click.option("--checkpoint-tier", default="fsx-persistent-1000", show_default=True,
                         help="Storage tier checkpoints are written to (catalog storage name)."),
            click.option("--fsx-capacity-tib", type=float, default=None,
                         help="FSx capacity in TiB [sized to keep GPUs fed and checkpoints fast]."),
            click.option("--recovery", type=click.Choice([m.value for m in RecoveryMode]),
                         default=RecoveryMode.checkpoint_restart.value, show_default=True, help="Recovery mode."),
            click.option("--spares", type=int, default=0, show_default=True, help="Spare nodes for auto-resume."),
            click.option("--mtbf-hours", type=float, default=None, help="Override the per-node MTBF in hours."),
            click.option("--failure-model", default="llama3", show_default=True,
                         help="Failure model (llama3, meta-rsc1, meta-rsc2)."),
            click.option("--sync-checkpoint", is_flag=True, help="Synchronous checkpoints (default: async)."),
        ]
    ):  # fmt: skip
        func = option(func)
    return func


RESILIENCE_FLAGS = ("checkpoint_tier", "fsx_capacity_tib", "recovery", "spares", "mtbf_hours", "failure_model",
                    "sync_checkpoint")  # fmt: skip
"""The parameters of :func:`resilience_options`: they shape the time to train, so they need ``--tokens``."""


def _refuse_resilience_without_tokens() -> None:
    """A resilience flag given on the command line without ``--tokens`` would change nothing: say so."""
    ctx = click.get_current_context()
    for name in RESILIENCE_FLAGS:
        if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE:
            flag = name.replace("_", "-")
            raise InputError(flag, f"--{flag} shapes the time to train with checkpoints and failures; add --tokens N")


def resolve_nodes(nodes: int | None, gpus: int | None, gpus_per_node: int) -> int:
    if nodes is None and gpus is None:
        return 1
    if nodes is not None and gpus is not None and nodes * gpus_per_node != gpus:
        raise InputError("gpus", f"--gpus({gpus}) != --nodes({nodes}) * {gpus_per_node} GPUs per node")
    if gpus is not None:
        if gpus <= 0:
            raise InputError("gpus", f"must be a positive number of GPUs, got {gpus}")
        if gpus % gpus_per_node:
            raise InputError(
                "gpus",
                f"{gpus} is not a multiple of {gpus_per_node} GPUs per node{whole_nodes_hint(gpus, gpus_per_node)}",
            )
        return gpus // gpus_per_node
    assert nodes is not None
    return nodes


@estimate.command("train", epilog=TRAIN_EXAMPLE)
@cluster_options
@click.option("--tp", type=int, default=None, help="Tensor parallel degree [1].")
@click.option("--pp", type=int, default=None, help="Pipeline stages [1].")
@click.option("--dp", type=int, default=None, help="Data parallel degree [remaining GPUs].")
@click.option("--cp", type=int, default=None, help="Context parallel degree [1].")
@click.option("--ep", type=int, default=None, help="Expert parallel degree (MoE) [1].")
@click.option("--etp", type=int, default=None, help="Tensor parallel degree inside experts [1].")
@click.option("--vpp", "virtual_stages", type=int, default=None, help="Virtual stages per pipeline rank [1].")
@click.option("--sp/--no-sp", "sequence_parallel", default=None, help="Sequence parallelism [on when tp > 1].")
@click.option("--micro-batch", type=int, default=None, help="Sequences per micro-batch [1].")
@click.option(
    "--global-batch",
    type=int,
    default=None,
    help="Sequences per step [dp * mb, one micro-batch per replica as Megatron's default; with pp > 1, "
    "dp * mb * 4 * pp, so the 1F1B bubble (pp - 1) / micro-batches stays <= 25 %].",
)
@click.option("--seq-len", type=int, default=None, help="Sequence length in tokens [min(8192, the model's context)].")
@click.option("--precision", type=choice(PRECISION_CHOICES), default=None, help="Linear-layer precision [bf16].")
@click.option("--recompute", type=choice(RECOMPUTE_CHOICES), default=None, help="Activation recomputation [none].")
@click.option(
    "--recompute-modules",
    default=None,
    help="Megatron-Core selective recompute modules, comma-separated (implies --recompute selective): "
    f"{', '.join(RECOMPUTE_MODULES)} [core_attn].",
)
@click.option(
    "--recompute-layers", type=int, default=None, help="Fully recompute the first N layers of each pipeline chunk [0]."
)
@click.option("--sharding", type=choice(SHARDING_CHOICES), default=None, help="ZeRO / FSDP sharding [zero1].")
@click.option(
    "--hsdp-shard-size",
    type=int,
    default=None,
    help=f"With --sharding hsdp: data-parallel ranks per sharding group, a divisor of dp [{TrainConfig().hsdp_shard_size}].",
)
@click.option("--overlap-dp/--no-overlap-dp", default=None, help="Overlap DP communication [on].")
@click.option("--overlap-tp/--no-overlap-tp", default=None, help="Overlap TP communication [off].")
@click.option(
    "--overlap-ep/--no-overlap-ep", default=None, help="Overlap the MoE all-to-all with another micro-batch [off]."
)
@click.option("--flash/--no-flash", "flash_attention", default=None, help="Fused attention [on].")
@click.option(
    "--tokens", type=float, default=None, help="Token budget: time to train it with checkpoints and failures."
)
@calibration_options
@resilience_options
@json_option
def train_cmd(
    model: str,
    instance: str,
    nodes: int | None,
    gpus: int | None,
    catalog_dir: Path | None,
    tokens: float | None,
    calibration: Path | None,
    calibration_force: bool,
    as_json: bool,
    checkpoint_tier: str,
    fsx_capacity_tib: float | None,
    recovery: str,
    spares: int,
    mtbf_hours: float | None,
    failure_model: str,
    sync_checkpoint: bool,
    **degrees: Any,
) -> None:
    """Predict one training step: time, MFU, memory per GPU and the bottleneck.

    With --tokens, also the checkpoint size and write time, the checkpoint interval (Young / Daly), the
    expected failures at this scale, goodput, the FSx capacity needed, and the wall-clock time to train.
    """
    cat = load_catalog(catalog_dir)
    arch = cat.model(model)
    inst_gpus = _gpus_per_node(cat, instance)
    cluster = build_cluster(cat, instance, resolve_nodes(nodes, gpus, inst_gpus))
    modules = degrees.pop("recompute_modules")
    if modules is not None:
        degrees["recompute_modules"] = tuple(m.strip() for m in modules.split(",") if m.strip())
    if degrees.get("seq_len") is None:
        degrees["seq_len"] = default_seq_len(arch)
    if degrees.get("hsdp_shard_size") is not None and degrees.get("sharding") != "hsdp":
        raise InputError("hsdp-shard-size", "sets the HSDP shard group; it needs --sharding hsdp")
    cfg = fill_defaults(cluster.num_gpus, degrees)
    efficiency = calibrated(calibration, cluster, calibration_force)
    if tokens is not None and not (math.isfinite(tokens) and tokens > 0):
        raise InputError("tokens", f"must be > 0 and finite, got {tokens:g}")
    if tokens is None:
        _refuse_resilience_without_tokens()
    est = estimate_training(arch, cluster, cfg, efficiency=efficiency)
    data = est.to_json()
    if efficiency is not None:
        data["efficiency_source"] = efficiency.source
    if tokens is not None:
        from fmstack.perfmodel.failures import load_failure_model
        from fmstack.perfmodel.resilience import plan_resilience

        ideal_s = est.time_to_train_s(tokens)
        plan = plan_resilience(
            model=arch, cluster=cluster, catalog=cat, step_time_s=est.step_time_s, train_time_s=ideal_s,
            tokens_per_s=est.tokens_per_s, tier=checkpoint_tier, fsx_capacity_tib=fsx_capacity_tib,
            async_save=not sync_checkpoint, recovery=recovery, spares=spares,
            failure_model=load_failure_model(failure_model, node_mtbf_h=mtbf_hours),
        )  # fmt: skip
        data.update(plan.to_json())
        data["ideal_time_to_train_s"] = ideal_s
        data["time_to_train_days"] = data["time_to_train_s"] / 86400
        data.update(cost_json(cluster, ideal_s, data["time_to_train_s"]))
    if as_json:
        print_json(data)
        return
    render_estimate(est, data, cost_line=_cost_text(data, cluster) if tokens is not None else None)
    if efficiency is not None:
        console().print(f"efficiency: {efficiency.source}", markup=False)


def estimate_argv(
    model: str,
    instance: str,
    num_gpus: int,
    cfg: TrainConfig,
    *,
    catalog_dir: Path | None = None,
    calibration: Path | None = None,
    calibration_force: bool = False,
    tokens: float | None = None,
) -> list[str]:
    """The ``fmstack estimate train`` arguments that rebuild ``cfg`` exactly on this cluster (with ``tokens``, also
    the time to train, checkpoints and goodput).

    Degrees, batch, sequence length, precision, recomputation and sharding are always written (so the line does not
    depend on estimate's defaults); on/off switches only where they differ from estimate's default; the HSDP shard
    group with hsdp where it is not the default. ``cfg``'s grad_bytes and reduce_bytes have no flag: they must be
    TrainConfig's defaults (the planner's are).
    """
    argv = ["fmstack", "estimate", "train", "--model", model, "--instance", instance, "--gpus", str(num_gpus)]
    argv += ["--tp", str(cfg.tp), "--pp", str(cfg.pp), "--dp", str(cfg.dp), "--cp", str(cfg.cp)]
    if cfg.ep > 1 or cfg.etp > 1:
        argv += ["--ep", str(cfg.ep), "--etp", str(cfg.etp)]
    if cfg.virtual_stages > 1:
        argv += ["--vpp", str(cfg.virtual_stages)]
    argv += ["--micro-batch", str(cfg.micro_batch), "--global-batch", str(cfg.global_batch)]
    argv += ["--seq-len", str(cfg.seq_len), "--precision", cfg.precision, "--recompute", cfg.recompute]
    if cfg.recompute_modules:
        argv += ["--recompute-modules", ",".join(cfg.recompute_modules)]
    if cfg.recompute_layers:
        argv += ["--recompute-layers", str(cfg.recompute_layers)]
    argv += ["--sharding", cfg.sharding]
    if cfg.sharding == "hsdp" and cfg.hsdp_shard_size != TrainConfig().hsdp_shard_size:
        argv += ["--hsdp-shard-size", str(cfg.hsdp_shard_size)]
    switches = (
        ("sp", cfg.sequence_parallel, cfg.tp > 1), ("overlap-dp", cfg.overlap_dp, True),
        ("overlap-tp", cfg.overlap_tp, False), ("overlap-ep", cfg.overlap_ep, False),
        ("flash", cfg.flash_attention, True),
    )  # fmt: skip
    for flag, value, default in switches:
        if value != default:
            argv.append(f"--{flag}" if value else f"--no-{flag}")
    if catalog_dir is not None:
        argv += ["--catalog", str(catalog_dir)]
    argv += calibration_argv(calibration, calibration_force)
    if tokens is not None:
        short = f"{tokens:g}".replace("e+", "e")
        argv += ["--tokens", short if float(short) == tokens else repr(tokens)]
    return argv


def _gpus_per_node(cat: Any, instance: str) -> int:
    return int(resolve_instance(cat, instance).num_gpus)


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


def _cost_text(data: dict[str, Any], cluster: Cluster) -> str:
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


from fmstack.cli.rl_cmd import rl_cmd  # noqa: E402
from fmstack.cli.serve_cmd import serve_cmd  # noqa: E402

estimate.add_command(serve_cmd, "serve")
estimate.add_command(rl_cmd, "rl")
