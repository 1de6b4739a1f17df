"""`estimate serve --disagg / --prefill-replicas ... --speculative` and `plan serve --speculative` over splits (session
19, helper D): the JSON says which pool speculates, the split's KV carries the draft's layer, the same seed gives
the same output, and a plan ranks speculative splits (``auto``: with and without)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from typing import Any

import pytest

from fmstack.perfmodel.inference_speculative import expected_tokens

SPLIT = ["estimate", "serve", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--precision", "fp8",
         "--input-len", "1024", "--output-len", "256", "--qps", "4", "--prefill-replicas", "1",
         "--decode-replicas", "1", "--seed", "3"]  # fmt: skip
EAGLE = ["--speculative", "eagle", "--spec-acceptance", "0.7"]


def _run(*args: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "fmstack", *args, "--json"], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def test_split_simulation_speculates_in_the_decode_pool() -> None:
    """EAGLE at 0.7 (K = 3): the split's JSON names the method and the pools' roles, the mean tokens per iteration
    is Leviathan's expectation, the KV per request is 33 layers' instead of 32 (the draft's layer), the simulated
    ITL is lower than without; the same seed, the same JSON."""
    off = _run(*SPLIT)["disaggregated_simulation"]
    data = _run(*SPLIT, *EAGLE)
    on = data["disaggregated_simulation"]
    assert off["speculative"] is None and off["speculative_pools"] is None
    assert on["speculative"] == "eagle"
    assert on["speculative_pools"].startswith("the decode pool speculates (eagle, 3 draft tokens")
    assert "runs the draft once over each prompt" in on["speculative_pools"]
    assert on["spec_tokens_per_iteration"] == pytest.approx(expected_tokens([0.7] * 3), rel=1e-12)
    assert on["kv_bytes_per_request"] == pytest.approx(off["kv_bytes_per_request"] * 33 / 32, rel=1e-12)
    assert on["itl_mean_s_sim"] < 0.6 * off["itl_mean_s_sim"]
    assert on["prefill_s"] > off["prefill_s"]  # the draft's pass over the prompt
    assert _run(*SPLIT, *EAGLE) == data


def test_disagg_comparison_says_which_pool_speculates() -> None:
    """--disagg with n-gram at acceptance 1 (K = 3): the decode-only ITL is a quarter of the speculative iteration,
    below the plain one; the prefill pool runs no draft."""
    base = ["estimate", "serve", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "1", "--precision",
            "fp8", "--input-len", "1024", "--output-len", "256", "--disagg", "--no-simulate"]  # fmt: skip
    off = _run(*base)["disaggregation"]
    on = _run(*base, "--speculative", "ngram", "--spec-acceptance", "1")["disaggregation"]
    assert off["speculative_pools"] is None
    assert "the prefill pool runs no draft" in on["speculative_pools"]
    assert on["prefill_s"] == off["prefill_s"] and on["kv_bytes_per_request"] == off["kv_bytes_per_request"]
    assert on["decode_itl_s"] < off["decode_itl_s"]


def test_plan_auto_ranks_splits_with_and_without_mtp() -> None:
    """DeepSeek-V3 fp8 on p5en nodes, ``auto``: splits screened with MTP and without, both ranked; a speculative
    split row's `estimate serve` command carries the flags and prints the row's decode-pool figures."""
    data = _run("plan", "serve", "--model", "deepseek-v3", "--qps", "1", "--input-len", "1024", "--output-len",
                "256", "--ttft-p99", "2", "--itl-p99", "0.05", "--instance", "p5en.48xlarge", "--precision", "fp8",
                "--max-nodes-per-replica", "1", "--speculative", "auto", "--top", "40")  # fmt: skip
    splits = [c for c in data["candidates"] if c["mode"] == "disaggregated"]
    assert {c["speculative"] for c in splits} == {None, "mtp"}
    assert "ranked splits run it" in data["speculative_note"]
    row = next(c for c in splits if c["speculative"] == "mtp" and c["decode_tp"] == c["tp"]
               and c["decode_attention_dp"] == c["attention_dp"])  # fmt: skip
    argv = shlex.split(row["estimate_command"])
    assert "--speculative" in argv and "--disagg" in argv
    dz = _run(*argv[1:])["disaggregation"]
    assert dz["speculative_pools"].startswith("the decode pool speculates (mtp, 3 draft tokens")
    assert dz["decode_concurrency"] == row["concurrency"]
    assert dz["decode_itl_s"] == pytest.approx(row["mean_itl_s"], rel=1e-12)
