"""HTML report of `fmstack plan rl`: the ranked table, where each row's step goes, peak memory against usable HBM,
and (several instances or node counts) the best step per instance and node count.

The page is built from the same dict ``plan rl --json`` prints, so every number on it is a ``--json`` number
(rounded as the terminal table rounds). Asynchronous rows are drawn as their two sides side by side: the step is
``max(rollout, training side) + weight sync`` (:func:`fmstack.perfmodel.rl.estimate_rl`), not the sum of the parts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fmstack.catalog.schema import ModelArch
from fmstack.catalog.topology import Cluster
from fmstack.errors import InputError
from fmstack.perfmodel.efficiency import EfficiencyFor
from fmstack.perfmodel.rl import RLConfig
from fmstack.perfmodel.rl_plan import plan_rl
from fmstack.reports.html import Section, html_page

PART_COLORS = {
    "rollout": "#4c78a8", "old_logprob_forward": "#72b7b2", "reference_forward": "#54a24b",
    "reward_forward": "#eeca3b", "critic_forward": "#b279a2", "actor_train": "#f58518", "critic_train": "#9d755d",
    "weight_sync": "#e45756", "colocated_switch": "#bab0ac",
}  # fmt: skip
"""A colour per part of ``parts_s`` (estimate rl's); a part not listed still gets a bar, after these."""
_NOT_TRAIN = ("rollout", "weight_sync", "colocated_switch")


def ranked_table(data: dict[str, Any], *, several: bool) -> tuple[list[str], list[list[str]]]:
    """The terminal table's columns and cells (``fmstack.cli.rl_plan_cmd._render``), the bottleneck in full."""
    obj = data["objective"]
    extra = {"throughput": "samples/s/GPU", "cost": "$/step"}.get(obj)
    header = ["#", *(["instance", "nodes"] if several else []), "placement", "rollout tp", "train", "step (s)",
              "rollout (s)", "train (s)", "sync (s)", "peak GiB/GPU", *([extra] if extra else []), "bottleneck"]  # fmt: skip
    rows = []
    for i, r in enumerate(data["ranked"], 1):
        value = {"throughput": f"{r['samples_per_s_per_gpu']:.2f}",
                 "cost": "-" if r["cost_per_step_usd"] is None else f"{r['cost_per_step_usd']:.2f}"}.get(obj)  # fmt: skip
        rows.append([str(i), *([r["instance"], str(r["nodes"])] if several else []), r["placement"],
                     str(r["rollout_tp"]), f"{r['train_layout']} {r['train_sharding']}", f"{r['step_time_s']:.2f}",
                     f"{r['rollout_s']:.2f}", f"{r['train_s']:.2f}", f"{r['sync_s'] + r['switch_s']:.2f}",
                     f"{r['peak_gib_per_gpu']:.1f}", *([value] if value else []), r["bottleneck"]])  # fmt: skip
    return header, rows


def counts_line(data: dict[str, Any]) -> str:
    return (
        f"{data['considered']:,} configurations considered: {data['rejected_shape']:,} rejected for shape, "
        f"{data['pruned']:,} pruned by the bound, {data['evaluated']:,} estimated ({data['rejected_memory']:,} of "
        "them over memory)"
    )


def _label(i: int, r: dict[str, Any], several: bool) -> str:
    where = f"{r['nodes']} x {r['instance']}, " if several else ""
    return f"#{i} {where}{r['placement']}, rollout tp {r['rollout_tp']}, train {r['train_layout']}"


def step_segments(data: dict[str, Any], *, several: bool) -> list[tuple[str, str, float, float]]:
    """``(bar, part, start_s, length_s)`` of each ranked row. On-policy rows: one bar, the parts one after another
    (they end at the step). Asynchronous rows: a rollout-side bar and a training-side bar both from 0, each side's
    weight sync from ``max(rollout, training side)``: both end at the step, the shorter side idle in between."""
    out: list[tuple[str, str, float, float]] = []
    for i, r in enumerate(data["ranked"], 1):
        parts: dict[str, float] = r["parts_s"]
        label = _label(i, r, several)
        if not r["async"]:
            t = 0.0
            for part, seconds in parts.items():
                out.append((label, part, t, seconds))
                t += seconds
            continue
        rollout = parts["rollout"]
        rest = sum(v for k, v in parts.items() if k not in ("rollout", "weight_sync"))
        out.append((f"{label}: rollout side", "rollout", 0.0, rollout))
        t = 0.0
        for part, seconds in parts.items():
            if part not in ("rollout", "weight_sync"):
                out.append((f"{label}: training side", part, t, seconds))
                t += seconds
        for side in ("rollout side", "training side"):
            out.append((f"{label}: {side}", "weight_sync", max(rollout, rest), parts["weight_sync"]))
    return out


def step_figure(data: dict[str, Any], *, several: bool) -> Any:
    import plotly.graph_objects as go

    segments = [s for s in step_segments(data, several=several) if s[3] > 0]
    bars = list(dict.fromkeys(s[0] for s in step_segments(data, several=several)))
    parts = list(PART_COLORS) + sorted({s[1] for s in segments} - set(PART_COLORS))
    fig = go.Figure()
    for part in parts:
        mine = [s for s in segments if s[1] == part]
        if not mine:
            continue
        name = part.replace("_", " ")
        fig.add_bar(name=name, orientation="h", y=[s[0] for s in mine], x=[s[3] for s in mine],
                    base=[s[2] for s in mine], marker_color=PART_COLORS.get(part),
                    hovertemplate=f"%{{y}}<br>{name}: %{{x:.2f}} s from %{{base:.2f}} s<extra></extra>")  # fmt: skip
    step_y, step_x = [], []
    for i, r in enumerate(data["ranked"], 1):
        label = _label(i, r, several)
        for bar in (f"{label}: rollout side", f"{label}: training side") if r["async"] else (label,):
            step_y.append(bar)
            step_x.append(r["step_time_s"])
    fig.add_scatter(name="step", x=step_x, y=step_y, mode="markers",
                    marker={"symbol": "line-ns-open", "size": 22, "color": "black", "line": {"width": 3}},
                    hovertemplate="%{y}<br>step %{x:.2f} s<extra></extra>")  # fmt: skip
    fig.update_layout(barmode="overlay", title="where the step goes (s); asynchronous rows: both sides overlap, the "
                      "step is the longer side + weight sync", height=140 + 34 * len(bars),
                      yaxis={"categoryorder": "array", "categoryarray": bars, "autorange": "reversed"},
                      xaxis={"title": {"text": "seconds"}}, margin={"l": 420})  # fmt: skip
    return fig


def memory_figure(data: dict[str, Any]) -> Any:
    import plotly.graph_objects as go

    rows = data["ranked"]
    labels = [f"#{i}" for i in range(1, len(rows) + 1)]
    fig = go.Figure()
    fig.add_bar(name="peak GiB per GPU (the fullest phase)", x=labels, y=[r["peak_gib_per_gpu"] for r in rows],
                customdata=[r["placement"] for r in rows], marker_color="#4c78a8",
                hovertemplate="%{x} %{customdata}: %{y:.1f} GiB<extra></extra>")  # fmt: skip
    fig.add_scatter(name="usable HBM", x=labels, y=[r["usable_gib"] for r in rows], mode="lines+markers",
                    line={"color": "black", "dash": "dash", "shape": "hvh"},
                    hovertemplate="%{x}: usable %{y:.1f} GiB<extra></extra>")  # fmt: skip
    fig.update_layout(title="peak memory per GPU (GiB) against usable HBM", height=420,
                      yaxis={"title": {"text": "GiB per GPU"}, "rangemode": "tozero"})  # fmt: skip
    return fig


def best_by_cluster(
    actor: ModelArch, clusters: Sequence[Cluster], where: Sequence[tuple[str, int]], base: RLConfig, *,
    critic: ModelArch | None, kinds: Sequence[str], max_trajectory_age: int,
    efficiency_for: EfficiencyFor | None = None,
) -> list[dict[str, Any]]:  # fmt: skip
    """The fastest row of each (instance, nodes) on its own (``plan_rl`` per cluster, top 1, by time): the ranked
    table's top rows may all come from one of them. ``step_time_s`` None and ``note`` when nothing fits there."""
    out: list[dict[str, Any]] = []
    for (name, nodes), cluster in zip(where, clusters, strict=True):
        row: dict[str, Any] = {"instance": name, "nodes": nodes, "num_gpus": cluster.num_gpus, "step_time_s": None}
        try:
            best = plan_rl(actor, [cluster], base, critic=critic, objective="time", top=1,
                           max_trajectory_age=max_trajectory_age, kinds=kinds, efficiency_for=efficiency_for).best  # fmt: skip
        except InputError as exc:
            out.append({**row, "note": exc.message})
            continue
        est, p = best.estimate, best.point
        out.append({**row, "step_time_s": est.step_time_s, "samples_per_s": best.samples_per_s,
                    "placement": p.placement.label, "rollout_tp": est.config.rollout_tp,
                    "train_layout": p.layout.label, "bottleneck": est.bottleneck, "note": ""})  # fmt: skip
    return out


def cluster_figure(per_cluster: Sequence[dict[str, Any]]) -> Any:
    import plotly.graph_objects as go

    fig = go.Figure()
    for name in dict.fromkeys(c["instance"] for c in per_cluster):
        mine = [c for c in per_cluster if c["instance"] == name and c["step_time_s"] is not None]
        fig.add_scatter(name=name, x=[c["nodes"] for c in mine], y=[c["step_time_s"] for c in mine],
                        mode="lines+markers", text=[f"{c['placement']}, rollout tp {c['rollout_tp']}, train "
                                                    f"{c['train_layout']}" for c in mine],
                        hovertemplate="%{x} nodes: %{y:.2f} s<br>%{text}<extra>" + name + "</extra>")  # fmt: skip
    nodes = sorted({c["nodes"] for c in per_cluster})
    fig.update_layout(title="best step time (s) per instance and node count", height=420,
                      xaxis={"title": {"text": "nodes"}, "tickvals": nodes, "type": "log" if len(nodes) > 2 else "-"},
                      yaxis={"title": {"text": "step (s)"}, "rangemode": "tozero"})  # fmt: skip
    return fig


def rl_plan_html(data: dict[str, Any], *, several: bool, per_cluster: Sequence[dict[str, Any]] = ()) -> str:
    """The page as a string, from ``plan rl --json``'s dict; ``several``: more than one (instance, nodes) searched
    (the table names each row's); ``per_cluster`` from :func:`best_by_cluster`."""
    header, rows = ranked_table(data, several=several)
    first = data["ranked"][0]
    best = (
        f"best: {first['placement']}, rollout tp {first['rollout_tp']}, train {first['train_layout']} "
        f"{first['train_sharding']}: {first['step_time_s']:.2f} s per step, {first['samples_per_s']:.1f} samples/s; "
        f"bottleneck: {first['bottleneck']}"
    )
    sections = [
        Section(title="ranked configurations", text=counts_line(data), table_header=header, table_rows=rows),
        Section(title="best", text=best),
        Section(title="notes", table_header=("note",), table_rows=[[n] for n in data["notes"]]),
        Section(title="where the step goes", figures=[step_figure(data, several=several)]),
        Section(title="peak memory per GPU", figures=[memory_figure(data)]),
    ]
    if len(per_cluster) > 1:
        cells = [[c["instance"], str(c["nodes"]), str(c["num_gpus"]),
                  "-" if c["step_time_s"] is None else f"{c['step_time_s']:.2f}",
                  "-" if c["step_time_s"] is None else f"{c['samples_per_s']:.1f}",
                  c["note"] or f"{c['placement']}, rollout tp {c['rollout_tp']}, train {c['train_layout']}"]
                 for c in per_cluster]  # fmt: skip
        fitting = [c for c in per_cluster if c["step_time_s"] is not None]
        sections.append(Section(
            title="best step per instance and node count",
            text="each (instance, nodes) searched on its own, by step time: the fastest row that fits there",
            figures=[cluster_figure(per_cluster)] if fitting else (),
            table_header=("instance", "nodes", "GPUs", "step (s)", "samples/s", "best row"), table_rows=cells,
        ))  # fmt: skip
    commands = [[str(i), r["estimate_command"]] for i, r in enumerate(data["ranked"], 1)]
    sections.append(Section(title="estimate each row", table_header=("#", "fmstack estimate rl command"),
                            table_rows=commands))  # fmt: skip
    subtitle = f"ranked by {data['objective']}; read the step times as lower bounds (see the notes)"
    if data.get("efficiency_source"):
        subtitle += f"; efficiencies from the {data['efficiency_source']}"
    return html_page(f"fmstack plan rl: {data['model']}", sections, subtitle=subtitle)
