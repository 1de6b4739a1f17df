"""`fmstack estimate serve`, `fmstack estimate rl`, `fmstack plan serve`, `fmstack validate --only inference`."""

from __future__ import annotations

import json
import math
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.browser import render


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fmstack", *args], capture_output=True, text=True, timeout=300, cwd=cwd
    )


def test_estimate_serve_json_contract() -> None:
    proc = _run("estimate", "serve", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--tp", "8",
                "--input-len", "2048", "--output-len", "256", "--concurrency", "64", "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    for key in ("ttft_s", "itl_s", "output_tokens_per_s", "requests_per_s", "kv_cache_gib", "max_concurrency",
                "bottleneck"):  # fmt: skip
        assert key in data
    for name in ("ttft", "itl", "latency"):
        p50, p90, p99 = (data[f"{name}_p{q}_s"] for q in (50, 90, 99))
        assert 0 < p50 <= p90 <= p99
        assert 0 < data[f"{name}_mean_s_sim"] <= p99  # the simulation's own mean, same requests as its percentiles
    # analytic TTFT: the iteration in progress + this prompt's iteration (was one iteration, 0.0996 s)
    assert data["ttft_s"] > 0.15
    # 64 running sequences of 2304 tokens x 327,680 B of bf16 KV each = 45 GiB exactly
    assert data["kv_cache_gib"] == 64 * 2304 * 327_680 / 2**30 == 45.0
    assert data["requests_per_s"] * data["latency_s"] == pytest.approx(64)
    assert data["output_tokens_per_s"] == pytest.approx(256 * data["requests_per_s"])


def test_estimate_serve_table_and_disagg() -> None:
    proc = _run("estimate", "serve", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--nodes", "2",
                "--tp", "8", "--precision", "fp8", "--input-len", "2000", "--output-len", "500", "--no-simulate",
                "--disagg", "--ttft-slo", "1", "--itl-slo", "0.02")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "bottleneck:" in proc.stdout
    assert "disaggregation wins" in proc.stdout


