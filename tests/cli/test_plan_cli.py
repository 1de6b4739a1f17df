"""`fmstack plan train` / `fmstack scale` end to end: JSON contract, HTML in a real headless browser."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.browser import render


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fmstack", *args], capture_output=True, text=True, timeout=300, cwd=cwd
    )


def test_plan_json_contract() -> None:
    proc = _run("plan", "train", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--gpus", "256,512",
                "--tokens", "2e12", "--global-batch", "512", "--top", "3", "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["considered"] >= data["rejected_shape"] + data["rejected_memory"] > 0
    assert len(data["ranked"]) == 3
    times = [r["time_to_train_s"] for r in data["ranked"]]
    assert times == sorted(times)
    best = data["ranked"][0]
    for key in ("step_time_s", "mfu", "hfu", "tflops_per_gpu", "tokens_per_s", "tokens_per_s_per_gpu",
                "memory_gib_per_gpu", "fits", "bottleneck", "breakdown"):  # fmt: skip
        assert key in best
    assert best["fits"] is True
    assert best["time_to_train_s"] == pytest.approx(2e12 / best["tokens_per_s"])


def test_scale_over_nodes_json() -> None:
    proc = _run("scale", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "64", "--tokens", "1e12",
                "--axis", "nodes", "--values", "8,16,32", "--global-batch", "512", "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    points = json.loads(proc.stdout)["points"]
    assert [p["num_gpus"] for p in points] == [64, 128, 256]
    assert points[0]["scaling_efficiency"] == 1.0
    assert all(0 < p["scaling_efficiency"] <= 1.05 for p in points)
    assert points[2]["tokens_per_s"] > points[0]["tokens_per_s"]
    assert [p["global_batch"] for p in points] == [512] * 3
    assert [p["efficiency_kind"] for p in points] == ["strong"] * 3


def _commands(text: str, prefix: str) -> list[list[str]]:
    """The command lines in ``text`` that start with ``prefix`` (backslash continuations joined)."""
    out, current = [], ""
    for line in text.splitlines():
        line = line.strip()
        if current or line.startswith(prefix):
            current += " " + line.removesuffix("\\").strip()
            if not line.endswith("\\"):
                out.append(shlex.split(current)[1:])  # drop "fmstack"
                current = ""
    return out


def test_readme_scale_command_runs_as_written() -> None:
    # the README line sweeps GPU kinds including u-p6e-gb200x72, whose 512 GPUs must round to 7 whole racks
    commands = _commands((Path(__file__).parents[2] / "README.md").read_text(), "fmstack scale ")
    assert commands
    for argv in commands:
        proc = _run(*argv)
        assert proc.returncode == 0, (argv, proc.stderr)
        assert "512 GPUs rounded to 504 (126 nodes)" in " ".join(proc.stdout.split())


def test_scale_help_examples_run_as_written() -> None:
    help_text = _run("scale", "--help").stdout
    commands = _commands(help_text, "fmstack scale ")
    assert len(commands) == 2
    for argv in commands:
        proc = _run(*argv, "--json")
        assert proc.returncode == 0, (argv, proc.stderr)
        data = json.loads(proc.stdout)
        assert data["points"] and data["skipped"] == []
        assert all(not p["global_batch_changed"] for p in data["points"])


def test_scale_json_says_what_each_point_used() -> None:
    proc = _run("scale", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "64", "--tokens", "1e12",
                "--axis", "efa", "--values", "efa-v1,efa-v2", "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["reference_global_batch"] == 512
    v1, v2 = data["points"]
    assert (v1["network_bw_gbps_per_node"], v2["network_bw_gbps_per_node"]) == (50, 400)
    for key in ("value", "num_gpus", "tokens_per_s", "scaling_efficiency", "global_batch", "global_batch_changed",
                "efficiency_kind", "scale_out_fabric", "network_latency_us", "note"):  # fmt: skip
        assert key in v1


@pytest.mark.browser
def test_plan_html_renders_in_chromium(tmp_path: Path) -> None:
    page = tmp_path / "plan.html"
    proc = _run("plan", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "64",
                "--tokens", "1e12", "--top", "4", "--html", str(page))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    text = page.read_text()
    assert "http://" not in text.split("<body>")[0]  # nothing fetched from the network to render
    rendered = render(page)
    assert rendered.console_errors == []
    assert rendered.dom.count('class="plot-container plotly"') >= 3  # breakdown, memory, scaling
    assert "ranked configurations" in rendered.dom
    assert "where the step time goes" in rendered.dom


def test_plan_with_failures_objective_json() -> None:
    proc = _run("plan", "train", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--gpus", "512,1024",
                "--tokens", "2e12", "--global-batch", "512", "--top", "3", "--objective", "time-with-failures",
                "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["objective"] == "time-with-failures"
    times = [r["time_to_train_s"] for r in data["ranked"]]
    assert times == sorted(times)
    for row in data["ranked"]:
        assert 0 < row["goodput"] <= 1
        assert row["time_to_train_s"] >= row["ideal_time_s"]
        assert row["ideal_time_s"] == pytest.approx(2e12 / row["tokens_per_s"])
        for key in ("checkpoint_size_gib", "checkpoint_write_s", "checkpoint_interval_s", "fsx_capacity_tib_needed"):
            assert row[key] > 0
