"""Text tables of `fmstack simulate` and `simulate compare`: results, then p90 waits by job size.

Two tables, so that a compare of policies x recovery modes on a fleet with every size class fits 140 columns
(one table of 13 columns cut "slurm-backfill" to "slurm-back…" and the column titles to "interrupti…").
What every row shares (the fleet, the policy of a single run, ...) goes to the title.
"""

from __future__ import annotations

from typing import Any

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from fmstack.sim.metrics import SIZE_CLASSES


def _recovery(row: dict[str, Any]) -> str:
    """The recovery mode as the --recovery flag spells it (JSON keeps the enum value, e.g. auto_resume)."""
    return str(row["config"]["recovery"]).replace("_", "-")


def title(rows: list[dict[str, Any]]) -> str:
    """The fleet and the settings every row shares, e.g. 'fleet twin: 16 x p5.48xlarge (128 GPUs), 2 days, ...'."""
    c = rows[0]["config"]
    words = [f"{c['nodes']:,} x {c['instance']} ({c['gpus']:,} GPUs)"]
    if c["spares"]:
        words[0] += f" + {c['spares']:,} spare nodes"
    # the generator's offered load (session 17: runs at different --load had the same title)
    jobs = f"{c['jobs']:,} jobs" + (f" at load {c['load']:g}" if c.get("load") is not None else "")
    words += [f"{c['days']:g} days", jobs, f"faults {c['faults'] or 'none'}", f"seed {c['seed']}"]
    shared = [str(c["policy"])] if len({r["config"]["policy"] for r in rows}) == 1 else []
    if len({_recovery(r) for r in rows}) == 1:
        shared.append(_recovery(rows[0]))
    words = shared + words
    return "fleet twin: " + ", ".join(words)


def _key_columns(rows: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """Policy and recovery columns, only for what differs between rows (the rest is in the title)."""
    cols: list[tuple[str, Any]] = []
    if len({r["config"]["policy"] for r in rows}) > 1:
        cols.append(("policy", lambda r: str(r["config"]["policy"])))
    if len({_recovery(r) for r in rows}) > 1:
        cols.append(("recovery", _recovery))
    return cols


def wait_p90_cell(cls: dict[str, Any]) -> str:
    """p90 wait of one size class: '-' without jobs; '>=' when jobs still pending at the end are in it.

    ``wait`` counts started jobs only, so a class whose jobs never started showed 0 s. ``wait_incl_pending``
    adds the pending jobs with their wait counted to the horizon, a lower bound of their real wait, and so of the
    percentile (raising any value never lowers a percentile).
    """
    everyone = cls["wait_incl_pending"]
    if everyone["count"] == 0:
        return "-"
    prefix = ">=" if everyone["count"] > cls["wait"]["count"] else ""
    return f"{prefix}{everyone['p90_s']:,.0f}"


def gpu_fault_line(row: dict[str, Any]) -> str | None:
    """One line of a run's GPU faults by Xid class with the actions taken (JSON failures.by_gpu_fault and
    failures.by_gpu_fault_action), e.g. 'GPU faults by Xid class: faulty_gpu_xid79 3 (reboot_node 3), ...'; None
    without GPU faults (added in session 17: the JSON had the classes, the text output did not)."""
    f = row["failures"]
    if not f.get("by_gpu_fault"):
        return None
    acts = f.get("by_gpu_fault_action", {})
    parts = []
    for name, n in f["by_gpu_fault"].items():
        how = ", ".join(f"{a.lower()} {c:,}" for a, c in acts.get(name, {}).items())
        parts.append(f"{name} {n:,}" + (f" ({how})" if how else ""))
    esc = f.get("escalations", {})
    tail = "; escalated in the recurrence window: " + ", ".join(
        f"{k.lower()} {v:,}" for k, v in esc.items()) if esc else ""  # fmt: skip
    return "GPU faults by Xid class: " + ", ".join(parts) + tail


def render(rows: list[dict[str, Any]]) -> list[RenderableType]:
    """Title line, results table, waits table and their notes, of one or more `summarise` outputs.

    Title and notes are lines of their own: as a table's title or caption rich wraps them to the table's width.
    """
    keys = _key_columns(rows)
    results = Table()
    for name, _ in keys:
        results.add_column(name, no_wrap=True)
    timeouts = any(r["jobs"].get("timed_out", 0) for r in rows)  # a column only where a job hit its time limit
    columns = ("utilization", "goodput", "ETTR", "completed", *(("timed out",) if timeouts else ()), "pending at end",
               "interruptions", "lost GPU-h")  # fmt: skip
    for name in columns:
        results.add_column(name, justify="right", no_wrap=True)
    for r in rows:
        timed_out = (f"{r['jobs'].get('timed_out', 0):,}",) if timeouts else ()
        results.add_row(
            *(f(r) for _, f in keys),
            f"{r['utilization']:.3f}",
            f"{r['goodput']:.3f}",
            f"{r['ettr']:.3f}",
            f"{r['jobs']['completed']:,}",
            *timed_out,
            f"{r['jobs']['pending_at_end']:,}",
            f"{r['failures']['job_interruptions']:,}",
            f"{r['gpu_hours']['lost_work']:,.1f}",
        )
    present = [n for n, _, _ in SIZE_CLASSES if any(r["by_size_class"][n]["wait_incl_pending"]["count"] for r in rows)]
    waits = Table()
    for name, _ in keys:
        waits.add_column(name, no_wrap=True)
    for n in present:
        waits.add_column(n, justify="right", no_wrap=True)
    for r in rows:
        waits.add_row(*(f(r) for _, f in keys), *(wait_p90_cell(r["by_size_class"][n]) for n in present))
    out: list[RenderableType] = [Text(title(rows)), results, Text("p90 wait in seconds, by job size (GPUs):")]
    out.append(waits if present else Text("no job started or pending"))
    notes = ["lost GPU-h: work lost to failures, preemptions and time-limit kills (JSON gpu_hours.lost_work)"]
    for r in rows:
        line = gpu_fault_line(r)
        if line is not None:
            keys_of = ", ".join(f(r) for _, f in keys)
            notes.append(f"[{keys_of}] {line}" if keys_of else line)
    if any(wait_p90_cell(r["by_size_class"][n]).startswith(">=") for r in rows for n in present):
        notes.append(
            ">=: includes jobs still pending at the end, their wait counted to the end: a lower bound "
            "(JSON by_size_class.*.wait_incl_pending)"
        )
    return [*out, *(Text(n) for n in notes)]
