"""The planner's HTML report: ranked table, step breakdown per configuration, memory against capacity,
and scaling curves with the bottleneck of every point marked."""

from __future__ import annotations

from collections.abc import Sequence

from fmstack.perfmodel.config import describe_config
from fmstack.perfmodel.planner import PlanResult
from fmstack.perfmodel.scaling import ScalePoint
from fmstack.reports.html import Section, html_page

PART_COLORS = {
    "gemm": "#4c78a8", "attention": "#72b7b2", "memory_bound": "#54a24b", "recompute": "#eeca3b",
    "overhead": "#bab0ac", "tp": "#f58518", "cp": "#ff9da6", "ep": "#9d755d", "pp": "#b279a2",
    "dp": "#e45756", "bubble": "#d6d6d6", "optimizer": "#79706e", "overlap": "#c7a2e0",
}  # fmt: skip
"""A colour per part of the training step (``TrainingEstimate.parts_s``); a part not listed still gets a bar."""


def ranked_rows(result: PlanResult) -> list[list[str]]:
    rows = []
    for i, (est, seconds, cost) in enumerate(zip(result.ranked, result.time_to_train_s, result.cost_usd, strict=True)):
        rows.append([
            str(i + 1), est.instance, str(est.num_gpus), describe_config(est.config), f"{est.step_time_s:.2f}",
            f"{est.mfu * 100:.1f}", f"{est.tokens_per_s:,.0f}", f"{est.memory.total_gib:.1f}",
            f"{(seconds or 0) / 86400:,.1f}", "-" if cost is None else f"{cost:,.0f}", est.bottleneck,
        ])  # fmt: skip
    return rows


RANKED_HEADER = ("#", "instance", "GPUs", "configuration", "step s", "MFU %", "tokens/s", "GiB/GPU", "days", "cost $",
                 "bottleneck")  # fmt: skip


def breakdown_figure(result: PlanResult) -> object:
    import plotly.graph_objects as go

    labels = [f"#{i + 1} {describe_config(e.config)}" for i, e in enumerate(result.ranked)]
    fig = go.Figure()
    # every part of parts_s, so that each bar adds up to the step time (the ones without a colour last)
    parts = list(PART_COLORS) + sorted({p for e in result.ranked for p in e.parts_s} - set(PART_COLORS))
    for part in parts:
        fig.add_bar(name=part, y=labels, x=[e.parts_s.get(part, 0.0) for e in result.ranked], orientation="h",
                    marker_color=PART_COLORS.get(part))  # fmt: skip
    fig.update_layout(barmode="stack", title="step time breakdown (s)", height=120 + 40 * len(labels),
                      yaxis={"autorange": "reversed"}, margin={"l": 320})  # fmt: skip
    return fig


def memory_figure(result: PlanResult) -> object:
    import plotly.graph_objects as go

    labels = [f"#{i + 1}" for i in range(len(result.ranked))]
    fig = go.Figure()
    for part in ("weights_gib", "grads_gib", "optimizer_gib", "activations_gib", "temporary_gib"):
        fig.add_bar(name=part.removesuffix("_gib"), x=labels, y=[getattr(e.memory, part) for e in result.ranked])
    capacity = [e.memory.capacity_gib - e.memory.reserve_gib for e in result.ranked]
    fig.add_scatter(
        name="usable HBM", x=labels, y=capacity, mode="lines+markers", line={"color": "black", "dash": "dash"}
    )
    fig.update_layout(barmode="stack", title="memory per GPU (GiB) against usable capacity", height=420)
    return fig


EFFICIENCY_NAMES = {"strong": "strong-scaling efficiency", "weak": "weak-scaling efficiency",
                    "relative": "tokens/s per GPU vs the first point", "batch-changed": "tokens/s per GPU vs the first point"}  # fmt: skip
"""The chart's name for ``ScalePoint.scaling_efficiency`` by ``efficiency_kind``: over GPU kinds it is a speed-up
(2.45 for GB200 against H100), which "scaling efficiency" misnamed."""


def scaling_figure(points: Sequence[ScalePoint], axis: str) -> object:
    """tokens/s, MFU and scaling efficiency at each point, with its bottleneck marked.

    The x axis is a category axis (points evenly spaced: node counts double, GPU kinds are names), and each
    bottleneck label is placed by its point's serial number, as plotly positions annotations on category axes: given
    the value itself ("16" nodes) plotly read it as category number 16 and drew the labels far right of their
    points, squeezing the curves into the left edge. The right axis reaches the largest efficiency: over GPU kinds
    the "efficiency" is a speed-up against the first point (2.45 for GB200 against H100), which a fixed 0-1.05
    range cut off."""
    from plotly.subplots import make_subplots

    x = [p.value for p in points]
    kinds = {p.efficiency_kind for p in points}  # a sweep with a batch-changed point is a per-GPU ratio throughout
    kind = kinds.pop() if len(kinds) == 1 else "relative"
    efficiency = EFFICIENCY_NAMES.get(kind, EFFICIENCY_NAMES["relative"])
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_scatter(name="tokens/s", x=x, y=[p.tokens_per_s for p in points], mode="lines+markers",
                    text=[p.bottleneck for p in points], hovertemplate="%{x}: %{y:,.0f} tokens/s<br>%{text}")  # fmt: skip
    fig.add_scatter(name="MFU", x=x, y=[p.mfu for p in points], mode="lines+markers", secondary_y=True)
    fig.add_scatter(name=efficiency, x=x, y=[p.scaling_efficiency for p in points], mode="lines",
                    line={"dash": "dot"}, secondary_y=True)  # fmt: skip
    for i, p in enumerate(points):
        fig.add_annotation(x=i, y=p.tokens_per_s, text=p.bottleneck.split(":")[0], showarrow=True,
                           arrowhead=1, ay=-30, font={"size": 9})  # fmt: skip
    fig.update_layout(title=f"scaling over {axis} (best configuration at each point; bottleneck marked)", height=460)
    fig.update_xaxes(type="category", title_text=axis)
    fig.update_yaxes(title_text="tokens/s", secondary_y=False)
    top = max([1.0, *(p.scaling_efficiency for p in points), *(p.mfu for p in points)])
    # ticks of its own (plotly synced them to the left axis's grid: 0.001, 0.436, 0.87, ...), no second grid
    fig.update_yaxes(title_text=f"MFU (0-1) / {efficiency}", secondary_y=True, range=[0, top * 1.05],
                     tickmode="auto", showgrid=False)  # fmt: skip
    return fig


