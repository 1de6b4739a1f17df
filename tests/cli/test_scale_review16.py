"""Session 16 review of `fmstack scale`: the HTML report says what the terminal says (table, notes, skipped values),
renders in a real headless Chromium, and names the efficiency line for what it measures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fmstack.perfmodel.scaling import ScalePoint
from fmstack.reports.plan_report import scaling_figure
from tests.browser import render


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fmstack", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.browser
def test_scale_html_has_the_table_notes_and_skipped_values(tmp_path: Path) -> None:
    """The report held the chart only: no configuration, global batch, cost, the GB200 rounding note or a skipped
    value (p4d at --precision fp8) that the terminal prints."""
    page = tmp_path / "scale.html"
    args = ["scale", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "64", "--tokens", "1e12",
            "--axis", "gpu", "--values", "p4d.24xlarge,p5.48xlarge,u-p6e-gb200x72", "--precision", "fp8"]  # fmt: skip
    proc = _run(*args, "--html", str(page))
    assert proc.returncode == 0, proc.stderr
    points = json.loads(_run(*args, "--json").stdout)["points"]
    rendered = render(page)
    assert rendered.console_errors == []
    dom = rendered.dom
    assert dom.count('class="plot-container plotly"') == 1
    assert "<table>" in dom and "tokens/s per GPU" in dom and "configuration" in dom and "bottleneck" in dom
    for p in points:  # every point's row with its tokens/s as the terminal prints it
        assert f"<td>{p['value']}</td>" in dom and f"<td>{p['tokens_per_s']:,.0f}</td>" in dom
    assert "p4d.24xlarge: skipped: A100-40GB has no 'fp8' peak" in dom
    assert "u-p6e-gb200x72: 64 GPUs rounded to 72 (18 nodes)" in dom
    assert "tokens/s per GPU vs the first point" in dom  # the chart's efficiency line, named for the gpu axis


def _point(value: str, kind: str) -> ScalePoint:
    return ScalePoint(
        value=value, num_gpus=8, step_time_s=1.0, mfu=0.5, tokens_per_s=1e5, tokens_per_s_per_gpu=1.0,
        time_to_train_s=1.0, ideal_time_s=1.0, cost_usd=None, bottleneck="GEMM compute: 70 % of the step",
        config="tp1", scaling_efficiency=1.0, efficiency_kind=kind, num_nodes=1, global_batch=1,
        global_batch_tokens=1, global_batch_changed=kind == "batch-changed", scale_out_fabric="efa-v2",
        network_bw_gbps_per_node=400.0, network_latency_us=1.0,
    )  # fmt: skip


def test_chart_names_the_efficiency_line_by_what_it_measures() -> None:
    """Over GPU kinds the dotted line is a speed-up against the first point (2.45 for GB200 vs H100), which the
    legend called "scaling efficiency"; strong and weak sweeps keep their names."""
    names = {}
    for kinds in (["strong", "strong"], ["weak", "weak"], ["relative", "relative"], ["strong", "batch-changed"]):
        fig = scaling_figure([_point(str(i), k) for i, k in enumerate(kinds)], "nodes")
        names[tuple(kinds)] = fig.data[2].name  # type: ignore[attr-defined]
    assert list(names.values()) == ["strong-scaling efficiency", "weak-scaling efficiency",
                                    "tokens/s per GPU vs the first point", "tokens/s per GPU vs the first point"]  # fmt: skip
