"""`estimate serve --prefill-replicas P --decode-replicas D --turns N` (session 19, helper F; the refusal it replaces
was session 18's bad-input row): ``--turns 1`` is the split of before, float for float; the ``sessions`` block of a
split (first vs later turns, the prefill caches' hits, the KV moved per turn by hand) and its text line."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from fmstack.cli.main import cli

SPLIT = ["estimate", "serve", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--precision", "fp8",
         "--input-len", "512", "--output-len", "256", "--qps", "8", "--prefill-replicas", "2", "--decode-replicas",
         "1"]  # fmt: skip
SESSIONS = ["--turns", "4", "--think-time-s", "2"]


def _run(argv: list[str]) -> dict[str, Any]:
    res = CliRunner().invoke(cli, [*argv, "--json"])
    assert res.exit_code == 0, res.output
    out: dict[str, Any] = json.loads(res.output)
    return out


@pytest.mark.parametrize("extra", [[], ["--router", "kv"], ["--length-spread", "0.3", "--seed", "3"]])
def test_one_turn_is_the_split_of_before(extra: list[str]) -> None:
    """``--turns 1`` (and ``--think-time-s 0``) leaves every key and float of the split (and of the colocated rows)
    as without the flags."""
    before = _run([*SPLIT, *extra])
    assert _run([*SPLIT, *extra, "--turns", "1"]) == before
    assert _run([*SPLIT, *extra, "--turns", "1", "--think-time-s", "0"]) == before
    assert "sessions" not in before["disaggregated_simulation"]


def test_split_sessions_block_by_hand() -> None:
    """Llama 3.1 8B's KV, fp8: 32 layers x 8 KV heads x 128 x 2 (K and V) x 1 byte = 65,536 bytes per token; each turn
    moves its whole prompt, ``(t - 1) x 768 + 512`` tokens. Behind the session router every later turn hits its
    prefill replica's copy of the turn before's prompt and computes 768 tokens (the last answer and the new message);
    token hit rates ``(t - 2) x 768 + 512`` over the prompt. The same seed gives the same JSON."""
    argv = [*SPLIT, *SESSIONS, "--router", "session"]
    data = _run(argv)
    z = data["disaggregated_simulation"]
    s = z["sessions"]
    assert (s["turns"], s["think_time_s"], z["prefill_router"], s["hit_rate_later_turns"]) == (4, 2.0, "session", 1.0)
    prompts = [512, 1280, 2048, 2816]
    assert [b["mean_prompt_tokens"] for b in s["by_turn"]] == prompts
    assert [b["kv_bytes"] for b in s["by_turn"]] == [p * 32 * 8 * 128 * 2 for p in prompts]
    assert [b["prefill_tokens_mean"] for b in s["by_turn"]] == [512, 768, 768, 768]
    assert [b["token_hit_rate"] for b in s["by_turn"]] == [0.0, 512 / 1280, 1280 / 2048, 2048 / 2816]
    assert z["kv_bytes_per_request"] == 512 * 65536  # a first turn's, the key of before
    assert "sessions" in data  # the colocated rows: P + D replicas behind the same router, sessions too
    assert _run(argv) == data
    assert _run([*argv, "--seed", "1"]) != data
    res = CliRunner().invoke(cli, argv)
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "later turns hit their history in the prefill caches (session) 100.0%" in text
    assert "nothing is cached on the decode side" in text
