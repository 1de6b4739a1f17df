"""`estimate serve --turns N --think-time-s T` (session 18): ``--turns 1`` is the run of before, float for float; the
``sessions`` JSON block and the text line of a multi-turn run; ``--router session`` and the closed loop."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from fmstack.cli.main import cli

SERVE = ["estimate", "serve", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--precision", "fp8",
         "--input-len", "512", "--output-len", "256"]  # fmt: skip


def _run(argv: list[str]) -> dict[str, Any]:
    res = CliRunner().invoke(cli, [*argv, "--json"])
    assert res.exit_code == 0, res.output
    out: dict[str, Any] = json.loads(res.output)
    return out


@pytest.mark.parametrize(
    "load",
    [
        ["--qps", "8", "--replicas", "4", "--router", "kv", "--prefix-groups", "8", "--prefix-len", "256"],
        ["--qps", "8", "--replicas", "4", "--router", "round-robin"],
        ["--qps", "8"],
        ["--concurrency", "16"],
    ],
)
def test_one_turn_is_the_run_of_before(load: list[str]) -> None:
    """``--turns 1`` (and ``--think-time-s 0``) leaves every key and every float as it was without the flags."""
    before = _run([*SERVE, *load])
    assert _run([*SERVE, *load, "--turns", "1"]) == before
    assert _run([*SERVE, *load, "--turns", "1", "--think-time-s", "0"]) == before
    assert "sessions" not in before


def test_sessions_block_and_text() -> None:
    """4 replicas behind session affinity, 4-turn sessions of 512 new tokens and 256 out: every later turn hits its
    whole history, (t - 1) x 768 of (t - 1) x 768 + 512 prompt tokens; the text shows the session line."""
    argv = [*SERVE, "--qps", "16", "--replicas", "4", "--router", "session", "--turns", "4", "--think-time-s", "2"]
    data = _run(argv)
    s = data["sessions"]
    assert (data["router"], s["turns"], s["think_time_s"], s["hit_rate_later_turns"]) == ("session", 4, 2.0, 1.0)
    assert [b["mean_prompt_tokens"] for b in s["by_turn"]] == [512.0, 1280.0, 2048.0, 2816.0]
    assert [b["token_hit_rate"] for b in s["by_turn"]] == [0.0, 768 / 1280, 1536 / 2048, 2304 / 2816]
    assert [b["hit_rate"] for b in s["by_turn"]] == [0.0, 1.0, 1.0, 1.0]
    for key in ("ttft_p50_s_first_turn", "ttft_p99_s_first_turn", "ttft_p50_s_later_turns", "ttft_p99_s_later_turns",
                "token_hit_rate_later_turns", "mean_prompt_tokens", "requests_measured"):  # fmt: skip
        assert key in s
    assert data["deployment_rate_per_s"] == 16
    res = CliRunner().invoke(cli, argv)
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "sessions of 4 turns, think time 2 s" in text and "later turns hit 100.0%" in text


def test_closed_loop_sessions() -> None:
    """8 clients running 3-turn sessions back to back on one replica: the block, every later turn a hit."""
    data = _run([*SERVE, "--concurrency", "8", "--turns", "3", "--think-time-s", "1"])
    s = data["sessions"]
    assert (s["turns"], s["hit_rate_later_turns"]) == (3, 1.0)
    assert data["replica_request_share"] == [1.0]
