"""A self-contained HTML report of a run: headline numbers, tables by size class, and time-series plots drawn as
inline SVG (no scripts, no network), so it opens anywhere, including a headless browser in tests."""

from __future__ import annotations

import html
from typing import Any

from fmstack.sim.state import SimState

_W, _H, _PAD = 720, 200, 40


def _svg(title: str, xs: list[float], ys: list[float], unit: str) -> str:
    if not xs:
        return f"<p>{html.escape(title)}: no samples</p>"
    x0, x1 = xs[0], max(xs[-1], xs[0] + 1)
    y1 = max(max(ys), 1)
    pts = " ".join(
        f"{_PAD + (x - x0) / (x1 - x0) * (_W - 2 * _PAD):.1f},{_H - _PAD - y / y1 * (_H - 2 * _PAD):.1f}"
        for x, y in zip(xs, ys, strict=True)
    )
    t = html.escape(title)
    return (
        f'<figure><svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" role="img" aria-label="{t}">'
        f'<rect width="{_W}" height="{_H}" fill="#fff" stroke="#ccc"/>'
        f'<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="{pts}"/>'
        f'<text x="{_PAD}" y="20" font-size="13">{t}</text>'
        f'<text x="4" y="{_PAD}" font-size="11">{y1:g} {html.escape(unit)}</text>'
        f'<text x="4" y="{_H - _PAD}" font-size="11">0</text>'
        f'<text x="{_W - _PAD - 60}" y="{_H - 10}" font-size="11">{(x1 - x0) / 86400:.1f} days</text>'
        "</svg></figure>"
    )


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _wait_cells(cls: dict[str, Any]) -> str:
    """Wait p50 / p90 / p99 of a size class over started jobs and jobs still pending at the end (their wait counted
    to the end), ">=" where pending jobs are in it: a lower bound, as the text table's p90 (cli/sim_render.py).
    Until 2026-11-24 the report read ``wait`` (started jobs only): a class whose jobs mostly never started showed
    a short wait."""
    everyone = cls["wait_incl_pending"]
    prefix = "&ge;" if everyone["count"] > cls["wait"]["count"] else ""
    return "".join(
        f"<td>{'-' if everyone[p] is None else prefix + _seconds(everyone[p])}</td>"
        for p in ("p50_s", "p90_s", "p99_s")
    )


def _settings(summary: dict[str, Any]) -> str:
    """One paragraph with what shaped the run: workload, policy, recovery and checkpoints, failure model, spares
    (added in session 17: the report named the policy and recovery mode only, not the failure model or the load)."""
    c = summary["config"]
    work = (f"{c['jobs']:,} jobs generated at offered load {c['load']:g}" if c.get("trace") is None
            else f"{c['jobs']:,} jobs from trace {c['trace']}")  # fmt: skip
    policy = f"policy {c['policy']} (pending order {c['priority']}"
    policy += f", bf_window {c['bf_window_min']:,} min)" if "backfill" in c["policy"] else ")"
    t = c.get("recovery_times_s", {})
    rec = (f"recovery {str(c['recovery']).replace('_', '-')} (detection {t.get('detection', 0):g} s, restart "
           f"{t.get('restart', 0):g} s, node replacement {t.get('replacement', 0):g} s)")  # fmt: skip
    fm = summary["failures"].get("model")
    ckpt = f"checkpoint interval {c['checkpoint_interval']}" + (
        "" if c["checkpoint_interval"] in ("young", "daly") else " min"
    )
    ckpt += f", {c['checkpoint_cost_s']:g} s per checkpoint"
    if fm is None:
        faults = "no failures"
    else:
        iv = fm["checkpoint_interval_min"]
        ckpt += f" (one-node job: {iv['node']:,.1f} min, whole pool: {iv['pool']:,.1f} min)"
        faults = (f"failure model {fm['name']}: {fm['failures_per_1000_node_days']:g} failures and "
                  f"{fm['planned_per_1000_node_days']:g} planned maintenances per 1,000 node-days, "
                  f"{fm['expected_events']:,.1f} events expected, {summary['failures']['events']:,} drawn "
                  f"(source: {fm['source']})")  # fmt: skip
    spares = f"{c['spares']:,} spare nodes"
    return "<p>" + html.escape("; ".join((work, policy, rec, ckpt, faults, spares))) + ".</p>"