def test_estimate_serve_simulates_a_given_split() -> None:
    """--prefill-replicas 6 --decode-replicas 1 --qps 5 on 2 nodes: the split's own percentiles, its pools and the
    KV transfer under ``disaggregated_simulation``; the top-level keys are one of the 7 replicas colocated at 5/7."""
    proc = _run("estimate", "serve", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--nodes", "2",
                "--tp", "2", "--precision", "fp8", "--input-len", "8192", "--output-len", "256",
                "--max-num-tokens", "2048", "--qps", "5", "--prefill-replicas", "6", "--decode-replicas", "1",
                "--no-simulate", "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["requests_per_s"] == pytest.approx(5 / 7)
    z = data["disaggregated_simulation"]
    for name in ("ttft", "itl", "latency"):
        assert 0 < z[f"{name}_p50_s"] <= z[f"{name}_p90_s"] <= z[f"{name}_p99_s"]
    assert (z["prefill_replicas"], z["decode_replicas"]) == (6, 1)
    # 8192 tokens x 163,840 B of bf16 KV (80 layers x 8 KV heads x 128 x 2 x 2 B) in one transfer over NVLink
    assert z["kv_bytes_per_request"] == 8192 * 163_840 and z["kv_link"].startswith("NVLink")
    # 5 req/s of 0.772 s prompts on 6 replicas: 64 % busy by hand; the measured window's own arrivals (the run's
    # Poisson draws, arrivals first from its seed) came at 4.32 req/s: 55.5 %; the decode replica below its slots
    arrivals = np.cumsum(np.random.default_rng(z["seed"]).exponential(1 / 5, z["num_requests"]))
    first, last = arrivals[z["warmup_requests"]], arrivals[-1]
    realised = (z["num_requests"] - z["warmup_requests"] - 1) / (last - first)
    assert z["prefill_s"] == pytest.approx(0.772, abs=5e-4)
    assert z["prefill_utilisation"] == pytest.approx(realised * z["prefill_s"] / 6, abs=0.01)
    assert abs(realised - 5) < 5 * 3 / math.sqrt(z["num_requests"] - z["warmup_requests"])  # within 3 sigma
    assert z["decode_batch_mean"] < z["decode_slots"] and z["bottleneck"] == "prefill"


def test_estimate_rl_json() -> None:
    proc = _run("estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "2",
                "--algorithm", "ppo", "--samples", "1", "--prompts", "512", "--rollout-tp", "1", "--train-tp", "1",
                "--compare", "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["step_time_s"] == pytest.approx(sum(data["parts_s"].values()))
    assert data["parts_s"]["critic_train"] > 0
    assert "of the step" in data["bottleneck"]
    assert set(data["placements"]) == {"colocated", "split", "split_async"}
    assert data["placements"]["colocated"]["step_time_s"] == pytest.approx(data["step_time_s"])
    assert data["fits"] is True and data["memory"]["usable_gib"] > 0
    assert set(data["memory"]["parts_gib"]) >= {"actor_state", "critic_state", "reference_weights", "rollout_engine"}


def test_estimate_rl_long_tail_table() -> None:
    proc = _run("estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--prompts", "64",
                "--prompt-len", "256", "--response-len", "256", "--rollout-tp", "1", "--train-tp", "1",
                "--length-spread", "0.5")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    assert "fills of the engine take" in out and "(the last wave and the longest responses)" in out


def test_estimate_rl_names_the_part_that_does_not_fit() -> None:
    proc = _run("estimate", "rl", "--model", "qwen3-8b", "--instance", "p5.48xlarge", "--algorithm", "ppo",
                "--critic", "llama3.1-70b", "--rollout-tp", "1", "--train-tp", "1")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    assert "(fits)" not in out
    assert "does NOT fit" in out and "GiB over" in out and "largest part: critic training state" in out


def test_plan_serve_json() -> None:
    proc = _run("plan", "serve", "--model", "llama3.1-8b", "--qps", "10", "--input-len", "1024", "--output-len",
                "128", "--ttft-p99", "0.5", "--itl-p99", "0.05", "--instance", "p5.48xlarge", "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    best = data["best"]
    assert best["meets_slo"] is True
    assert best["sim"]["ttft_p99_s"] <= 0.5 and best["sim"]["itl_p99_s"] <= 0.05
    assert best["cost_per_hour_usd"] == best["nodes"] * 55.04
    assert best["replicas"] * best["tp"] <= best["num_gpus"]
    verified = [c for c in data["candidates"] if c["meets_slo"]]
    assert [c["cost_per_hour_usd"] for c in verified] == sorted(c["cost_per_hour_usd"] for c in verified)


def test_validate_inference_json() -> None:
    proc = _run("validate", "--only", "inference", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)["inference"]
    # the acceptance bounds are asserted (xfail, strict) in tests/perfmodel/test_inference_validation.py
    assert data["compared"] == data["compared_in_scope"] == 22 and data["not_expressible"] == 17
    errors = sorted(abs(c["error_pct"]) for c in data["cases"] if c["predicted"] is not None)
    assert data["worst_abs_error_pct"] == errors[-1]
    assert data["median_abs_error_pct"] == (errors[10] + errors[11]) / 2


@pytest.mark.browser
def test_plan_serve_html_renders_in_chromium(tmp_path: Path) -> None:
    page = tmp_path / "serve.html"
    proc = _run("plan", "serve", "--model", "llama3.1-8b", "--qps", "5", "--input-len", "512", "--output-len", "128",
                "--ttft-p99", "0.5", "--itl-p99", "0.05", "--instance", "p5.48xlarge", "--html", str(page))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rendered = render(page)
    assert rendered.console_errors == []
    assert rendered.dom.count('class="plot-container plotly"') == 1
    assert "TTFT p99 SLO" in rendered.dom
    assert "candidates (cheapest first)" in rendered.dom


@pytest.mark.browser
def test_plan_serve_html_shows_a_split_best_row(tmp_path: Path) -> None:
    # the README's plan serve example on p5: a 5 prefill + 1 decode split is the cheapest row that meets p99; the
    # report named neither the mode nor the pools, and marked the split's rate on the colocated curve
    page = tmp_path / "split.html"
    proc = _run("plan", "serve", "--model", "llama3.1-70b", "--qps", "20", "--input-len", "2048", "--output-len",
                "256", "--ttft-p99", "0.5", "--itl-p99", "0.05", "--instance", "p5.48xlarge", "--html", str(page))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rendered = render(page)
    assert rendered.console_errors == []
    assert "(5 prefill + 1 decode)" in rendered.dom and ">colocated<" in rendered.dom
    assert "one colocated replica" in rendered.dom and "off this curve" in rendered.dom


def test_estimate_rl_over_memory_says_what_offload_would_give() -> None:
    """Qwen3-32B GRPO colocated on 4 p5 nodes, 4k responses: the rollout phase needs 81.8 GiB of 76.6 (training
    state 34.3 + reference 7.6 + engine 39.8); parking the trained models in host memory leaves 7.6 + 39.8 = 47.4
    GiB, so the output says so (before: only 'does NOT fit', with no way out named). The JSON carries the same line."""
    args = ("estimate", "rl", "--model", "qwen3-32b", "--instance", "p5.48xlarge", "--nodes", "4", "--prompts", "512",
            "--samples", "8", "--response-len", "4096")  # fmt: skip
    proc = _run(*args)
    assert proc.returncode == 0, proc.stderr
    assert "does NOT fit" in proc.stdout and "with --offload (" in proc.stdout and ", fits; step " in proc.stdout
    data = json.loads(_run(*args, "--json").stdout)
    assert data["fits"] is False and data["hint"].startswith("with --offload (") and "peak 47.5 GiB" in data["hint"]
    off = json.loads(_run(*args, "--offload", "--json").stdout)
    assert off["fits"] is True and "hint" not in off


def test_estimate_serve_one_output_token_prints_no_itl() -> None:
    """One output token has no inter-token gap: the table printed an ITL of 0.0000 s in every column (read as
    'infinitely fast decode'); it prints '-' now, the JSON keeps itl_s 0.0."""
    args = ("estimate", "serve", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--tp", "1", "--input-len",
            "512", "--output-len", "1", "--concurrency", "4")  # fmt: skip
    proc = _run(*args)
    assert proc.returncode == 0, proc.stderr
    itl = next(line for line in proc.stdout.splitlines() if " itl " in line)
    assert "0.0000" not in itl and "no gap" in itl
    assert json.loads(_run(*args, "--json").stdout)["itl_s"] == 0.0


PLAN_8B = ["plan", "serve", "--model", "llama3.1-8b", "--qps", "5", "--input-len", "512", "--output-len", "128",
           "--ttft-p99", "0.5", "--itl-p99", "0.05", "--instance", "p5.48xlarge"]  # fmt: skip


@pytest.mark.skipif(shutil.which("script") is None, reason="util-linux script (a pseudo-terminal) not installed")
def test_plan_serve_says_what_it_simulates_on_a_terminal_only() -> None:
    # a search simulates dozens of deployments (seconds): on a terminal a status line names each on stderr; a
    # pipe (and --json) gets the result alone
    cmd = shlex.join([sys.executable, "-m", "fmstack", *PLAN_8B])
    tty = subprocess.run(["script", "-qec", cmd, "/dev/null"], capture_output=True, text=True, timeout=300)
    assert tty.returncode == 0, tty.stdout
    # the pty merges stderr into stdout; the spinner redraws about 12 times a second, so which candidate it caught
    # depends on the machine's speed (a fast one finishes candidate 1 before the first redraw)
    assert re.search(r"plan serve: simulating candidate \d+: p5\.48xlarge", tty.stdout), tty.stdout
    piped = _run(*PLAN_8B)
    assert piped.returncode == 0 and "simulating candidate" not in piped.stdout + piped.stderr


def test_html_names_each_pool_of_a_heterogeneous_split() -> None:
    from types import SimpleNamespace

    from fmstack.reports.serve_report import _mode

    base = {"prefill_replicas": 3, "decode_replicas": 1, "tp": 4, "decode_tp": 2}
    assert (
        _mode(SimpleNamespace(mode="disaggregated", heterogeneous=True, **base)) == "3 prefill (tp4) + 1 decode (tp2)"
    )
    assert _mode(SimpleNamespace(mode="disaggregated", heterogeneous=False, **base)) == "3 prefill + 1 decode"
    assert _mode(SimpleNamespace(mode="colocated", heterogeneous=False, **base)) == "colocated"
