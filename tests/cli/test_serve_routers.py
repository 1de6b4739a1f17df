"""`estimate serve` and `plan serve` with the routers that simulate the replicas together and a shared-prefix
workload (session 16): the JSON keys they add, and a plan row's ``p99_command`` reproducing its check exactly."""

from __future__ import annotations

import json
import shlex
from typing import Any

from click.testing import CliRunner

from fmstack.cli.main import cli

SERVE = ["estimate", "serve", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--tp", "2", "--precision",
         "fp8", "--input-len", "2048", "--output-len", "256", "--json"]  # fmt: skip


def _run(argv: list[str]) -> dict[str, Any]:
    res = CliRunner().invoke(cli, argv)
    assert res.exit_code == 0, res.output
    out: dict[str, Any] = json.loads(res.output)
    return out


def test_estimate_serve_cache_aware_keys() -> None:
    """The joint run's keys next to the existing ones: each replica's share (they add up to 1) and busy fraction,
    the simulated hit rates (a request's 1536 of 2048 tokens at most: token hit rate <= 0.75 x request hit rate)."""
    data = _run([*SERVE, "--qps", "8", "--replicas", "4", "--router", "cache-aware", "--prefix-groups", "16",
                 "--prefix-len", "1536"])  # fmt: skip
    for key in ("ttft_p99_s", "itl_p99_s", "replicas", "router", "deployment_rate_per_s", "ttft_mean_s_sim"):
        assert key in data
    assert (data["replicas"], data["router"], data["prefix_groups"], data["prefix_len"]) == (4, "cache-aware", 16, 1536)
    assert abs(sum(data["replica_request_share"]) - 1) < 1e-12 and len(data["replica_utilization"]) == 4
    assert 0 < data["prefix_hit_rate_simulated"] <= 1
    assert data["prefix_token_hit_rate_simulated"] <= 0.75 * data["prefix_hit_rate_simulated"] + 1e-12


def test_plan_p99_command_round_trip() -> None:
    """The best row's ``p99_command`` (``--replicas N --router least-loaded --prefix-groups ...``) is the run the plan
    checked: the same TTFT and ITL p99, exactly."""
    plan = _run(["plan", "serve", "--model", "llama3.1-70b", "--qps", "20", "--input-len", "2048", "--output-len",
                 "256", "--ttft-p99", "0.5", "--itl-p99", "0.05", "--instance", "p5.48xlarge", "--precision", "fp8",
                 "--no-disagg", "--router", "least-loaded", "--prefix-groups", "16", "--prefix-len", "1536",
                 "--prefix-zipf", "0.5", "--json"])  # fmt: skip
    assert plan["router"] == "least-loaded" and plan["prefix"] == {"groups": 16, "prefix_len": 1536, "zipf": 0.5}
    best = plan["best"]
    argv = shlex.split(best["p99_command"])
    assert "--prefix-groups" in argv and "--router" in argv and "--prefix-zipf" in argv
    again = _run([*argv[1:], "--json"])
    assert again["ttft_p99_s"] == best["sim"]["ttft_p99_s"]
    assert again["itl_p99_s"] == best["sim"]["itl_p99_s"]


def test_estimate_serve_kv_router_keys() -> None:
    """``--router kv``: the JSON says so and carries the router's settings (Dynamo's defaults where not given)."""
    data = _run([*SERVE, "--qps", "8", "--replicas", "4", "--router", "kv", "--prefix-groups", "16", "--prefix-len",
                 "1536", "--router-temperature", "0.1"])  # fmt: skip
    assert (data["router"], data["kv_overlap_weight"], data["router_temperature"], data["kv_block_size"]) == (
        "kv", 1.0, 0.1, 16,
    )  # fmt: skip
    assert abs(sum(data["replica_request_share"]) - 1) < 1e-12 and 0 < data["prefix_hit_rate_simulated"] <= 1
    plain = _run([*SERVE, "--qps", "8", "--replicas", "4"])
    assert "kv_overlap_weight" not in plain and plain["router"] == "round-robin"


def test_plan_p99_command_round_trip_kv() -> None:
    """A plan checked behind the KV router: its settings in the JSON and in the best row's ``p99_command``, which
    gives the same TTFT and ITL p99 again."""
    plan = _run(["plan", "serve", "--model", "llama3.1-70b", "--qps", "20", "--input-len", "2048", "--output-len",
                 "256", "--ttft-p99", "0.5", "--itl-p99", "0.05", "--instance", "p5.48xlarge", "--precision", "fp8",
                 "--no-disagg", "--router", "kv", "--kv-overlap-weight", "2", "--kv-block-size", "64",
                 "--prefix-groups", "16", "--prefix-len", "1536", "--json"])  # fmt: skip
    assert (plan["router"], plan["kv_overlap_weight"], plan["router_temperature"], plan["kv_block_size"]) == (
        "kv", 2.0, 0.0, 64,
    )  # fmt: skip
    best = plan["best"]
    argv = shlex.split(best["p99_command"])
    assert best["replicas"] > 1 and argv[argv.index("--router") + 1] == "kv"
    assert argv[argv.index("--kv-overlap-weight") + 1] == "2.0" and argv[argv.index("--kv-block-size") + 1] == "64"
    again = _run([*argv[1:], "--json"])
    assert again["ttft_p99_s"] == best["sim"]["ttft_p99_s"]
    assert again["itl_p99_s"] == best["sim"]["itl_p99_s"]


def test_estimate_serve_power_of_two() -> None:
    """``--router power-of-two`` (session 17) simulates the replicas together: the joint run's keys, shares adding up to
    1, no request routed by a cache-aware imbalance rule; --help names it."""
    data = _run([*SERVE, "--qps", "8", "--replicas", "4", "--router", "power-of-two"])
    assert (data["replicas"], data["router"]) == (4, "power-of-two")
    assert abs(sum(data["replica_request_share"]) - 1) < 1e-12 and data["router_imbalanced_share"] == 0.0
    assert "power-of-two" in CliRunner().invoke(cli, ["estimate", "serve", "--help"]).output
