"""`fmstack plan train` (the main job): search, rank, explain; the search options `fmstack scale` shares."""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from fmstack.catalog import load_catalog
from fmstack.catalog.schema import ModelArch
from fmstack.cli.common import (
    SearchCommand,
    SubcommandGroup,
    calibration_for,
    calibration_options,
    catalog_option,
    console,
    json_option,
    print_json,
)
from fmstack.cli.estimate_cmd import estimate_argv
from fmstack.cli.estimate_options import layout_options
from fmstack.cli.plan_gpus import MAX_GPU_COUNTS as MAX_GPU_COUNTS  # re-exported: plan_gpus is their home
from fmstack.cli.plan_gpus import SWEEP_POINTS as SWEEP_POINTS
from fmstack.cli.plan_gpus import _priced_only, build_clusters, sweep_nodes
from fmstack.cli.plan_gpus import parse_gpus as parse_gpus  # scale_cmd.py and tests import it from here
from fmstack.cli.plan_render import (
    SearchProgress,
    batch_notes,
    price_line,
    price_notes,
    render_plan,
    stack_notes,
    vpp_notes,
)
from fmstack.errors import InputError
from fmstack.fileio import check_output_path
from fmstack.perfmodel.batch_limits import check_batch
from fmstack.perfmodel.config import (
    DEFAULT_SEQ_LEN,
    PRECISION_CHOICES,
    RECOMPUTE_CHOICES,
    GradDtype,
    MasterWeights,
    OptimizerStateDtype,
    check_search_layout,
    default_seq_len,
)
from fmstack.perfmodel.plan_failures import CANDIDATES_PER_RESULT, TRAIN_OBJECTIVES
from fmstack.perfmodel.planner import PlanResult, SearchSpace, plan_training
from fmstack.perfmodel.scaling import ScalePoint, run_sweep
from fmstack.perfmodel.training import TrainingEstimate

PLAN_EXAMPLE = """Examples:

\b
  fmstack plan train --model llama3.1-405b --instance p5.48xlarge --gpus 16384 --tokens 15e12 --global-batch 2048

\b
  fmstack plan train --model llama3.1-70b --instance p5.48xlarge,p5en.48xlarge,p6-b200.48xlarge \\
      --gpus 512,1024 --tokens 2e12 --objective cost --html plan.html
"""


def with_layout(
    space: SearchSpace,
    optimizer_state_dtype: OptimizerStateDtype | None,
    master_weights: MasterWeights | None,
    fp8_param_gather: bool | None,
    grad_shard_buffer: bool | None,
    grad_dtype: GradDtype | None = None,
    reduce_dtype: GradDtype | None = None,
) -> SearchSpace:
    """``space`` with the storage layout of :func:`layout_options` (None: the default) on every row it searches
    (``plan train`` and ``scale``), checked as the planner checks it before anything is searched. fp32-params is
    FSDP's layout: the search keeps its FSDP / HSDP shardings only."""
    space = replace(
        space, optimizer_state_dtype=optimizer_state_dtype or "fp32", master_weights=master_weights or "fp32",
        fp8_param_gather=bool(fp8_param_gather), grad_shard_buffer=bool(grad_shard_buffer),
        grad_dtype=grad_dtype or "fp32", reduce_dtype=reduce_dtype,
    )  # fmt: skip
    if space.master_weights == "fp32-params":
        space = replace(space, sharding=tuple(s for s in space.sharding if s in ("fsdp", "hsdp")) or space.sharding)
    check_search_layout(space.precisions, space.optimizer_state_dtype, space.master_weights, space.fp8_param_gather,
                        grad_shard_buffer=space.grad_shard_buffer, shardings=space.sharding,
                        grad_dtype=space.grad_dtype, reduce_dtype=space.reduce_dtype)  # fmt: skip
    return space


def _space(
    seq_len: int | None,
    global_batch: int | None,
    precisions: str,
    recompute: str | None,
    overlap_ep: bool = True,
    model: ModelArch | None = None,
    overlap_tp: bool = True,
) -> SearchSpace:
    """The search space from the CLI options; ``seq_len`` None means the model's default (``default_seq_len``)."""
    if seq_len is None:
        seq_len = DEFAULT_SEQ_LEN if model is None else default_seq_len(model)
    precs = tuple(p.strip().lower() for p in precisions.split(","))
    for p in precs:
        if p not in PRECISION_CHOICES:
            raise InputError("precision", f"{p!r} unknown; allowed: {', '.join(PRECISION_CHOICES)}")
    rec = RECOMPUTE_CHOICES if recompute is None else tuple(r.strip() for r in recompute.split(","))
    for r in rec:
        if r not in RECOMPUTE_CHOICES:
            raise InputError("recompute", f"{r!r} unknown; allowed: {', '.join(RECOMPUTE_CHOICES)}")
    if global_batch is not None and global_batch <= 0:
        raise InputError("global_batch", f"must be > 0, got {global_batch}")
    if global_batch is not None:
        check_batch("global_batch", global_batch)
    if seq_len <= 0:
        raise InputError("seq_len", f"must be > 0, got {seq_len}")
    return SearchSpace(
        seq_len=seq_len, global_batch=global_batch, precisions=precs, recompute=rec, overlap_ep=overlap_ep,
        overlap_tp=overlap_tp,
    )  # fmt: skip


