"""HTML report of `fmstack plan serve`: the latency / throughput curve with the SLO marked, and the candidates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fmstack.perfmodel.inference_plan import ServePlan
from fmstack.reports.html import Section, html_page, write_html


def _curve_figure(plan: ServePlan) -> Any:
    import plotly.graph_objects as go

    c = plan.curve
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=c["requests_per_s"], y=c["ttft_s"], mode="lines", name="mean TTFT (s)"))
    fig.add_trace(go.Scatter(x=c["requests_per_s"], y=c["itl_s"], mode="lines", name="mean ITL (s)", yaxis="y2"))
    fig.add_hline(y=plan.slo.ttft_s, line_dash="dash", line_color="#1f77b4", annotation_text="TTFT p99 SLO")
    fig.add_shape(
        type="line", xref="paper", x0=0, x1=1, yref="y2", y0=plan.slo.itl_s, y1=plan.slo.itl_s,
        line={"dash": "dot", "color": "#ff7f0e"},
    )  # fmt: skip
    best = plan.best
    fig.add_vline(x=best.rate_per_replica_rps, line_color="#2ca02c", annotation_text="planned rate per replica")
    fig.update_layout(
        title=f"one replica: {best.instance}, tp {best.tp}, {best.precision} (concurrency 1 .. {len(c['ttft_s'])})",
        xaxis={"title": "requests/s per replica"},
        yaxis={"title": "TTFT (s)", "type": "log"},
        yaxis2={"title": "ITL (s)", "overlaying": "y", "side": "right", "type": "log"},
        height=480,
    )
    return fig


def serve_plan_html(plan: ServePlan) -> str:
    """The page as a string (tested in headless Chromium)."""
    b = plan.best
    header = ["rank", "instance", "precision", "tp", "ep", "chunk", "replicas", "nodes", "GPUs", "$/h", "rate/replica",
              "sim TTFT p99", "sim ITL p99", "meets SLO"]  # fmt: skip
    rows = []
    for i, c in enumerate(plan.candidates[:20], 1):
        sim = c.sim or {}
        rows.append([
            i, c.instance, c.precision, c.tp, c.ep, c.max_num_tokens, c.replicas, c.nodes, c.num_gpus,
            f"{c.cost_per_hour_usd:,.2f}", f"{c.rate_per_replica_rps:.2f}",
            f"{sim['ttft_p99_s']:.3f}" if sim else "-", f"{sim['itl_p99_s']:.4f}" if sim else "-",
            {True: "yes", False: "no", None: "not simulated"}[c.meets_slo],
        ])  # fmt: skip
    sections = [
        Section(
            title="cheapest deployment",
            text=(
                f"{b.replicas} replica(s) of {plan.model} on {b.instance} (tp {b.tp}, {b.precision}, prompt chunk "
                f"{b.max_num_tokens} tokens): {b.nodes} node(s), {b.num_gpus} GPUs, ${b.cost_per_hour_usd:,.2f}/h "
                f"for {plan.qps:g} requests/s of {plan.input_len}/{plan.output_len} tokens within TTFT p99 "
                f"{plan.slo.ttft_s:g} s and ITL p99 {plan.slo.itl_s:g} s (p99 from the batching simulation)."
            ),
        ),
        Section(title="latency / throughput curve", figures=[_curve_figure(plan)]),
        Section(title="candidates (cheapest first)", table_header=header, table_rows=rows),
    ]
    return html_page(f"fmstack plan serve: {plan.model}", sections, subtitle="analytic curve; p99 by simulation")


def write_serve_plan(plan: ServePlan, path: Path | str) -> Path:
    return write_html(path, serve_plan_html(plan))
