"""`fmstack scale`: sweep one axis (nodes, GPU generation, EFA generation, NVLink domain, sequence length) and
re-plan at every point."""

from __future__ import annotations

from pathlib import Path

import click

from fmstack.catalog import load_catalog
from fmstack.catalog.topology import resolve_instance
from fmstack.cli.common import SearchCommand, json_option, print_json, whole_nodes_hint
from fmstack.cli.estimate_options import layout_options
from fmstack.cli.plan_cmd import _space, parse_gpus, sweep_options, with_layout
from fmstack.cli.plan_render import SearchProgress
from fmstack.cli.scale_render import render_scale, scale_view
from fmstack.errors import InputError
from fmstack.fileio import check_output_path
from fmstack.perfmodel.config import GradDtype, MasterWeights, OptimizerStateDtype
from fmstack.perfmodel.scaling import AXES, EFA_GENERATIONS, GPU_GENERATIONS, run_sweep

SCALE_EXAMPLE = """Examples:

\b
  fmstack scale --model llama3.1-70b --instance p5.48xlarge --gpus 512 --tokens 2e12 --axis nodes \\
      --values 16,32,64,128,256 --global-batch 1024

\b
  fmstack scale --model llama3.1-405b --instance p5.48xlarge --gpus 4096 --tokens 15e12 --axis gpu

The global batch is held fixed (strong scaling) at --global-batch or, without it, at the first point's
default (about 4M tokens); a point that cannot run at it says so. A GPU kind whose node count must be a
multiple (18 p6e-gb200.36xlarge per u-p6e-gb200x72) is rounded to the nearest valid size, stated per point; a
node count or NVLink domain that does not make whole UltraServers is skipped, with its reason. Each point is
re-planned with the default efficiency curves (a calibration profile is not applied).
"""

VALUES_HELP = (
    "Comma-separated values. nodes: node counts [--gpus/node x 1,2,4,8]; gpu: instance or UltraServer names "
    f"[{','.join(GPU_GENERATIONS)}]; efa: scale-out fabrics [{','.join(EFA_GENERATIONS)}]; nvlink: NVLink "
    "domain sizes in GPUs, multiples or divisors of a node [8,16,32,72]; seq-len: tokens [2048,...,32768]."
)


