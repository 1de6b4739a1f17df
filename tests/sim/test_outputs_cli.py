"""CLI outputs: JSON byte-identical per seed, OpenMetrics, Chrome trace, HTML; oracle 14 (SJF beats FIFO)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from fmstack.catalog import Catalog
from fmstack.cli.sim_cmd import simulate
from fmstack.sim.config import SimConfig
from fmstack.sim.export import to_prometheus_text
from fmstack.sim.metrics import summarise
from fmstack.sim.simulator import Simulator
from tests.sim.conftest import FlatSpeed

ARGS = ["--nodes", "8", "--days", "1", "--jobs", "80", "--spares", "1", "--seed", "5"]


def test_cli_json_is_deterministic_and_files_are_written(tmp_path: Path) -> None:
    r = CliRunner()
    a = r.invoke(simulate, [*ARGS, "--json"])
    b = r.invoke(simulate, [*ARGS, "--json", "--html", str(tmp_path / "r.html"), "--metrics",
                            str(tmp_path / "r.om"), "--chrome-trace", str(tmp_path / "t.json")])  # fmt: skip
    assert a.exit_code == 0 and b.exit_code == 0, a.output + b.output
    assert a.output == b.output
    assert json.loads(a.output)["config"]["seed"] == 5
    om = (tmp_path / "r.om").read_text()
    assert om.endswith("# EOF\n") and "# TYPE fmstack_sim_gpus_allocated gauge" in om
    trace = json.loads((tmp_path / "t.json").read_text())
    assert any(e["ph"] == "X" for e in trace["traceEvents"])
    page = (tmp_path / "r.html").read_text()
    assert "<svg" in page and "<script" not in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")


def test_compare_runs_each_combination() -> None:
    r = CliRunner().invoke(simulate, ["compare", *ARGS, "--policy", "fifo,sjf", "--recovery", "auto-resume,elastic",
                                      "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    assert [(x["config"]["policy"], x["config"]["recovery"]) for x in rows] == [
        ("fifo", "auto_resume"), ("fifo", "elastic"), ("sjf", "auto_resume"), ("sjf", "elastic")]  # fmt: skip


def test_oracle14_sjf_shortens_mean_jct_and_wait_vs_fifo(catalog: Catalog) -> None:
    """PAI simulator: FIFO mean JCT 7,918 s vs SJF 5,989 s, wait 2,880 vs 950 s (direction, not the numbers)."""
    out = {}
    for pol in ("fifo", "sjf"):
        cfg = SimConfig(nodes=8, days=2.0, jobs=400, policy=pol, faults=None, load=1.0, seed=2)
        s = summarise(Simulator(cfg, catalog, speed=FlatSpeed()).run())
        out[pol] = s["by_size_class"]["1-8"]
    assert out["sjf"]["jct"]["mean_s"] < out["fifo"]["jct"]["mean_s"]
    assert out["sjf"]["wait"]["mean_s"] < out["fifo"]["wait"]["mean_s"]


PROMTOOL = shutil.which("promtool")


def test_metrics_file_holds_the_documented_totals(tmp_path: Path) -> None:
    """docs/simulate.md promises ``fmstack_sim_gpu_seconds_total{kind}`` and ``fmstack_sim_failures_total``; until
    2026-11-24 no output wrote them (review). They close the --metrics file, stamped at the horizon (14 days after
    2026-01-01T00:00:00Z = 1767225600 + 14 x 86400), with the JSON's values in seconds."""
    om_path = tmp_path / "r.om"
    args = ["--nodes", "256", "--days", "14", "--jobs", "200", "--spares", "2", "--seed", "5"]
    r = CliRunner().invoke(simulate, [*args, "--json", "--metrics", str(om_path)])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)  # stderr holds the backfill-window warning
    om = om_path.read_text()
    at = " 1768435200.000"
    lab = 'policy="slurm-backfill",recovery="auto_resume",seed="5"'
    for kind in ("allocated", "productive", "checkpoint", "lost_work", "restart", "hang_until_detected", "idle",
                 "down", "spare_standby"):  # fmt: skip
        value = out["gpu_hours"][kind] * 3600.0
        assert f'fmstack_sim_gpu_seconds_total{{{lab},kind="{kind}"}} {value:.3f}{at}\n' in om
    assert "# TYPE fmstack_sim_gpu_seconds counter\n" in om and "# TYPE fmstack_sim_failures counter\n" in om
    assert len(out["failures"]["by_category"]) > 1
    for cat, n in out["failures"]["by_category"].items():
        assert f'fmstack_sim_failures_total{{{lab},category="{cat}"}} {n}{at}\n' in om
    assert f"fmstack_sim_utilization_ratio{{{lab}}} {out['utilization']}{at}\n" in om
    assert om.endswith("# EOF\n")
    if PROMTOOL is None:
        pytest.skip("promtool not installed (Debian package prometheus)")
    blocks = subprocess.run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(om_path), str(tmp_path / "db")],
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert blocks.returncode == 0, blocks.stderr
    text = to_prometheus_text(out)
    assert "fmstack_sim_gpu_seconds_total{" in text and "# TYPE fmstack_sim_gpu_seconds_total counter" in text
    lint = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert lint.returncode == 0, lint.stdout + lint.stderr
