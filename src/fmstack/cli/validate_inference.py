"""``fmstack validate --only inference``: the inference model against published serving measurements (table, JSON)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from rich.table import Table

from fmstack.cli.common import console, no_wrap, number_text


def inference_validation(cat: Any) -> tuple[list[Any], dict[str, Any]]:
    """`fmstack validate` (inference): the checks and their JSON."""
    from fmstack.perfmodel.inference_validation import summary, validate_inference

    checks = validate_inference(cat)
    med, worst, n = summary(checks)
    data = {"cases": [asdict(c) for c in checks], "median_abs_error_pct": med, "worst_abs_error_pct": worst,
            "compared_in_scope": n, "compared": n, "not_expressible": sum(1 for c in checks if c.predicted is None)}  # fmt: skip
    return checks, data


def render_inference_validation(checks: list[Any]) -> None:
    from fmstack.perfmodel.inference_validation import summary

    out = console()
    table = Table("id", "model", "system", "metric", "measured", "predicted", "error", "config",
                  title="inference: predicted vs published (every row counts)", title_justify="left")  # fmt: skip
    no_wrap(table, "id", "measured", "predicted", "error")
    for c in (c for c in checks if c.in_scope):
        pred = "-" if c.predicted is None else number_text(c.predicted)
        err = "-" if c.error_pct is None else f"{c.error_pct:+.1f} %"
        table.add_row(c.id, c.model, c.system, c.metric, f"{c.measured:,g}", pred, err, c.config)
    out.print(table)
    apart = [c for c in checks if not c.in_scope]
    if apart:
        why = Table("id", "metric", "measured", "why not", title="inference: not expressible", title_justify="left")
        no_wrap(why, "id", "measured")
        for c in apart:
            why.add_row(c.id, c.metric, "-" if c.measured is None else f"{c.measured:,g}", f"[yellow]{c.reason}[/]")
        out.print(why)
    med, worst, n = summary(checks)
    n_out = sum(1 for c in checks if c.predicted is None)
    out.print(f"inference: {n} cases predicted, median |error| {med:.1f} %, worst {worst:.1f} % "
              f"(acceptance <= 15 % / <= 35 %); {n_out} not expressible")  # fmt: skip
