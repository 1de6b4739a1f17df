"""`fmstack plan train` (the main job) and `fmstack scale`: search, rank, explain, sweep."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import click
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from fmstack.catalog import load_catalog
from fmstack.catalog.loader import Catalog
from fmstack.catalog.topology import Cluster, build_cluster, resolve_instance
from fmstack.cli.common import catalog_option, console, json_option, print_json
from fmstack.cli.estimate_cmd import estimate_argv
from fmstack.errors import InputError
from fmstack.perfmodel.config import PRECISION_CHOICES, RECOMPUTE_CHOICES, describe_config
from fmstack.perfmodel.efficiency import Efficiency
from fmstack.perfmodel.planner import OBJECTIVES, PlanResult, SearchSpace, plan_training
from fmstack.perfmodel.scaling import AXES, EFA_GENERATIONS, GPU_GENERATIONS, ScalePoint, SweepResult, run_sweep
from fmstack.reports.plan_report import RANKED_HEADER, ranked_rows

PLAN_EXAMPLE = """Examples:

\b
  fmstack plan train --model llama3.1-405b --instance p5.48xlarge --gpus 16384 --tokens 15e12 --global-batch 2048

\b
  fmstack plan train --model llama3.1-70b --instance p5.48xlarge,p5en.48xlarge,p6-b200.48xlarge \\
      --gpus 512,1024 --tokens 2e12 --objective cost --html plan.html
"""


def parse_gpus(text: str) -> list[int]:
    """'512', '512,1024', '512-4096' (doubling) or '512-2048:512' (step)."""
    out: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part:
                lo_text, hi_text = part.split("-", 1)
                step = None
                if ":" in hi_text:
                    hi_text, step_text = hi_text.split(":", 1)
                    step = int(step_text)
                lo, hi = int(lo_text), int(hi_text)
                value = lo
                while value <= hi:
                    out.append(value)
                    value = value + step if step else value * 2
            else:
                out.append(int(float(part)))
    except ValueError:
        raise InputError("gpus", f"{text!r} is not a count, a list (512,1024) or a range (512-4096[:step])") from None
    if not out or any(v <= 0 for v in out):
        raise InputError("gpus", f"must be positive GPU counts, got {text!r}")
    return out


def build_clusters(cat: Catalog, instances: str, gpus: str) -> tuple[list[Cluster], list[str]]:
    """Every valid (instance, GPU count) cluster, and a one-line note for each pair skipped for its shape.

    A pair is skipped when the count is not whole nodes or whole UltraServers of that instance (2048 GPUs of a
    72-GPU UltraServer), so a comparison of several instances still plans the others; InputError (the first
    pair's) only when no pair is valid. An unknown instance name is an error at once.
    """
    names = [n.strip() for n in instances.split(",") if n.strip()]
    if not names:
        raise InputError("instance", f"give at least one instance name, got {instances!r}")
    counts = parse_gpus(gpus)
    clusters: list[Cluster] = []
    skipped: list[str] = []
    first: InputError | None = None
    for name in names:
        per_node = resolve_instance(cat, name).num_gpus
        for count in counts:
            try:
                if count % per_node:
                    raise InputError("gpus", f"{count} is not a multiple of {per_node} GPUs per {name} node")
                clusters.append(build_cluster(cat, name, count // per_node))
            except InputError as exc:
                first = first or exc
                skipped.append(f"{name} at {count} GPUs skipped: {exc}")
    if not clusters:
        assert first is not None
        raise first
    return clusters, skipped


def _space(
    seq_len: int, global_batch: int | None, precisions: str, recompute: str | None, overlap_ep: bool = True
) -> SearchSpace:
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
    if seq_len <= 0:
        raise InputError("seq_len", f"must be > 0, got {seq_len}")
    return SearchSpace(
        seq_len=seq_len, global_batch=global_batch, precisions=precs, recompute=rec, overlap_ep=overlap_ep
    )


def _efficiency_for(calibration: Path | None, clusters: list[Cluster], force: bool) -> Any:
    """Each cluster's efficiency from the profile; refused (before searching) where a cluster has another GPU."""
    if calibration is None:
        if force:
            raise InputError("calibration-force", "applies a --calibration profile; none was given")
        return None
    from fmstack.perfmodel.calibration import load_profile
    from fmstack.perfmodel.efficiency import check_profile_gpu, efficiency_from_profile

    profile = load_profile(calibration)
    if not force:
        for cluster in clusters:
            check_profile_gpu(profile, cluster.gpu)

    def eff(cluster: Cluster) -> Efficiency:
        return efficiency_from_profile(profile, cluster.gpu, force=force)

    return eff


def search_options(func: Any) -> Any:
    for option in reversed(
        [
            click.option("--model", required=True, help="Zoo model name or a model YAML file."),
            click.option("--instance", required=True, help="Instance name(s), comma-separated, from the catalog."),
            click.option("--gpus", required=True, help="GPU count, list (512,1024) or range (512-4096[:step])."),
            click.option("--tokens", type=float, required=True, help="Tokens to train on (e.g. 15e12)."),
            click.option(
                "--objective",
                type=click.Choice((*OBJECTIVES, "time-with-failures")),
                default="time",
                show_default=True,
                help="Rank by time to train, cost, or MFU.",
            ),
            click.option("--seq-len", type=int, default=8192, show_default=True, help="Sequence length (tokens)."),
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
                "--overlap-ep/--no-overlap-ep",
                default=True,
                show_default=True,
                help="MoE: allow overlapping the expert all-to-all with another micro-batch (Megatron-Core >= 0.14).",
            ),
            click.option(
                "--calibration",
                type=click.Path(path_type=Path),
                default=None,
                help="Calibration profile JSON (fmstack bench --out).",
            ),
            click.option(
                "--calibration-force",
                is_flag=True,
                help="Apply --calibration even if it was measured on a GPU other than the cluster's.",
            ),
        ]
    ):
        func = option(func)
    return catalog_option(func)