def _search_option_list(instance_help: str, gpus_help: str) -> list[Any]:
    return [
        click.option("--model", required=True, help="Zoo model name or a model YAML file."),
        click.option("--instance", required=True, help=instance_help),
        click.option("--gpus", required=True, help=gpus_help),
        click.option("--tokens", type=float, required=True, help="Tokens to train on (e.g. 15e12)."),
        click.option(
            "--objective",
            type=click.Choice(TRAIN_OBJECTIVES),
            default="time",
            show_default=True,
            help="Rank by time to train, cost, MFU, or time to train with failures, restarts and checkpoints.",
        ),
        click.option(
            "--seq-len", type=int, default=None, help="Sequence length (tokens) [min(8192, the model's context)]."
        ),
        click.option("--global-batch", type=int, default=None, help="Sequences per step [about 4M tokens]."),
        click.option(
            "--precision",
            "precisions",
            default="bf16",
            show_default=True,
            help="Precision(s) allowed, comma-separated (bf16,fp8).",
        ),
        click.option("--recompute", default=None, help="Recompute choices allowed [none,selective,full]."),
        click.option(
            "--overlap-tp/--no-overlap-tp",
            default=True,
            show_default=True,
            help="Allow overlapping the tensor-parallel collectives with the GEMMs on rows with tp > 1 "
            "(Megatron-LM --tp-comm-overlap, Transformer Engine userbuffers).",
        ),
        click.option(
            "--overlap-ep/--no-overlap-ep",
            default=True,
            show_default=True,
            help="MoE: allow overlapping the expert all-to-all with another micro-batch (Megatron-Core >= 0.14).",
        ),
    ]


def search_options(func: Any) -> Any:
    """The options of ``plan train``: the search space, several instances, a calibration profile."""
    func = calibration_options(func)  # innermost: listed after the options below, as before
    for option in reversed(
        _search_option_list(
            "Instance name(s), comma-separated, from the catalog.",
            "GPU count, list (512,1024) or range (512-4096[:step]).",
        )
    ):
        func = option(func)
    return catalog_option(func)


def sweep_options(func: Any) -> Any:
    """The options of ``scale``: ``plan train``'s search space for one instance (or UltraServer). The calibration
    flags are accepted but hidden so that ``scale`` can refuse them by name (it re-plans with the default curves)."""
    func = click.option("--calibration-force", is_flag=True, hidden=True)(func)
    func = click.option("--calibration", type=click.Path(path_type=Path), default=None, hidden=True)(func)
    for option in reversed(
        _search_option_list(
            "Instance or UltraServer name from the catalog (one).",
            "GPU count: the sweep's starting point (with --axis nodes, a list or range of counts gives the points).",
        )
    ):
        func = option(func)
    return catalog_option(func)


@click.group(cls=SubcommandGroup, epilog=PLAN_EXAMPLE)
def plan() -> None:
    """Search every configuration, rank it, explain the best: training (train), serving (serve) or an RL step (rl)."""


