"""`plan serve --turns N --think-time-s S [--router session]` (session 19, helper E): ``--turns 1`` is the plan of
before, key for key; a session plan's JSON keys, text and HTML; each row's commands reproduce its analytic point and its
simulated p99."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from fmstack.cli.main import cli

PLAN = ["plan", "serve", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--output-len", "128"]
CHAT = [*PLAN, "--qps", "80", "--input-len", "512", "--ttft-p99", "0.5", "--itl-p99", "0.02", "--turns", "3",
        "--think-time-s", "5", "--router", "session"]  # fmt: skip


def _run(argv: list[str]) -> dict[str, Any]:
    res = CliRunner().invoke(cli, [*argv, "--json"])
    assert res.exit_code == 0, res.output
    out: dict[str, Any] = json.loads(res.output)
    return out


def test_one_turn_is_the_plan_of_before() -> None:
    """``--turns 1`` (and ``--think-time-s 0``) leaves every key and every float as without the flags; the new keys
    say one turn (checked once against main before session 19 too: every key equal but these three)."""
    argv = [*PLAN, "--qps", "20", "--input-len", "1024", "--ttft-p99", "0.5", "--itl-p99", "0.03"]
    before = _run(argv)
    assert _run([*argv, "--turns", "1"]) == before
    assert _run([*argv, "--turns", "1", "--think-time-s", "0"]) == before
    assert (before["turns"], before["think_time_s"], before["screened_input_len"]) == (1, 0.0, 1024)
    assert "--turns" not in before["best"]["p99_command"]


def test_session_plan_commands_reproduce_its_rows(tmp_path: Path) -> None:
    data = _run(CHAT)
    assert (data["turns"], data["think_time_s"], data["router"]) == (3, 5.0, "session")
    assert data["screened_input_len"] == 512 + 640  # 512 + (3 - 1) / 2 x (512 + 128)
    assert data["disaggregation"] is None and "not sessions" in data["disaggregation_note"]
    assert "splits searched for sessions of 3 turns" in data["disaggregation_note"]  # since session 19, helper H
    best = data["best"]
    assert best["prefix_hit_rate"] == 640 / 1152  # the mean history 640 of the mean prompt 1,152
    # the analytic point: estimate serve at the mean turn and its hit share
    point = _run(shlex.split(best["estimate_command"])[1:])
    assert "--input-len 1152" in best["estimate_command"]
    assert abs(point["requests_per_s"] - best["rate_per_replica_rps"]) <= 1e-9 * best["rate_per_replica_rps"]
    # the p99 check: a row of several replicas behind the session router, its sessions simulated again
    rows = [c for c in data["candidates"] if c["replicas"] > 1 and c["sim"] is not None]
    assert rows, "the plan simulated no row of several replicas"
    row = rows[0]
    argv = shlex.split(row["p99_command"])
    for flag, value in (("--turns", "3"), ("--think-time-s", "5.0"), ("--router", "session"), ("--input-len", "512")):
        assert argv[argv.index(flag) + 1] == value
    again = _run(argv[1:])
    assert again["ttft_p99_s"] == row["sim"]["ttft_p99_s"] and again["itl_p99_s"] == row["sim"]["itl_p99_s"]
    assert again["sessions"]["turns"] == 3
    # the text and the HTML say what the plan was made for
    res = CliRunner().invoke(cli, [*CHAT, "--html", str(tmp_path / "plan.html")])
    assert res.exit_code == 0, res.output
    assert "planned for sessions of 3 turns (think time 5 s)" in " ".join(res.output.split())
    assert "--turns 3 --think-time-s 5.0" in " ".join(res.output.split())
    assert "planned for sessions of 3 turns (think time 5 s)" in (tmp_path / "plan.html").read_text()


def test_sessions_with_a_system_prefix_screen_its_first_turn_hits_and_simulate_both() -> None:
    """Session 20: ``--turns`` with ``--prefix-groups`` (refused before), colocated rows (splits: in
    test_plan_serve_disagg_sessions.py). A session's first turn finds its group's
    system prefix cached (4 groups of 256 tokens: Che's figure in a pool of thousands of prefixes is 1), its later
    turns their history as before (the simulation keys a later turn by its session alone). By hand, 3 replicas behind
    round-robin, 4 turns of 512 + 256: the history a turn finds, sum_j (1/3)(2/3)^(t-1-j) j x 768, is 0, 256,
    2048/3 and 11008/9 tokens (19456/9 in all); the first turn adds 256, so the mean turn's cached share is
    (19456/9 + 256) / 4 / 1664 = 21760/59904, and the share of turns that hit is (0 + 1/3 + 5/9 + 19/27 + 1) / 4."""
    argv = [*PLAN[:-2], "--precision", "fp8", "--output-len", "256", "--qps", "100", "--input-len", "512",
            "--ttft-p99", "0.5", "--itl-p99", "0.01", "--turns", "4", "--think-time-s", "5", "--no-disagg"]  # fmt: skip
    data = _run([*argv, "--prefix-groups", "4", "--prefix-len", "256"])
    best = data["best"]
    assert (best["mode"], best["replicas"], data["screened_input_len"]) == ("colocated", 3, 1664)
    assert abs(best["prefix_hit_rate"] - 21760 / 59904) <= 1e-12
    assert abs(best["prefix_request_hit_rate"] - (1 / 3 + 5 / 9 + 19 / 27 + 1) / 4) <= 1e-12
    without = _run(argv)["best"]  # the same row without the prefix: the history hits alone
    assert abs(without["prefix_hit_rate"] - 19456 / 9 / 4 / 1664) <= 1e-12
    assert best["rate_per_replica_rps"] >= without["rate_per_replica_rps"]
    point = _run(shlex.split(best["estimate_command"])[1:])
    assert abs(point["requests_per_s"] - best["rate_per_replica_rps"]) <= 1e-9 * best["rate_per_replica_rps"]
    p99 = shlex.split(best["p99_command"])
    for flag, value in (("--prefix-groups", "4"), ("--prefix-len", "256"), ("--turns", "4"), ("--replicas", "3")):
        assert p99[p99.index(flag) + 1] == value
    again = _run(p99[1:])
    assert again["ttft_p99_s"] == best["sim"]["ttft_p99_s"] and again["itl_p99_s"] == best["sim"]["itl_p99_s"]
    # estimate serve's analytic means price the same mean turn (the first turns' hits too since session 20)
    assert abs(again["history_hit_share"] - 21760 / 59904) <= 1e-12
    assert abs(again["history_hit_turns"] - best["prefix_request_hit_rate"]) <= 1e-12
    first = again["sessions"]["by_turn"][0]
    assert first["hit_rate"] == 1.0 and first["token_hit_rate"] == 256 / 512  # every first turn hit, as screened
