"""`fmstack plan rl --html`: the page's table holds `--json`'s numbers, each bar of the step figure ends at its row's
step (asynchronous rows: two sides, neither past the step), the caveat is on the page, the per-(instance, nodes)
bests agree with the ranking, the file is written atomically, and the page renders in headless Chromium."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from fmstack.reports.rl_report import step_figure
from tests.browser import render

_BASE = ("plan", "rl", "--model", "llama3.1-8b", "--instance")
SINGLE = (*_BASE, "p5.48xlarge", "--nodes", "2", "--top", "5")
"""docs/rl-planning.md's example: colocated rows, the best 56.97 s."""
SEVERAL = (*_BASE, "p5.48xlarge", "--nodes", "2,4", "--prompts", "64", "--response-len", "2048",
           "--max-trajectory-age", "2", "--top", "6")  # fmt: skip
"""Two node counts; every ranked row asynchronous (4 nodes, 2 rollout nodes)."""


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fmstack", *args], capture_output=True, text=True, timeout=300)


class _Tables(HTMLParser):
    """Every <table> of a page as (the <h2> before it, rows of cell texts, the header row first)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[tuple[str, list[list[str]]]] = []
        self._h2 = ""
        self._in: str | None = None
        self._text = ""

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag == "table":
            self.tables.append((self._h2, []))
        elif tag == "tr":
            self.tables[-1][1].append([])
        if tag in ("h2", "td", "th"):
            self._in, self._text = tag, ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "h2" and self._in == "h2":
            self._h2 = self._text
        elif tag in ("td", "th") and self._in == tag:
            self.tables[-1][1][-1].append(self._text)
        if tag == self._in:
            self._in = None

    def handle_data(self, data: str) -> None:
        if self._in:
            self._text += data


def _plan(args: tuple[str, ...], page: Path) -> tuple[dict[str, Any], dict[str, list[list[str]]], str]:
    proc = _run(*args, "--json", "--html", str(page))
    assert proc.returncode == 0, proc.stderr
    text = page.read_text()
    parser = _Tables()
    parser.feed(text)
    return json.loads(proc.stdout), dict(parser.tables), text


@pytest.mark.parametrize("args", [SINGLE, SEVERAL], ids=["one cluster", "two node counts"])
def test_page_holds_the_json_numbers(args: tuple[str, ...], tmp_path: Path) -> None:
    data, tables, text = _plan(args, tmp_path / "rl.html")
    several = args is SEVERAL
    header, *rows = tables["ranked configurations"]
    assert header == ["#", *(["instance", "nodes"] if several else []), "placement", "rollout tp", "train", "step (s)",
                      "rollout (s)", "train (s)", "sync (s)", "peak GiB/GPU", "bottleneck"]  # fmt: skip
    assert len(rows) == len(data["ranked"]) > 1
    for i, (cells, r) in enumerate(zip(rows, data["ranked"], strict=True), 1):
        cell = dict(zip(header, cells, strict=True))
        assert (
            cell["#"] == str(i) and cell["placement"] == r["placement"] and cell["rollout tp"] == str(r["rollout_tp"])
        )
        assert cell["train"] == f"{r['train_layout']} {r['train_sharding']}"
        assert cell["step (s)"] == f"{r['step_time_s']:.2f}" and cell["rollout (s)"] == f"{r['rollout_s']:.2f}"
        assert cell["train (s)"] == f"{r['train_s']:.2f}" and cell["sync (s)"] == f"{r['sync_s'] + r['switch_s']:.2f}"
        assert cell["peak GiB/GPU"] == f"{r['peak_gib_per_gpu']:.1f}" and cell["bottleneck"] == r["bottleneck"]
        if several:
            assert (cell["instance"], cell["nodes"]) == (r["instance"], str(r["nodes"]))
    counts = (f"{data['considered']:,} configurations considered: {data['rejected_shape']:,} rejected for shape, "
              f"{data['pruned']:,} pruned by the bound, {data['evaluated']:,} estimated")  # fmt: skip
    assert counts in text
    assert [n for (n,) in tables["notes"][1:]] == data["notes"]
    assert any("read the step times as lower bounds" in n for n in data["notes"])
    assert [c for _, c in tables["estimate each row"][1:]] == [r["estimate_command"] for r in data["ranked"]]
    if not several:  # docs/rl-planning.md's hand-checked row
        assert rows[0][:5] == ["1", "colocated", "2", "tp1 fsdp", "56.97"]


def _bar_ends(fig: Any) -> dict[str, list[tuple[float, float]]]:
    """Each bar (y category) of the step figure: its segments as (start, end) seconds."""
    out: dict[str, list[tuple[float, float]]] = {}
    for trace in fig.data:
        if trace.type != "bar":
            continue
        for y, x, base in zip(trace.y, trace.x, trace.base, strict=True):
            out.setdefault(y, []).append((base, base + x))
    return out


@pytest.mark.parametrize("args", [SINGLE, SEVERAL], ids=["one cluster", "two node counts"])
def test_each_bar_ends_at_its_step_and_async_sides_overlap(args: tuple[str, ...], tmp_path: Path) -> None:
    data, _, _ = _plan(args, tmp_path / "rl.html")
    bars = _bar_ends(step_figure(data, several=args is SEVERAL))
    kinds = set()
    for i, r in enumerate(data["ranked"], 1):
        mine = {y: segs for y, segs in bars.items() if y.startswith(f"#{i} ")}
        step, parts = r["step_time_s"], r["parts_s"]
        kinds.add(r["async"])
        for segs in mine.values():  # every bar (each side of an async row) ends at the step, none past it
            segs.sort()
            assert max(end for _, end in segs) == pytest.approx(step, rel=1e-12)
        if not r["async"]:  # one bar: the parts one after another from 0, adding up to the step
            (segs,) = mine.values()
            assert segs[0][0] == 0.0 and all(
                a[1] == pytest.approx(b[0], rel=1e-12) for a, b in itertools.pairwise(segs)
            )
            assert sum(e - s for s, e in segs) == pytest.approx(step, rel=1e-12)
            continue
        assert len(mine) == 2  # rollout side and training side, each drawn from 0
        rollout_side = next(s for y, s in mine.items() if y.endswith("rollout side"))
        train_side = next(s for y, s in mine.items() if y.endswith("training side"))
        rest = r["train_s"] + r["switch_s"]
        assert (0.0, pytest.approx(parts["rollout"])) in [(s, e) for s, e in rollout_side]
        assert min(s for s, _ in train_side) == 0.0
        # the step is the longer side plus the weight sync, not the sum (rollout + training > step here)
        assert step == pytest.approx(max(parts["rollout"], rest) + parts["weight_sync"], rel=1e-12)
        assert parts["rollout"] + rest > step
    assert kinds == ({True} if args is SEVERAL else {False})


def test_best_per_instance_and_nodes_agrees_with_the_ranking(tmp_path: Path) -> None:
    data, tables, _ = _plan(SEVERAL, tmp_path / "rl.html")
    header, *rows = tables["best step per instance and node count"]
    assert header == ["instance", "nodes", "GPUs", "step (s)", "samples/s", "best row"]
    assert [(r[0], r[1], r[2]) for r in rows] == [("p5.48xlarge", "2", "16"), ("p5.48xlarge", "4", "32")]
    best = {r[1]: float(r[3]) for r in rows}
    # by time, the overall best is the best of the node counts, and no ranked row beats its own cluster's best
    assert min(best.values()) == pytest.approx(data["ranked"][0]["step_time_s"], abs=0.005)
    for r in data["ranked"]:
        assert best[str(r["nodes"])] <= round(r["step_time_s"], 2)


def test_writing_keeps_what_the_user_had(tmp_path: Path) -> None:
    page = tmp_path / "rl.html"
    page.write_text("the user's previous report")
    proc = _run(*SINGLE, "--prompts", "0", "--html", str(page))  # refused after the path was checked
    assert proc.returncode == 2 and page.read_text() == "the user's previous report"
    proc = _run(*SINGLE, "--html", str(page))
    assert proc.returncode == 0, proc.stderr
    assert page.read_text().startswith("<!DOCTYPE html>") and f"report written to {page}" in proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rl.html"]  # no temporary file left beside it


@pytest.mark.browser
def test_plan_rl_html_renders_in_chromium(tmp_path: Path) -> None:
    page = tmp_path / "rl.html"
    proc = _run(*SEVERAL, "--html", str(page))
    assert proc.returncode == 0, proc.stderr
    assert "http://" not in page.read_text().split("<body>")[0]  # nothing fetched from the network to render
    rendered = render(page)
    assert rendered.console_errors == []
    assert rendered.dom.count('class="plot-container plotly"') == 3  # step, memory, best per (instance, nodes)
    assert rendered.dom.count("<table") == 4  # ranked, notes, best per (instance, nodes), estimate commands
    assert "ranked configurations" in rendered.dom and "read the step times as lower bounds" in rendered.dom
    assert "training side" in rendered.dom and "usable HBM" in rendered.dom
