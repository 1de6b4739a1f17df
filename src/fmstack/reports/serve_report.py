"""HTML report of `fmstack plan serve`: the latency / throughput curve with the SLO marked, and the candidates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fmstack.perfmodel.inference_plan import ServePlan
from fmstack.perfmodel.inference_plan_session import session_plan_text
from fmstack.reports.html import Section, html_page, write_html


def _curve_figure(plan: ServePlan) -> Any:
    """Mean TTFT (top) and ITL (bottom) against requests/s of one replica, each with its SLO and the planned rate."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    c, best = plan.curve, plan.best
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("time to first token", "inter-token latency"))  # fmt: skip
    text = [f"concurrency {int(n)}" for n in c["concurrency"]]
    fig.add_trace(go.Scatter(x=c["requests_per_s"], y=c["ttft_s"], mode="lines", name="mean TTFT (s)", text=text),
                  row=1, col=1)  # fmt: skip
    fig.add_trace(go.Scatter(x=c["requests_per_s"], y=c["itl_s"], mode="lines", name="mean ITL (s)", text=text),
                  row=2, col=1)  # fmt: skip
    fig.add_hline(y=plan.slo.ttft_s, line_dash="dash", line_color="#d62728", row=1, col=1,
                  annotation_text=f"TTFT p99 SLO {plan.slo.ttft_s:g} s", annotation_position="top left")  # fmt: skip
    fig.add_hline(y=plan.slo.itl_s, line_dash="dash", line_color="#d62728", row=2, col=1,
                  annotation_text=f"ITL p99 SLO {plan.slo.itl_s:g} s", annotation_position="top left")  # fmt: skip
    split = best.mode == "disaggregated"
    for row in (1, 2) if not split else ():  # a split's rate per replica is not a point of the colocated curve
        fig.add_vline(x=best.rate_per_replica_rps, line_color="#2ca02c", row=row, col=1)
    ttft_top = max(min(max(c["ttft_s"]), 4 * plan.slo.ttft_s), 1.2 * plan.slo.ttft_s)  # the SLO always in view
    itl_top = max(min(max(c["itl_s"]), 4 * plan.slo.itl_s), 1.2 * plan.slo.itl_s)
    fig.update_yaxes(title_text="seconds", range=[0, ttft_top * 1.05], row=1, col=1)
    fig.update_yaxes(title_text="seconds", range=[0, itl_top * 1.05], row=2, col=1)
    planned = (
        "the split's pools run prefill-only and decode-only iterations, off this curve"
        if split
        else (f"green: planned {best.rate_per_replica_rps:.2f}")
    )
    fig.update_xaxes(title_text=f"requests/s per replica ({planned})", row=2, col=1)
    fig.update_layout(
        title=f"one {'colocated ' if split else ''}replica: {_layout(best)}, {best.precision} (concurrency 1 .. "
        f"{len(c['ttft_s'])})",
        height=620,
    )
    return fig


def _layout(c: Any) -> str:
    """``p5.48xlarge, tp 8`` or ``2 x p5.48xlarge, tp 8, pp 2`` (a replica of several nodes)."""
    nodes = f"{c.nodes_per_replica} x " if c.nodes_per_replica > 1 else ""
    adp = ", attention DP" if c.attention_dp else ""
    return f"{nodes}{c.instance}, tp {c.tp}" + (f", pp {c.pp}" if c.pp > 1 else "") + adp


def _mode(c: Any) -> str:
    """``colocated``, ``2 prefill + 1 decode``, or with heterogeneous pools ``2 prefill (tp4) + 1 decode (tp2)``."""
    if c.mode != "disaggregated":
        return "colocated"
    if not c.heterogeneous:
        return f"{c.prefill_replicas} prefill + {c.decode_replicas} decode"
    return f"{c.prefill_replicas} prefill (tp{c.tp}) + {c.decode_replicas} decode (tp{c.decode_tp})"


def serve_plan_html(plan: ServePlan, efficiency_source: str | None = None) -> str:
    """The page as a string (tested in headless Chromium); ``efficiency_source`` names a calibration profile that
    priced it."""
    b = plan.best
    header = ["rank", "instance", "precision", "mode", "tp", "pp", "ep", "chunk", "nodes/replica", "replicas", "nodes",
              "GPUs", "$/h", "rate/replica", "sim TTFT p99", "sim ITL p99", "meets SLO"]  # fmt: skip
    spec_col = plan.speculative is not None  # plan serve --speculative: each row's method
    if spec_col:
        header.insert(8, "speculative")
    rows = []
    for i, c in enumerate(plan.candidates[:20], 1):
        sim = c.sim or {}
        rows.append([
            i, c.instance, c.precision, _mode(c), c.tp, c.pp, f"{c.ep} + attention DP" if c.attention_dp else c.ep, c.max_num_tokens, c.nodes_per_replica, c.replicas, c.nodes,
            c.num_gpus,
            f"{c.cost_per_hour_usd:,.2f}", f"{c.rate_per_replica_rps:.2f}",
            f"{sim['ttft_p99_s']:.3f}" if sim else "-", f"{sim['itl_p99_s']:.4f}" if sim and plan.output_len > 1 else "-",  # 1 token: no gap
            {True: "yes", False: f"no: {c.sim_note}" if c.sim_note else "no", None: "not simulated"}[c.meets_slo],
        ])  # fmt: skip
        if spec_col:
            rows[-1].insert(8, c.speculative.method if c.speculative is not None else "none")
    sections = [
        Section(
            title="cheapest deployment",
            text=(
                f"{b.replicas} replica(s) of {plan.model} ({_mode(b)}), each on {_layout(b)} ({b.precision}, prompt chunk "
                f"{b.max_num_tokens} tokens): {b.nodes} node(s), {b.num_gpus} GPUs, ${b.cost_per_hour_usd:,.2f}/h "
                f"for {plan.qps:g} requests/s of {plan.input_len}/{plan.output_len} tokens within TTFT p99 "
                f"{plan.slo.ttft_s:g} s and ITL p99 {plan.slo.itl_s:g} s (p99 from the batching simulation; "
                f"colocated replicas behind a {plan.router} router, a split's prefill pool one shared queue)."
                + (f" {plan.speculative_note}." if plan.speculative_note else "")
                + (
                    f" {session_plan_text(plan.sessions, b, plan.input_len, plan.output_len, plan.router, plan.prefix is not None)}."
                    if plan.sessions is not None
                    else ""
                )
            ),
        ),
        Section(title="latency / throughput curve", figures=[_curve_figure(plan)]),
        Section(title="candidates (cheapest first)", table_header=header, table_rows=rows),
    ]
    subtitle = "analytic curve; p99 by simulation"
    if efficiency_source:
        subtitle += f"; efficiencies from the {efficiency_source}"
    return html_page(f"fmstack plan serve: {plan.model}", sections, subtitle=subtitle)


def write_serve_plan(plan: ServePlan, path: Path | str, efficiency_source: str | None = None) -> Path:
    return write_html(path, serve_plan_html(plan, efficiency_source))
