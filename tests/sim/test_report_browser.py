"""The simulate HTML report opened in Debian's headless Chromium: it renders, logs no console error, and its
three time-series plots are inline SVG in the DOM."""

from __future__ import annotations

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
