"""The simulate HTML report opened in Debian's headless Chromium: it renders, logs no console error, and its
three time-series plots are inline SVG in the DOM."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from fmstack.cli.sim_cmd import simulate
from tests.browser import render

ARGS = ["--nodes", "8", "--days", "1", "--jobs", "80", "--spares", "1", "--seed", "5"]


@pytest.mark.browser
def test_simulate_html_renders_in_chromium(tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    r = CliRunner().invoke(simulate, [*ARGS, "--html", str(page)])
    assert r.exit_code == 0, r.output
    rendered = render(page)
    assert rendered.console_errors == []
    dom = rendered.dom
    assert "fmstack fleet twin: 8 x p5.48xlarge, 1 days" in dom
    svgs = re.findall(r"<svg[^>]*aria-label=\"([^\"]+)\"", dom)
    assert svgs == ["GPUs allocated", "Jobs pending", "Nodes out (down, rebooting, replaced)"]
    # each plot has a drawn line: a 1-day run sampled every 3,600 s has 24 or 25 points
    lines = re.findall(r"<polyline[^>]*points=\"([^\"]+)\"", dom)
    assert len(lines) == 3
    assert all(len(pts.split()) >= 24 for pts in lines)


@pytest.mark.browser
def test_simulate_html_shows_gpu_fault_classes(tmp_path: Path) -> None:
    # 32 nodes for 60 days at llama3's 3.789 failures per 1,000 node-days: 7.3 failures expected, seed 3 draws 6 GPU
    # faults; the table lists every class drawn with a weight (7: hbm3_remap_failure has share 0 by default)
    page = tmp_path / "report.html"
    args = ["--nodes", "32", "--days", "60", "--jobs", "300", "--seed", "3"]
    r = CliRunner().invoke(simulate, [*args, "--html", str(page), "--json"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    rendered = render(page)
    assert rendered.console_errors == []
    table = rendered.dom.split("<h2>GPU faults by Xid class</h2>")[1].split("</table>")[0]
    rows = re.findall(r"<tr><td>([a-z0-9_]+)</td><td>([\d,]+)</td><td>([\d.]+)</td><td>([\d.,]+)</td><td>([^<]*)</td>",
                      table)  # fmt: skip
    shares = summary["failures"]["model"]["gpu_fault_shares"]
    assert [n for n, *_ in rows] == list(shares) and len(rows) == 7
    drawn = summary["failures"]["by_gpu_fault"]
    total = sum(drawn.values())
    assert total >= 1
    for name, count, share, expected, action in rows:
        assert int(count) == drawn.get(name, 0)
        assert float(share) == pytest.approx(shares[name], abs=5e-4)
        assert float(expected) == pytest.approx(total * shares[name], abs=0.05)
        acts = summary["failures"]["by_gpu_fault_action"].get(name, {})
        assert action == (", ".join(f"{a.lower()} {n}" for a, n in acts.items()) or "-")
    assert "recurrence window (24 h; planned maintenance not counted)" in rendered.dom
    # the text output has the same classes on one line
    r = CliRunner().invoke(simulate, args)
    line = next(x for x in r.stdout.splitlines() if x.startswith("GPU faults by Xid class: "))
    assert all(f"{k} {v} (" in line for k, v in drawn.items())