def hours_figure(result: PlanResult) -> object:
    """Where the hours of each configuration go: ideal training, checkpoints, lost progress, restarts."""
    import plotly.graph_objects as go

    assert result.resilience is not None
    labels = [f"#{i + 1}" for i in range(len(result.ranked))]
    fig = go.Figure()
    fig.add_bar(name="training (ideal)", x=labels, y=[r["ideal_time_s"] / 3600 for r in result.resilience])
    for key in ("checkpoint_overhead", "lost_progress", "detection_restart", "checkpoint_read", "replacement_wait"):
        fig.add_bar(name=key.replace("_", " "), x=labels, y=[r["lost_time_s"][key] / 3600 for r in result.resilience])
    fig.update_layout(barmode="stack", title="where the hours go (h), with checkpoints and failures", height=420)
    return fig


def _best_section(result: PlanResult, command: str, notes: Sequence[str]) -> Section:
    """What the terminal prints under the table: the best row, its bottleneck, what days and cost assume, the
    command that reproduces it, and the plan's notes (the report had only the table and the figures)."""
    best, days = result.best, (result.time_to_train_s[0] or 0.0) / 86400
    cost = result.cost_usd[0]
    priced = "" if cost is None else f", ${cost:,.0f}"
    assumed = (
        "days and cost include the expected time lost to failures, restarts and checkpoints"
        if result.resilience
        else "days and cost assume no failures (--objective time-with-failures adds them)"
    )
    text = (
        f"{describe_config(best.config)} on {best.num_gpus} {best.instance} GPUs: {days:,.1f} days{priced}, "
        f"{best.tokens_per_s:,.0f} tokens/s, MFU {best.mfu * 100:.1f} %; bottleneck: {best.bottleneck}"
    )
    return Section(title="best configuration", text=text, code=command, notes=[assumed, *notes])


def plan_html(
    result: PlanResult,
    scaling: Sequence[ScalePoint] = (),
    scaling_axis: str = "nodes",
    scaling_of: str = "",
    efficiency_source: str | None = None,
    command: str = "",
    notes: Sequence[str] = (),
) -> str:
    """The report: the best configuration and why (its bottleneck, the command that reproduces it, the plan's notes),
    ranked rows, step and memory breakdowns, the hours with failures, and a scaling sweep (of ``scaling_of``, e.g.
    the best row's instance and configuration, over ``scaling_axis``); ``efficiency_source`` names a calibration
    profile that priced the ranked rows (the sweep keeps the default curves)."""
    counts = (
        f"{result.considered:,} configurations considered, {result.rejected_shape:,} rejected for shape, "
        f"{result.rejected_memory:,} rejected for memory; objective: {result.objective}"
    )
    sections = [
        _best_section(result, command, notes),
        Section(title="ranked configurations", text=counts, table_header=RANKED_HEADER, table_rows=ranked_rows(result)),
        Section(title="where the step time goes", figures=[breakdown_figure(result)]),
        Section(title="memory per GPU", figures=[memory_figure(result)]),
    ]
    if result.resilience:
        rows_r = [[f"#{i + 1}", f"{r['checkpoint_size_gib']:,.0f}", f"{r['checkpoint_write_s']:,.1f}",
                   f"{r['checkpoint_interval_s'] / 60:,.1f}", f"{r['expected_failures']:,.0f}", f"{r['goodput'] * 100:.1f}",
                   f"{r['fsx_capacity_tib_needed']:,.1f}"] for i, r in enumerate(result.resilience)]  # fmt: skip
        sections.append(
            Section(
                title="where the hours go",
                figures=[hours_figure(result)],
                table_header=("#", "checkpoint GiB", "write s", "interval min", "failures", "goodput %", "FSx TiB"),
                table_rows=rows_r,
            )
        )
    if scaling:
        rows = [[p.value, str(p.num_gpus), f"{p.step_time_s:.2f}", f"{p.mfu * 100:.1f}", f"{p.tokens_per_s:,.0f}",
                 f"{p.scaling_efficiency:.2f}", p.config, p.bottleneck] for p in scaling]  # fmt: skip
        sections.append(
            Section(
                title=f"scaling over {scaling_axis}" + (f": {scaling_of}" if scaling_of else ""),
                figures=[scaling_figure(scaling, scaling_axis)],
                table_header=(
                    scaling_axis,
                    "GPUs",
                    "step s",
                    "MFU %",
                    "tokens/s",
                    "efficiency",
                    "configuration",
                    "bottleneck",
                ),
                table_rows=rows,
            )
        )
    tokens = f"{result.tokens:.3g} tokens" if result.tokens else ""
    instances = ", ".join(dict.fromkeys(result.clusters))  # one name per instance type, in search order
    subtitle = f"{tokens} on {instances}"
    if efficiency_source:
        subtitle += f"; ranked rows priced with the {efficiency_source}, the scaling sweep with the default curves"
    return html_page(f"fmstack plan: {result.model}", sections, subtitle=subtitle)
