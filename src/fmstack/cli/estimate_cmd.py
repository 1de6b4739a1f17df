"""`fmstack estimate train`: one configuration, its step time, MFU, memory and bottleneck.

This file parses and computes; the shared options are in ``estimate_options.py``, the printing in
``estimate_render.py``. ``estimate_argv`` writes a configuration back as this command's arguments (``plan train``'s
``estimate_command``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from fmstack.catalog import load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.cli.common import (
    SubcommandGroup,
    calibrated,
    calibration_argv,
    calibration_options,
    choice,
    console,
    json_option,
    print_json,
)
from fmstack.cli.estimate_options import (
    cluster_options,
    gpus_per_node,
    layout_argv,
    layout_options,
    refuse_resilience_without_tokens,
    resilience_options,
    resolve_nodes,
)
from fmstack.cli.estimate_render import cost_text, render_estimate
from fmstack.cli.estimate_render import memory_hint as memory_hint  # where it lived before the split
from fmstack.errors import InputError
from fmstack.perfmodel.batch_limits import check_tokens
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
from fmstack.perfmodel.training import estimate_training

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
@layout_options
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
    inst_gpus = gpus_per_node(cat, instance)
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
    if tokens is not None:
        check_tokens(tokens)
    if tokens is None:
        refuse_resilience_without_tokens()
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
    render_estimate(est, data, cost_line=cost_text(data, cluster) if tokens is not None else None)
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
    depend on estimate's defaults); on/off switches and the storage layout only where they differ from the default; the HSDP shard
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
    argv += layout_argv(cfg)
    if catalog_dir is not None:
        argv += ["--catalog", str(catalog_dir)]
    argv += calibration_argv(calibration, calibration_force)
    if tokens is not None:
        short = f"{tokens:g}".replace("e+", "e")
        argv += ["--tokens", short if float(short) == tokens else repr(tokens)]
    return argv


from fmstack.cli.rl_cmd import rl_cmd  # noqa: E402
from fmstack.cli.serve_cmd import serve_cmd  # noqa: E402

estimate.add_command(serve_cmd, "serve")
estimate.add_command(rl_cmd, "rl")
