"""`fmstack validate --only memcheck`: the memory model against published peak memory, as JSON and text lines."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fmstack.catalog import Catalog
from fmstack.perfmodel.validation_peak_memory import TOLERANCE_PCT, check_peak_memory, memory_summary


def memory_check(catalog: Catalog) -> tuple[dict[str, Any], list[str]]:
    """The JSON block (``memory_check_peak``) and the text lines of the peak-memory check."""
    checks = check_peak_memory(catalog)
    summary = memory_summary(checks)
    block = {
        "source": "data/peak-memory.csv (torchtitan benchmarks; peak reserved GiB as the source prints it)",
        "tolerance_pct": TOLERANCE_PCT,
        "summary": summary,
        "cases": [asdict(c) for c in checks],
    }
    lines = ["memory check (not calibration data): model total (no reserve) vs published peak reserved, GiB"]
    lines.append(f"{'id':5} {'source':29} {'locator':38} {'config':52} {'measured':>8} {'predicted':>9} {'error':>8}")
    for c in checks:
        pred = "-" if c.predicted_gib is None else f"{c.predicted_gib:.1f}"
        err = "-" if c.error_pct is None else f"{c.error_pct:+.1f} %"
        config = c.config or "not expressible: op-level selective checkpointing"
        lines.append(f"{c.id:5} {c.source:29} {c.locator:38} {config:52} {c.measured_gib:8.1f} {pred:>9} {err:>8}")
    lines.append(
        f"memory check: {summary['compared']} rows compared, median error {summary['median_error_pct']:+.1f} %, "
        f"median |error| {summary['median_abs_error_pct']:.1f} %, worst {summary['worst_abs_error_pct']:.1f} % "
        f"(tolerance {TOLERANCE_PCT:.0f} %; docs/perfmodel.md 'Memory against published peak memory' says why)"
    )
    return block, lines