@click.command(cls=SearchCommand, epilog=SCALE_EXAMPLE)
@sweep_options
@layout_options
@click.option("--axis", type=click.Choice(AXES), default="nodes", show_default=True, help="What to sweep.")
@click.option("--values", default=None, help=VALUES_HELP)
@click.option("--weak", is_flag=True, help="With --axis nodes: grow the global batch with the GPUs (weak scaling).")
@click.option("--html", "html_path", type=click.Path(path_type=Path), default=None, help="Write an HTML report.")
@json_option
def scale(
    model: str, instance: str, gpus: str, tokens: float, objective: str, seq_len: int | None, global_batch: int | None,
    precisions: str, recompute: str | None, overlap_tp: bool, overlap_ep: bool, calibration: Path | None,
    calibration_force: bool, catalog_dir: Path | None, axis: str, values: str | None, weak: bool, html_path: Path | None, as_json: bool,
    optimizer_state_dtype: OptimizerStateDtype | None = None, master_weights: MasterWeights | None = None,
    fp8_param_gather: bool | None = None, grad_shard_buffer: bool | None = None, grad_dtype: GradDtype | None = None,
    reduce_dtype: GradDtype | None = None,
) -> None:  # fmt: skip
    """Sweep one axis (nodes, GPU generation, EFA generation, NVLink domain, sequence length) and re-plan.

    --gpus is the sweep's starting point (one count; with --axis nodes, several counts are the points themselves);
    every point is the planner's best configuration.
    """
    if html_path is not None:
        check_output_path(html_path, field="html", example="scale.html")  # before the sweep, not after it
    if calibration is not None or calibration_force:
        # each point re-plans with the default curves (and the gpu axis changes the GPU the profile was measured on)
        raise InputError(
            "calibration",
            "fmstack scale does not apply a calibration profile; run fmstack plan train --calibration at each point",
        )
    if "," in instance:
        raise InputError(
            "instance",
            f"fmstack scale takes one instance or UltraServer, got {instance!r}; to compare instances give one and "
            "--axis gpu --values with the others, or run fmstack plan train --instance a,b",
        )
    cat = load_catalog(catalog_dir)
    arch = cat.model(model)
    counts = parse_gpus(gpus)
    per_node = resolve_instance(cat, instance).num_gpus
    if len(counts) > 1 and axis == "nodes" and values is None:
        # --gpus 64,128,256 over nodes: those GPU counts are the sweep (the first is the reference)
        _whole_nodes(counts, per_node, resolve_instance(cat, instance).name)
        values = ",".join(str(c // per_node) for c in counts)
        counts = counts[:1]
    if len(counts) != 1:
        raise InputError(
            "gpus", f"--axis {axis} takes one GPU count (the sweep's starting point); several counts sweep --axis nodes"
        )
    if axis == "nodes":
        _whole_nodes(counts, per_node, resolve_instance(cat, instance).name)
    # every point re-plans with this storage layout
    space = with_layout(_space(seq_len, global_batch, precisions, recompute, overlap_ep, arch, overlap_tp),
                        optimizer_state_dtype, master_weights, fp8_param_gather, grad_shard_buffer, grad_dtype,
                        reduce_dtype)  # fmt: skip
    defaults = {
        "nodes": ",".join(str(max(1, counts[0] // per_node * f)) for f in (1, 2, 4, 8)),
        "gpu": ",".join(GPU_GENERATIONS), "efa": ",".join(EFA_GENERATIONS), "nvlink": "8,16,32,72",
        "seq-len": "2048,4096,8192,16384,32768",
    }  # fmt: skip
    items = list(dict.fromkeys(v.strip() for v in (values or defaults[axis]).split(",") if v.strip()))  # once each
    with SearchProgress(as_json, len(items)) as tick:
        result = run_sweep(cat, arch, axis=axis, values=items, instance=instance, gpus=counts[0], tokens=tokens,
                           objective=objective, space=space, weak=weak, progress=tick)  # fmt: skip
    points = result.points
    if html_path is not None:
        from fmstack.reports.html import Section, html_page, write_html
        from fmstack.reports.plan_report import scaling_figure

        view = scale_view(arch.name, axis, weak, result)  # the terminal's table, notes and skipped values too
        notes = [view.caption] if view.caption else []
        section = Section(title=view.title, figures=[scaling_figure(points, axis)], notes=[*notes, *view.footer],
                          table_header=[h.replace("\n", " ") for h in view.headers], table_rows=view.rows)  # fmt: skip
        write_html(html_path, html_page(f"fmstack scale: {arch.name} over {axis}", [section]))
    if as_json:
        from dataclasses import asdict

        print_json({"model": arch.name, "axis": axis, "weak": weak, "objective": result.objective,
                    "reference_global_batch": result.reference_global_batch,
                    "points": [asdict(p) for p in points], "skipped": result.skipped})  # fmt: skip
        return
    render_scale(arch.name, axis, weak, result)


def _whole_nodes(counts: list[int], per_node: int, name: str) -> None:
    """Every GPU count of a nodes sweep is whole nodes, as plan train requires: the node counts were floored (63
    GPUs swept 7, 14, 28, 56 nodes; 4 GPUs one 8-GPU node; --gpus 63,128 started at 56). The gpu axis rounds per
    kind instead and says so per point."""
    for count in counts:
        if count % per_node:
            hint = whole_nodes_hint(count, per_node)
            raise InputError("gpus", f"{count} is not a multiple of {per_node} GPUs per {name} node{hint}")
