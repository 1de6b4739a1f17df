"""`plan serve --turns N` ranks disaggregated splits (session 19, helper H): a split row simulated with the sessions,
its `p99_command` (``--prefill-replicas P --decode-replicas D --turns N --router R``) gives the same p99, and the
prompt tokens its prefill pool computed per turn are the screening's; ``--turns 1`` is the plan of before."""

from __future__ import annotations

import json
import shlex
from typing import Any

from click.testing import CliRunner

from fmstack.cli.main import cli

PLAN = ["plan", "serve", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--precision", "fp8", "--input-len",
        "512", "--output-len", "256", "--ttft-p99", "0.5"]  # fmt: skip
CHAT = [*PLAN, "--qps", "150", "--itl-p99", "0.012", "--turns", "4", "--think-time-s", "5", "--router", "session"]


def _run(argv: list[str]) -> dict[str, Any]:
    res = CliRunner().invoke(cli, [*argv, "--json"])
    assert res.exit_code == 0, res.output
    out: dict[str, Any] = json.loads(res.output)
    return out


def test_split_ranked_with_sessions_and_its_p99_command_reproduces_it() -> None:
    data = _run(CHAT)
    assert "splits searched for sessions of 4 turns" in data["disaggregation_note"]
    splits = [c for c in data["candidates"] if c["mode"] == "disaggregated"]
    assert splits and not any(c["attention_dp"] or c["decode_attention_dp"] for c in splits)
    row = next(c for c in splits if c["meets_slo"])
    # screened at the mean turn, 1,664 tokens, 960 of them the previous prompt cached on the prefill replica
    assert data["screened_input_len"] == 1664 and row["prefix_hit_rate"] == 960 / 1664
    argv = shlex.split(row["p99_command"])
    for flag, value in (("--turns", "4"), ("--think-time-s", "5.0"), ("--router", "session"), ("--input-len", "512"),
                        ("--prefill-replicas", str(row["prefill_replicas"])),
                        ("--decode-replicas", str(row["decode_replicas"])), ("--qps", "150.0")):  # fmt: skip
        assert argv[argv.index(flag) + 1] == value
    assert "--disagg" not in argv and "--prefix-hit-rate" not in argv and "--no-simulate" not in argv
    z = _run(argv[1:])["disaggregated_simulation"]
    assert z["ttft_p99_s"] == row["sim"]["ttft_p99_s"] and z["itl_p99_s"] == row["sim"]["itl_p99_s"]
    # the prefill pool computed what the screening priced: turn 1 its 512, later turns the last answer + the new
    # message, 256 + 512 (every later turn hits behind the session router)
    assert [t["prefill_tokens_mean"] for t in z["sessions"]["by_turn"]] == [512.0, 768.0, 768.0, 768.0]


def test_one_turn_split_plan_is_the_plan_of_before() -> None:
    """A plan where a split wins: ``--turns 1`` gives every key and float of the plan without it (checked once
    against main before this change too: the same JSON)."""
    argv = [*PLAN, "--qps", "300", "--itl-p99", "0.01"]
    before = _run(argv)
    assert before["best"]["mode"] == "disaggregated"
    assert _run([*argv, "--turns", "1"]) == before
    assert "splits searched for sessions" not in before["disaggregation_note"]


def test_split_with_a_system_prefix_screens_and_simulates_its_first_turn_hits() -> None:
    """Session 20: splits are searched with ``--turns`` and ``--prefix-groups`` together. By hand for a split of one
    prefill replica behind round-robin (its one cache holds each session's previous prompt: turns 2-4 find 512,
    1,280 and 2,048 tokens) with 4 groups of 256 tokens (every first turn hits: Che's figure is 1 where the groups
    fit): (3,840 + 256) / 4 of the mean 1,664-token prompt, 4096/6656, and every turn hits. The row's simulation
    (its p99_command carries both flag sets) computes 256 tokens of each first turn (a hit skips the prefix) and 768
    of each later one (the last answer and the new message), as without the prefix."""
    data = _run([*PLAN, "--qps", "100", "--itl-p99", "0.01", "--turns", "4", "--think-time-s", "5",
                 "--prefix-groups", "4", "--prefix-len", "256"])  # fmt: skip
    assert "splits searched for sessions of 4 turns" in data["disaggregation_note"]
    row = next(c for c in data["candidates"] if c["mode"] == "disaggregated" and c["prefill_replicas"] == 1)
    assert row["prefix_hit_rate"] == 4096 / 6656 and row["prefix_request_hit_rate"] == 1.0
    best = data["best"]
    assert best["mode"] == "disaggregated" and best["meets_slo"]
    argv = shlex.split(best["p99_command"])
    for flag, value in (("--prefix-groups", "4"), ("--prefix-len", "256"), ("--turns", "4"),
                        ("--prefill-replicas", str(best["prefill_replicas"]))):  # fmt: skip
        assert argv[argv.index(flag) + 1] == value
    again = _run(argv[1:])
    sim = again["disaggregated_simulation"]
    assert sim["ttft_p99_s"] == best["sim"]["ttft_p99_s"] and sim["itl_p99_s"] == best["sim"]["itl_p99_s"]
    assert best["prefill_replicas"] == 1  # 1P(tp 2):3D(tp 1) on one p5.48xlarge
    by_turn = sim["sessions"]["by_turn"]
    assert [round(t["prefill_tokens_mean"]) for t in by_turn] == [256, 768, 768, 768]