def _gpu_faults(summary: dict[str, Any]) -> str:
    """GPU faults by Xid class: drawn count, the share the class is drawn with, the actions the health engine took
    (JSON failures.by_gpu_fault, failures.model.gpu_fault_shares, failures.by_gpu_fault_action), and the escalations
    in its recurrence window; "" without a failure model. Added in session 17 (the JSON had them, the report not)."""
    f = summary["failures"]
    shares = (f.get("model") or {}).get("gpu_fault_shares", {})
    if not shares:
        return ""
    drawn, acts = f.get("by_gpu_fault", {}), f.get("by_gpu_fault_action", {})
    total = sum(drawn.values())
    rows = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{drawn.get(k, 0):,}</td><td>{share:.3f}</td>"
        f"<td>{total * share:,.1f}</td><td>{html.escape(', '.join(f'{a.lower()} {n:,}' for a, n in acts.get(k, {}).items()) or '-')}</td></tr>"
        for k, share in shares.items()
    )  # fmt: skip
    window = summary["config"].get("health_window_h")
    esc = f.get("escalations", {})
    said = ", ".join(f"{html.escape(k.lower())} {v:,}" for k, v in esc.items()) or "none"
    return (
        "<h2>GPU faults by Xid class</h2><p>Classes of Llama 3 Table 5's GPU rows; expected = GPU faults drawn x "
        "share; action: what the health engine decided. Escalations in its recurrence window ("
        + ("the whole run" if window is None else f"{window:g} h")
        + f"; planned maintenance not counted): {said}.</p>"
        "<table><tr><th>class</th><th>count</th><th>share</th><th>expected</th><th>action</th></tr>"
        f"{rows}</table>"
    )


def render_html(sim: SimState, summary: dict[str, Any]) -> str:
    """The report as one HTML string."""
    c = summary["config"]
    xs = [row[0] for row in sim.samples]
    rows = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{v['wait']['count']}</td>"
        f"<td>{v['wait_incl_pending']['count'] - v['wait']['count']}</td>{_wait_cells(v)}"
        + "".join(f"<td>{_seconds(v['jct'][p])}</td>" for p in ("p50_s", "p90_s", "p99_s"))
        + "</tr>"
        for k, v in summary["by_size_class"].items()
    )
    gh = summary["gpu_hours"]
    parts = "".join(f"<tr><td>{html.escape(k)}</td><td>{v:,.1f}</td></tr>" for k, v in gh.items())
    fails = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{v}</td></tr>" for k, v in summary["failures"]["by_category"].items()
    )
    n_timeout = summary["jobs"].get("timed_out", 0)
    timed_out = f" ({n_timeout} {'job' if n_timeout == 1 else 'jobs'} killed at the time limit)" if n_timeout else ""
    notes = "".join(f"<p class='warning'>{html.escape(w)}</p>" for w in summary.get("warnings", []))
    title = (
        f"fmstack fleet twin: {c['nodes']} x {c['instance']}, {c['days']:g} days, {c['policy']}, "
        f"{str(c['recovery']).replace('_', '-')}"
    )  # as --recovery spells it
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:2px 8px;text-align:right}}</style>
</head><body>
<h1>{html.escape(title)}</h1>
<p>utilization {summary["utilization"]:.3f} &middot; goodput {summary["goodput"]:.3f} &middot; ETTR {summary["ettr"]:.3f}
&middot; jobs completed {summary["jobs"]["completed"]} of {summary["jobs"]["submitted"]}{timed_out}
&middot; pending at end {summary["jobs"]["pending_at_end"]}
&middot; job interruptions {summary["failures"]["job_interruptions"]} &middot; seed {c["seed"]}</p>
{_settings(summary)}{notes}
<h2>GPU-hours</h2>
<p>capacity = allocated + idle + down; allocated = productive + checkpoint + lost_work + restart +
hang_until_detected (with spares, spare_standby is on top of capacity: spare_capacity).</p><table><tr><th>kind</th><th>GPU-h</th></tr>{parts}</table>
<h2>Queue wait and job completion time by size class (GPUs), seconds</h2>
<p>Waits include the jobs still pending at the end, their wait counted to the end; &ge;: a lower bound.</p>
<table><tr><th>class</th><th>started</th><th>pending at end</th><th>wait p50</th><th>wait p90</th><th>wait p99</th><th>JCT p50</th>
<th>JCT p90</th><th>JCT p99</th></tr>{rows}</table>
<h2>Failures by category</h2><table><tr><th>category</th><th>events</th></tr>{fails}</table>
{_gpu_faults(summary)}
<h2>Time series</h2>
{_svg("GPUs allocated", xs, [float(r[1]) for r in sim.samples], "GPUs")}
{_svg("Jobs pending", xs, [float(r[2]) for r in sim.samples], "jobs")}
{_svg("Nodes out (down, rebooting, replaced)", xs, [float(r[4]) for r in sim.samples], "nodes")}
</body></html>
"""
