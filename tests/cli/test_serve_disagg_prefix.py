"""`estimate serve --prefill-replicas P --decode-replicas D` with a shared-prefix workload (the refusal it replaces:
helper D's bad-input row): the prefill caches' hit keys, and `plan serve`'s p99 command of a prefix split row
reproduces the row's simulation exactly."""

from __future__ import annotations

import json
import shlex

from click.testing import CliRunner

from fmstack.cli.main import cli
from fmstack.errors import InputError

_SPLIT = ["estimate", "serve", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--tp", "4", "--precision", "fp8",
          "--input-len", "2048", "--output-len", "256", "--qps", "20", "--prefill-replicas", "1", "--decode-replicas",
          "1", "--max-num-tokens", "2048", "--json"]  # fmt: skip


def _run(argv: list[str]) -> dict[str, object]:
    res = CliRunner().invoke(cli, argv)
    assert res.exit_code == 0, res.output
    out: dict[str, object] = json.loads(res.output)
    return out


def test_a_prefix_workload_lets_one_prefill_replica_take_what_full_prompts_cannot() -> None:
    """Full 2,048-token prompts: 1 prefill replica of tp 4 fp8 takes 9.0 req/s, so 20 is refused; with 16 groups of
    1,536-token prefixes every measured request hits (16 prefixes fit a pool of hundreds of thousands of tokens, the
    first sightings in the warm-up): 75 % of prompt tokens are not computed, as the scalar --prefix-hit-rate 0.75."""
    full = CliRunner().invoke(cli, _SPLIT)
    assert isinstance(full.exception, InputError) and "exceeds the prefill pool's capacity" in str(full.exception)
    z = _run([*_SPLIT, "--prefix-groups", "16", "--prefix-len", "1536"])["disaggregated_simulation"]
    assert isinstance(z, dict)
    assert z["prefix_hit_rate_simulated"] == 1.0 and z["prefix_token_hit_rate_simulated"] == 0.75
    assert z["prefill_router"] == "global-queue"
    scalar = _run([*_SPLIT, "--prefix-hit-rate", "0.75"])["disaggregated_simulation"]
    assert isinstance(scalar, dict)
    # the same KV moved per request, whole prompts either way
    assert z["kv_bytes_per_request"] == scalar["kv_bytes_per_request"]
    assert z["kv_transfer_mean_s"] == scalar["kv_transfer_mean_s"]


def test_plan_serve_prefix_split_row_reproduces() -> None:
    """The README prefix case with splits allowed: the best is a split whose p99 command reproduces its p99."""
    plan = _run(["plan", "serve", "--model", "llama3.1-70b", "--qps", "20", "--input-len", "2048", "--output-len",
                 "256", "--ttft-p99", "0.5", "--itl-p99", "0.05", "--prefix-groups", "16", "--prefix-len", "1536",
                 "--json"])  # fmt: skip
    best = plan["best"]
    assert isinstance(best, dict) and best["mode"] == "disaggregated" and best["prefix_hit_rate"] == 0.75
    argv = shlex.split(str(best["p99_command"]))[1:]
    assert "--prefix-groups" in argv and "--disagg" not in argv and "--prefix-hit-rate" not in argv
    z = _run([*argv, "--json"])["disaggregated_simulation"]
    assert isinstance(z, dict)
    assert z["ttft_p99_s"] == best["sim"]["ttft_p99_s"] and z["itl_p99_s"] == best["sim"]["itl_p99_s"]
