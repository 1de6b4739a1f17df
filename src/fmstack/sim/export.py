"""Exports of a run: JSON summary, Prometheus text exposition (final counters), OpenMetrics time series (for
``promtool tsdb create-blocks-from openmetrics``, so the observability dashboards can show a run), and a
Chrome-trace JSON (chrome://tracing, Perfetto) of the job segments of a small run.

Formats: Prometheus text exposition 0.0.4 (prometheus.io/docs/instrumenting/exposition_formats), OpenMetrics
1.0 (timestamps in seconds, ``# EOF`` last), Chrome Trace Event Format ("X" complete events, microseconds).
Simulated time 0 is mapped to ``start_epoch_s`` (default 2026-01-01T00:00:00Z) so the output is deterministic.
"""

from __future__ import annotations

import json
from typing import Any

from fmstack.sim.state import SimState

START_EPOCH_S = 1767225600
SERIES: tuple[tuple[str, int, str], ...] = (
    ("fmstack_sim_gpus_allocated", 1, "GPUs allocated to jobs"),
    ("fmstack_sim_jobs_pending", 2, "Jobs waiting in the queue"),
    ("fmstack_sim_jobs_running", 3, "Jobs holding GPUs"),
    ("fmstack_sim_nodes_out", 4, "Nodes down, resetting, rebooting or being replaced"),
    ("fmstack_sim_spare_nodes", 5, "Spare nodes on standby"),
)


def to_json(summary: dict[str, Any]) -> str:
    """Stable JSON: same run, same bytes."""
    return json.dumps(summary, indent=2, sort_keys=True) + "\n"


def _labels(summary: dict[str, Any]) -> str:
    c = summary["config"]
    return f'policy="{c["policy"]}",recovery="{c["recovery"]}",seed="{c["seed"]}"'


_KINDS = (
    "allocated",
    "productive",
    "checkpoint",
    "lost_work",
    "restart",
    "hang_until_detected",
    "idle",
    "down",
    "spare_standby",
)


def _totals(summary: dict[str, Any], *, openmetrics: bool, at: str = "") -> list[str]:
    """The run's final totals: counters (Prometheus text names the family ``..._total``; OpenMetrics names it
    without the suffix, which only its samples carry) and gauges, each sample followed by ``at`` (a timestamp)."""
    lab = _labels(summary)

    def counter(name: str, help_text: str) -> list[str]:
        family = name if not openmetrics else name.removesuffix("_total")
        return [f"# HELP {family} {help_text}", f"# TYPE {family} counter"]

    gh = summary["gpu_hours"]
    out = counter("fmstack_sim_gpu_seconds_total", "GPU-seconds of the run by what they were spent on.")
    for kind in _KINDS:
        out.append(f'fmstack_sim_gpu_seconds_total{{{lab},kind="{kind}"}} {gh[kind] * 3600.0:.3f}{at}')
    out += counter("fmstack_sim_failures_total", "Node failures and planned maintenance events by category.")
    for cat, n in summary["failures"]["by_category"].items():
        out.append(f'fmstack_sim_failures_total{{{lab},category="{cat}"}} {n}{at}')
    out += counter("fmstack_sim_job_interruptions_total", "Job interruptions (a failure on a node a job runs on).")
    out.append(f"fmstack_sim_job_interruptions_total{{{lab}}} {summary['failures']['job_interruptions']}{at}")
    out += counter("fmstack_sim_preemptions_total", "Running jobs preempted by the scheduling policy.")
    out.append(f"fmstack_sim_preemptions_total{{{lab}}} {summary['jobs']['preemptions']}{at}")
    out += [
        "# HELP fmstack_sim_utilization_ratio Allocated GPU-seconds over pool GPU-seconds.",
        "# TYPE fmstack_sim_utilization_ratio gauge",
        f"fmstack_sim_utilization_ratio{{{lab}}} {summary['utilization']}{at}",
        "# HELP fmstack_sim_goodput_ratio Productive over allocated GPU-seconds.",
        "# TYPE fmstack_sim_goodput_ratio gauge",
        f"fmstack_sim_goodput_ratio{{{lab}}} {summary['goodput']}{at}",
    ]
    return out


def to_prometheus_text(summary: dict[str, Any]) -> str:
    """Final totals of a run as Prometheus text exposition."""
    return "\n".join(_totals(summary, openmetrics=False)) + "\n"


def to_openmetrics(sim: SimState, summary: dict[str, Any], start_epoch_s: int = START_EPOCH_S) -> str:
    """The sampled time series as OpenMetrics with timestamps (one family after another, time ordered), then the
    run's totals (:func:`to_prometheus_text`'s families) stamped at the horizon. Until 2026-11-24 the totals were
    documented but written nowhere (review)."""
    lab = _labels(summary)
    out: list[str] = []
    for name, col, help_text in SERIES:
        out += [f"# HELP {name} {help_text}.", f"# TYPE {name} gauge"]
        for row in sim.samples:
            out.append(f"{name}{{{lab}}} {row[col]} {start_epoch_s + row[0]:.3f}")
    out += _totals(summary, openmetrics=True, at=f" {start_epoch_s + sim.cfg.horizon_s:.3f}")
    out.append("# EOF")
    return "\n".join(out) + "\n"


def to_chrome_trace(sim: SimState) -> str:
    """Job segments as Chrome-trace complete events in process 0, one row (tid) per job; failures as instant
    events in process 1 ("faults"). Until 2026-11-24 the failures were drawn on tid 0 of process 0, the row of job 0,
    and this docstring promised a process per leaf that was never written."""
    events: list[dict[str, Any]] = []
    for jid, start, end, kind, nodes in sim.segment_log:
        events.append(
            {"name": f"job {jid} {kind}", "cat": kind, "ph": "X", "ts": round(start * 1e6), "dur": round((end - start) * 1e6),
             "pid": 0, "tid": jid, "args": {"nodes": nodes}}
        )  # fmt: skip
    for f in sim.fault_log:
        events.append({"name": f"{f['category']} node {f['node']}", "ph": "i", "s": "g", "ts": round(f["time_s"] * 1e6),
                       "pid": 1, "tid": 0, "args": {"action": f["action"], "jobs": f["jobs"], "gpu_fault": f.get("gpu_fault")}})  # fmt: skip
    names = (("jobs", 0), ("faults", 1))
    events += [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": n}} for n, pid in names]
    return json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}, sort_keys=True) + "\n"
