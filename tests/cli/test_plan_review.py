"""What a planning review (session 7) found, each pinned with the behaviour a user expects."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import pytest

from fmstack.catalog import load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.cli.main import main
from fmstack.perfmodel.planner import SearchSpace, plan_training
from fmstack.reports.plan_report import breakdown_figure
from tests.cli.test_plan_cli import _commands


def test_html_breakdown_bars_add_up_to_the_step_time() -> None:
    """Every part of the step gets a bar, so each stacked bar is the step time (the overlap slowdown, 12 % of
    this step, was missing from the HTML report)."""
    cat = load_catalog()
    cluster = build_cluster(cat, "p5.48xlarge", 64)
    space = SearchSpace(seq_len=8192, global_batch=512)
    result = plan_training(cat.model("llama3.1-70b"), [cluster], tokens=2e12, space=space, top=3)
    assert any(e.parts_s["overlap"] > 0.05 * e.step_time_s for e in result.ranked)
    fig = breakdown_figure(result)
    names = {trace.name for trace in fig.data}  # type: ignore[attr-defined]
    assert set(result.ranked[0].parts_s) <= names
    for row, est in enumerate(result.ranked):
        total = sum(float(trace.x[row]) for trace in fig.data)  # type: ignore[attr-defined]
        assert total == pytest.approx(est.step_time_s, rel=1e-12)


def _invoke(*args: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue() + err.getvalue()


@pytest.mark.parametrize("command", [("plan", "train"), ("estimate", "train")])
def test_help_examples_copy_paste_and_run(command: tuple[str, ...], tmp_path: Path, monkeypatch: Any) -> None:
    """The examples in --help keep their line breaks (click rewrapped them into '... \\     --gpus ...', which a
    shell reads as a stray ' ' argument) and run as printed."""
    monkeypatch.chdir(tmp_path)  # the cost example writes plan.html
    code, help_text = _invoke(*command, "--help")
    assert code == 0
    assert "\\ " not in help_text
    commands = _commands(help_text, f"fmstack {' '.join(command)} ")
    assert commands
    for argv in commands:
        code, out = _invoke(*argv, "--json")
        assert code == 0, (argv, out)
