"""The per-stage side check (rlcheck's ``rl_stage_check``): counts, hand-checked measured values and invariants.
Errors are pinned as they are (the model misses these stages; nothing here is a target)."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

from fmstack.catalog import load_catalog
from fmstack.cli.main import cli
from fmstack.perfmodel.rl_stagecheck import STAGE_COLUMNS, StageCheck, check_stages, stage_rows, stage_summary


@pytest.fixture(scope="module")
def checks() -> list[StageCheck]:
    return check_stages(load_catalog(None))


def test_rows_and_published_stages(checks: list[StageCheck]) -> None:
    assert [c.id for c in checks] == [r["id"] for r in stage_rows()]
    assert len(checks) == 5
    counts = {k: sum(1 for c in checks if k in c.measured_s) for k in STAGE_COLUMNS}
    # the v0.3 blog rows and their reruns publish every stage; PR #3461 generation and refit only
    assert counts == {"generation": 5, "logprobs": 4, "training": 4, "refit": 5}
    summary = stage_summary(checks)
    assert {k: int(v["compared"]) for k, v in summary.items()} == {**counts, "rest": 1, "step": 5}


def test_measured_rest_is_the_step_less_the_published_stages(checks: list[StageCheck]) -> None:
    by_id = {c.id: c for c in checks}
    # v0.3 blog, Llama 3.1 8B on 8 H100: 112 s = 58 generation + 18 logprobs + 28 training + 5 refit + 3 other
    assert by_id["v03-h100-llama8b-8"].measured_s["rest"] == pytest.approx(3.0)
    # Llama 3.1 70B on 64 H100: 147 = 84 + 18 + 28 + 14 + 3
    assert by_id["v03-h100-llama70b-64"].measured_s["rest"] == pytest.approx(3.0)
    # PR #3461: 182.124 - 69.173 generation - 1.895 refit = 111.056 s of logprobs, training and the rest
    assert by_id["pr3461-gb200-q30-16"].measured_s["rest"] == pytest.approx(111.056)
    # prompt from grpo.csv's rows of the same tokenizer; cap = 4096 - prompt (NeMo RL max_new_tokens)
    assert by_id["v03-h100-llama70b-64"].prompt_len == 130 and by_id["v03-h100-llama70b-64"].response_cap == 3966


def test_stages_add_up_and_the_cap_moves_only_generation(checks: list[StageCheck]) -> None:
    for c in checks:
        for pred in (c.predicted_s, c.predicted_cap_s):
            parts = sum(v for k, v in pred.items() if k != "step")
            assert math.isclose(parts, pred["step"], rel_tol=1e-9)  # colocated: in sequence
        assert set(c.predicted_s) == set(c.measured_s) == set(c.predicted_cap_s)
        assert c.predicted_cap_s["generation"] > c.predicted_s["generation"]
        for k in ("logprobs", "training", "refit"):
            if k in c.predicted_s:
                assert c.predicted_cap_s[k] == c.predicted_s[k]


def test_errors_as_they_are(checks: list[StageCheck]) -> None:
    # 2026-11-24: every published stage is predicted faster than measured, on every row
    for c in checks:
        assert all(e < 0 for e in c.error_pct.values()), (c.id, c.error_pct)
    s = stage_summary(checks)
    # generation is the largest miss without the tail (-80 %); with one response per replica to the cap -25 %
    assert s["generation"]["median_error_pct"] == pytest.approx(-80.2, abs=0.5)
    assert s["generation"]["median_error_cap_pct"] == pytest.approx(-24.8, abs=0.5)
    assert s["training"]["median_error_pct"] == pytest.approx(-19.3, abs=0.5)
    assert s["logprobs"]["median_error_pct"] == pytest.approx(-31.9, abs=0.5)
    assert s["refit"]["median_error_pct"] == pytest.approx(-78.5, abs=0.5)


def test_cli_json_has_the_stage_rows() -> None:
    res = CliRunner().invoke(cli, ["validate", "--only", "rlcheck", "--json"])
    assert res.exit_code == 0, res.output
    block = json.loads(res.output)["rl_stage_check"]
    assert len(block["cases"]) == 5 and block["summary"]["generation"]["compared"] == 5