@plan.command("train", cls=SearchCommand, epilog=PLAN_EXAMPLE)
@search_options
@layout_options
@click.option("--top", type=int, default=10, show_default=True, help="How many configurations to show.")
@click.option("--html", "html_path", type=click.Path(path_type=Path), default=None, help="Write an HTML report.")
@json_option
def plan_train(
    model: str, instance: str, gpus: str, tokens: float, objective: str, seq_len: int | None, global_batch: int | None,
    precisions: str, recompute: str | None, overlap_tp: bool, overlap_ep: bool, calibration: Path | None,
    calibration_force: bool, catalog_dir: Path | None, top: int, html_path: Path | None, as_json: bool,
    optimizer_state_dtype: OptimizerStateDtype | None = None, master_weights: MasterWeights | None = None,
    fp8_param_gather: bool | None = None, grad_shard_buffer: bool | None = None, grad_dtype: GradDtype | None = None,
    reduce_dtype: GradDtype | None = None,
) -> None:  # fmt: skip
    """Find the best way to train MODEL on these instances: parallelism, time, cost and bottleneck."""
    if html_path is not None:
        check_output_path(html_path, field="html", example="plan.html")  # before the search, not after it
    cat = load_catalog(catalog_dir)
    arch = cat.model(model)
    clusters, skipped = build_clusters(cat, instance, gpus)
    if objective == "cost":
        clusters, skipped = _priced_only(clusters, skipped)
    space = with_layout(_space(seq_len, global_batch, precisions, recompute, overlap_ep, arch, overlap_tp),
                        optimizer_state_dtype, master_weights, fp8_param_gather, grad_shard_buffer, grad_dtype,
                        reduce_dtype)  # fmt: skip
    efficiency_for = calibration_for(calibration, clusters, calibration_force)
    with_failures = objective == "time-with-failures"
    if with_failures:
        objective = "time"
    with SearchProgress(as_json, len(clusters)) as tick:
        result = plan_training(arch, clusters, tokens=tokens, objective=objective, top=top * CANDIDATES_PER_RESULT if with_failures else top,
                               space=space, efficiency_for=efficiency_for, progress=tick)  # fmt: skip
    if with_failures:
        from fmstack.perfmodel.plan_failures import rerank_with_failures

        result = rerank_with_failures(result, arch, cat, top=top)
    scaling: list[ScalePoint] = []
    sweep_skipped: list[str] = []
    if html_path is not None:
        from fmstack.reports.html import write_html
        from fmstack.reports.plan_report import plan_html

        best = result.best
        base = next(c for c in clusters if (c.name or c.instance.name) == best.instance and c.num_gpus == best.num_gpus)
        try:
            sweep = run_sweep(cat, arch, axis="nodes", values=[str(v) for v in sweep_nodes(base)], instance=best.instance,
                              gpus=best.num_gpus, tokens=tokens, objective=objective, space=space)  # fmt: skip
            scaling, sweep_skipped = sweep.points, [f"scaling sweep: nodes {s}" for s in sweep.skipped]
        except InputError:
            scaling = []  # no size of the sweep fits in memory; the report shows what exists
    commands = [
        shlex.join(estimate_argv(model, est.instance, est.num_gpus, est.config, catalog_dir=catalog_dir,
                                 calibration=calibration, calibration_force=calibration_force, tokens=tokens))
        for est in result.ranked
    ]  # fmt: skip
    notes = [*batch_notes(result, batch_given=global_batch is not None), *stack_notes(result),
             *price_notes(result, clusters), *vpp_notes(result)]  # fmt: skip
    if html_path is not None:
        source = None if efficiency_for is None else efficiency_for(clusters[0]).source
        line = price_line(result)
        write_html(html_path, plan_html(result, scaling, scaling_of=f"{best.instance}, re-planned at each size",
                                        efficiency_source=source, command=commands[0],
                                        notes=[*([line] if line else []), *skipped, *notes, *sweep_skipped]))  # fmt: skip
    if as_json:
        data = {**plan_json(result, skipped=skipped, commands=commands), "notes": notes}
        if efficiency_for is not None:
            data["efficiency_source"] = efficiency_for(clusters[0]).source
        print_json(data)
        return
    render_plan(result, skipped=skipped + notes, command=commands[0])
    if efficiency_for is not None:
        console().print(f"efficiency: {efficiency_for(clusters[0]).source}", markup=False)
    if html_path is not None:
        console().print(f"report written to {html_path}")


def plan_json(
    result: PlanResult, *, skipped: list[str] | None = None, commands: list[str] | None = None
) -> dict[str, Any]:
    """The plan as JSON; ``estimate_command`` (top level: the best; per row: that row) reproduces a configuration."""
    resilience = result.resilience or [{} for _ in result.ranked]
    cmds: list[str | None] = list(commands) if commands is not None else [None for _ in result.ranked]
    # the price behind cost_usd (cost_usd = time_to_train_s / 3600 x cost_per_hour_usd), so a reader can check it
    priced: list[dict[str, Any]] = [
        {"num_nodes": n, "cost_per_hour_usd": h}
        for n, h in zip(result.num_nodes, result.cost_per_hour_usd, strict=True)
    ] or [{} for _ in result.ranked]
    folded = result.vpp_variants or [1 for _ in result.ranked]
    rows = zip(result.ranked, result.time_to_train_s, result.cost_usd, resilience, cmds, priced, folded, strict=True)
    return {
        "model": result.model,
        "objective": result.objective,
        "considered": result.considered,
        "rejected_shape": result.rejected_shape,
        "rejected_memory": result.rejected_memory,
        "skipped": list(skipped or []),
        "vpp_folded": sum(result.vpp_variants) - len(result.vpp_variants),
        "estimate_command": cmds[0],
        "ranked": [
            # ideal_time_s (no failures) in every row, as estimate train --tokens gives it: a script comparing the
            # two reads the same key; time_to_train_s includes failures only with objective time-with-failures
            {
                **est.to_json(),
                "ideal_time_s": _ideal_s(result, est),
                **res,
                "time_to_train_s": t,
                "cost_usd": c,
                **price,
                "estimate_command": cmd,
                # the row is its layout's best virtual-stage count (config.virtual_stages) among this many that fit
                "vpp_variants": v,
            }
            for est, t, c, res, cmd, price, v in rows
        ],
    }


def _ideal_s(result: PlanResult, est: TrainingEstimate) -> float | None:
    return result.tokens / est.tokens_per_s if result.tokens else None


from fmstack.cli.plan_serve_cmd import plan_serve_cmd  # noqa: E402

plan.add_command(plan_serve_cmd, "serve")

from fmstack.cli.rl_plan_cmd import plan_rl_cmd  # noqa: E402

plan.add_command(plan_rl_cmd, "rl")
