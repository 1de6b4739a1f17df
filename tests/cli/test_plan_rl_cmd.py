"""`fmstack plan rl`: its rows' estimate_command reruns them bit for bit; the text output names the best, its
bottleneck and the caveat; --json's contract."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest

from fmstack.cli.rl_plan_cmd import parse_nodes
from fmstack.errors import InputError


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fmstack", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("placement", ["colocated,split,async", "split,async"])
def test_estimate_command_reproduces_each_row_bit_for_bit(placement: str) -> None:
    proc = _run("plan", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "2,4",
                "--algorithm", "ppo", "--samples", "2", "--minibatches", "4", "--no-reference",
                "--rollout-memory-fraction", "0.6", "--max-trajectory-age", "2", "--response-len", "2048",
                "--placement", placement, "--top", "3", "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["estimate_command"] == data["ranked"][0]["estimate_command"]
    for key in ("considered", "evaluated", "pruned", "rejected_shape", "rejected_memory", "notes", "objective"):
        assert key in data
    assert data["evaluated"] + data["pruned"] + data["rejected_shape"] == data["considered"]
    for row in data["ranked"]:
        argv = shlex.split(row["estimate_command"])
        assert argv[:3] == ["fmstack", "estimate", "rl"]
        again = _run(*argv[1:], "--json")
        assert again.returncode == 0, again.stderr
        est = json.loads(again.stdout)
        assert est["step_time_s"] == row["step_time_s"] and est["parts_s"] == row["parts_s"]
        assert est["bottleneck"] == row["bottleneck"] and est["fits"]
        assert est["config"]["algorithm"] == "ppo" and est["config"]["minibatches"] == 4
        assert row["placement_kind"] in placement.split(",")
    steps = [r["step_time_s"] for r in data["ranked"]]
    assert steps == sorted(steps)


def test_a_log_normal_tail_is_planned_and_reproduced() -> None:
    """plan rl takes estimate rl's length distribution (review of session 11: it could not plan a long tail) and
    its rows' commands carry it."""
    proc = _run("plan", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "2", "--prompts", "64",
                "--samples", "32", "--prompt-len", "130", "--response-len", "795", "--length-dist", "lognormal",
                "--clip-ratio", "0.02", "--response-cap", "3966", "--placement", "colocated", "--top", "1", "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    row = json.loads(proc.stdout)["ranked"][0]
    argv = shlex.split(row["estimate_command"])
    assert argv[argv.index("--length-dist") + 1] == "lognormal" and argv[argv.index("--clip-ratio") + 1] == "0.02"
    est = json.loads(_run(*argv[1:], "--json").stdout)
    assert est["step_time_s"] == row["step_time_s"] and est["rollout"]["length_sigma"] > 0


def test_text_output_names_best_bottleneck_and_caveat() -> None:
    proc = _run("plan", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "2", "--top", "3")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "best ways to run one RL step of llama3.1-8b (by time) on 2 x p5.48xlarge" in out
    assert "best: colocated, rollout tp 2, train tp1 fsdp: 56.97 s per step" in out  # README's example
    assert "bottleneck: actor train" in out and "read the step times as lower bounds" in out
    assert "estimate it: fmstack estimate rl --model llama3.1-8b" in out
    assert proc.stderr == ""  # no status line off a terminal


def test_parse_nodes() -> None:
    assert parse_nodes("4") == [4] and parse_nodes("2,4,4") == [2, 4] and parse_nodes("2-16") == [2, 4, 8, 16]
    for bad in ("0", "x", "4-2", "1-100000"):
        with pytest.raises(InputError):
            parse_nodes(bad)