@click.group(epilog=PLAN_EXAMPLE)
def plan() -> None:
    """Search every configuration, rank it, explain the best (training; serving when available)."""


@plan.command("train", epilog=PLAN_EXAMPLE)
@search_options
@click.option("--top", type=int, default=10, show_default=True, help="How many configurations to show.")
@click.option("--html", "html_path", type=click.Path(path_type=Path), default=None, help="Write an HTML report.")
@json_option
def plan_train(
    model: str, instance: str, gpus: str, tokens: float, objective: str, seq_len: int, global_batch: int | None,
    precisions: str, recompute: str | None, overlap_ep: bool, calibration: Path | None, calibration_force: bool,
    catalog_dir: Path | None, top: int, html_path: Path | None, as_json: bool,
) -> None:  # fmt: skip
    """Find the best way to train MODEL on these instances: parallelism, time, cost and bottleneck."""
    cat = load_catalog(catalog_dir)
    arch = cat.model(model)
    clusters, skipped = build_clusters(cat, instance, gpus)
    space = _space(seq_len, global_batch, precisions, recompute, overlap_ep)
    efficiency_for = _efficiency_for(calibration, clusters, calibration_force)
    with_failures = objective == "time-with-failures"
    if with_failures:
        objective = "time"
    with _progress(as_json, len(clusters)) as tick:
        result = plan_training(arch, clusters, tokens=tokens, objective=objective, top=top * 5 if with_failures else top,
                               space=space, efficiency_for=efficiency_for, progress=tick)  # fmt: skip
    if with_failures:
        from fmstack.perfmodel.plan_failures import rerank_with_failures

        result = rerank_with_failures(result, arch, cat, top=top)
    scaling: list[ScalePoint] = []
    if html_path is not None:
        from fmstack.reports.html import write_html
        from fmstack.reports.plan_report import plan_html

        best = result.best
        base_nodes = best.num_gpus // resolve_instance(cat, best.instance).num_gpus
        node_values = sorted({max(1, base_nodes // 4), max(1, base_nodes // 2), base_nodes, base_nodes * 2})
        try:
            scaling = run_sweep(cat, arch, axis="nodes", values=[str(v) for v in node_values], instance=best.instance,
                                gpus=best.num_gpus, tokens=tokens, objective=objective, space=space).points  # fmt: skip
        except InputError:
            scaling = []  # a smaller point may not fit in memory; the report shows what exists
        write_html(html_path, plan_html(result, scaling))
    commands = [
        shlex.join(estimate_argv(model, est.instance, est.num_gpus, est.config, catalog_dir=catalog_dir,
                                 calibration=calibration, calibration_force=calibration_force, tokens=tokens))
        for est in result.ranked
    ]  # fmt: skip
    if as_json:
        print_json(plan_json(result, skipped=skipped, commands=commands))
        return
    render_plan(result, skipped=skipped, command=commands[0])
    if html_path is not None:
        console().print(f"report written to {html_path}")


def plan_json(
    result: PlanResult, *, skipped: list[str] | None = None, commands: list[str] | None = None
) -> dict[str, Any]:
    """The plan as JSON; ``estimate_command`` (top level: the best; per row: that row) reproduces a configuration."""
    resilience = result.resilience or [{} for _ in result.ranked]
    cmds: list[str | None] = list(commands) if commands is not None else [None for _ in result.ranked]
    rows = zip(result.ranked, result.time_to_train_s, result.cost_usd, resilience, cmds, strict=True)
    return {
        "model": result.model,
        "objective": result.objective,
        "considered": result.considered,
        "rejected_shape": result.rejected_shape,
        "rejected_memory": result.rejected_memory,
        "skipped": list(skipped or []),
        "estimate_command": cmds[0],
        "ranked": [
            {**est.to_json(), **res, "time_to_train_s": t, "cost_usd": c, "estimate_command": cmd}
            for est, t, c, res, cmd in rows
        ],
    }


def render_plan(result: PlanResult, *, skipped: list[str] | None = None, command: str | None = None) -> None:
    out = console()
    table = Table(*RANKED_HEADER, title=f"best ways to train {result.model} (by {result.objective})",
                  title_justify="left")  # fmt: skip
    for row in ranked_rows(result):
        table.add_row(*row)
    out.print(table)
    out.print(
        f"{result.considered:,} configurations considered, {result.rejected_shape:,} rejected for shape, "
        f"{result.rejected_memory:,} rejected for memory"
    )
    if result.resilience:
        out.print("days and cost include the expected time lost to failures, restarts and checkpoints", markup=False)
    else:
        out.print("days and cost assume no failures; --objective time-with-failures adds failures, restarts and "
                  "checkpoints", markup=False)  # fmt: skip
    best = result.best
    out.print(f"best: [bold]{describe_config(best.config)}[/] on {best.num_gpus} x {best.instance} GPUs")
    out.print(f"bottleneck: [bold]{best.bottleneck}[/]")
    if command is not None:
        out.print("reproduce the best with:", markup=False)
        out.print(command, markup=False, soft_wrap=True)
    for note in skipped or []:
        out.print(f"note: {note}", markup=False, soft_wrap=True)


class _progress:
    """A progress bar over clusters when the search is long enough to need one (and not for --json)."""

    def __init__(self, quiet: bool, total: int) -> None:
        self.bar: Progress | None = None
        if not quiet and total > 1:
            self.bar = Progress(TextColumn("searching"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                                TimeElapsedColumn(), console=console(), transient=True)  # fmt: skip
            self.task = self.bar.add_task("search", total=total)

    def __enter__(self) -> Any:
        if self.bar is not None:
            self.bar.start()
            bar, task = self.bar, self.task
            return lambda done, _total: bar.update(task, completed=done)
        return None

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


SCALE_EXAMPLE = """Examples:

\b
  fmstack scale --model llama3.1-70b --instance p5.48xlarge --gpus 512 --tokens 2e12 --axis nodes \\
      --values 16,32,64,128,256 --global-batch 1024

\b
  fmstack scale --model llama3.1-405b --instance p5.48xlarge --gpus 4096 --tokens 15e12 --axis gpu

The global batch is held fixed (strong scaling) at --global-batch or, without it, at the first point's
default (about 4M tokens); a point that cannot run at it says so. A GPU kind whose node count must be a
multiple (18 p6e-gb200.36xlarge per u-p6e-gb200x72) is rounded to the nearest valid size, stated per point.
"""

VALUES_HELP = (
    "Comma-separated values. nodes: node counts [--gpus/node x 1,2,4,8]; gpu: instance or UltraServer names "
    f"[{','.join(GPU_GENERATIONS)}]; efa: scale-out fabrics [{','.join(EFA_GENERATIONS)}]; nvlink: NVLink "
    "domain sizes in GPUs [8,16,32,72]; seq-len: tokens [2048,...,32768]."
)


@click.command(epilog=SCALE_EXAMPLE)
@search_options
@click.option("--axis", type=click.Choice(AXES), required=True, help="What to sweep.")
@click.option("--values", default=None, help=VALUES_HELP)
@click.option("--weak", is_flag=True, help="With --axis nodes: grow the global batch with the GPUs (weak scaling).")
@click.option("--html", "html_path", type=click.Path(path_type=Path), default=None, help="Write an HTML report.")
@json_option
def scale(
    model: str, instance: str, gpus: str, tokens: float, objective: str, seq_len: int, global_batch: int | None,
    precisions: str, recompute: str | None, overlap_ep: bool, calibration: Path | None, calibration_force: bool,
    catalog_dir: Path | None, axis: str, values: str | None, weak: bool, html_path: Path | None, as_json: bool,
) -> None:  # fmt: skip
    """Sweep one axis (nodes, GPU generation, EFA generation, NVLink domain, sequence length) and re-plan.

    --gpus is the sweep's starting point (one count); every point is the planner's best configuration.
    """
    if calibration is not None or calibration_force:
        # each point re-plans with the default curves (and the gpu axis changes the GPU the profile was measured on)
        raise InputError(
            "calibration",
            "fmstack scale does not apply a calibration profile; run fmstack plan train --calibration at each point",
        )
    cat = load_catalog(catalog_dir)
    arch = cat.model(model)
    counts = parse_gpus(gpus)
    if len(counts) != 1:
        raise InputError("gpus", "scale takes one GPU count (the sweep's starting point)")
    space = _space(seq_len, global_batch, precisions, recompute, overlap_ep)
    defaults = {
        "nodes": ",".join(str(max(1, counts[0] // resolve_instance(cat, instance).num_gpus * f)) for f in (1, 2, 4, 8)),
        "gpu": ",".join(GPU_GENERATIONS), "efa": ",".join(EFA_GENERATIONS), "nvlink": "8,16,32,72",
        "seq-len": "2048,4096,8192,16384,32768",
    }  # fmt: skip
    items = [v.strip() for v in (values or defaults[axis]).split(",") if v.strip()]
    with _progress(as_json, len(items)) as tick:
        result = run_sweep(cat, arch, axis=axis, values=items, instance=instance, gpus=counts[0], tokens=tokens,
                           objective=objective, space=space, weak=weak, progress=tick)  # fmt: skip
    points = result.points
    if html_path is not None:
        from fmstack.reports.html import Section, html_page, write_html
        from fmstack.reports.plan_report import scaling_figure

        write_html(html_path, html_page(f"fmstack scale: {arch.name} over {axis}",
                                        [Section(title=axis, figures=[scaling_figure(points, axis)])]))  # fmt: skip
    if as_json:
        from dataclasses import asdict

        print_json({"model": arch.name, "axis": axis, "weak": weak, "reference_global_batch": result.reference_global_batch,
                    "points": [asdict(p) for p in points], "skipped": result.skipped})  # fmt: skip
        return
    render_scale(arch.name, axis, weak, result)


EFFICIENCY_HEADER = {"strong": "strong-scaling eff.", "weak": "weak-scaling eff.", "relative": "vs first"}
"""The efficiency column: tokens/s per GPU relative to the first point, named for what it measures."""


def render_scale(model: str, axis: str, weak: bool, result: SweepResult) -> None:
    points = result.points
    eff_header = EFFICIENCY_HEADER["relative" if axis != "nodes" else "weak" if weak else "strong"]
    extra = ("GB/s/node", "latency us") if axis == "efa" else ()
    title = f"{model}: scaling over {axis}"
    if result.reference_global_batch is not None:
        held = "grown with the GPUs from" if weak else "held at"
        title += f" (global batch {held} {result.reference_global_batch} sequences)"
    table = Table(axis, "GPUs", "global batch", *extra, "step s", "MFU %", "tokens/s", "tokens/s/GPU", eff_header,
                  "days", "cost $", "configuration", "bottleneck", title=title,
                  title_justify="left")  # fmt: skip
    for p in points:
        mark = "*" if p.global_batch_changed else ""
        net = (f"{p.network_bw_gbps_per_node:,g}", f"{p.network_latency_us:g}") if axis == "efa" else ()
        table.add_row(p.value, str(p.num_gpus), f"{p.global_batch}{mark}", *net, f"{p.step_time_s:.2f}",
                      f"{p.mfu * 100:.1f}", f"{p.tokens_per_s:,.0f}", f"{p.tokens_per_s_per_gpu:,.0f}",
                      f"{p.scaling_efficiency:.2f}{mark}", f"{p.time_to_train_s / 86400:,.1f}",
                      "-" if p.cost_usd is None else f"{p.cost_usd:,.0f}", p.config, p.bottleneck)  # fmt: skip
    out = console()
    out.print(table)
    if any(p.global_batch_changed for p in points):
        out.print("* global batch changed at this point: its ratio is tokens/s per GPU against the first point at "
                  f"another batch, not a {eff_header.removesuffix(' eff.')} efficiency", highlight=False)  # fmt: skip
    for p in points:
        if p.note:
            out.print(f"{p.value}: {p.note}", highlight=False)
    for line in result.skipped:
        out.print(line, highlight=False)


from fmstack.cli.serve_cmd import plan_serve_cmd  # noqa: E402

plan.add_command(plan_serve_cmd, "serve")
