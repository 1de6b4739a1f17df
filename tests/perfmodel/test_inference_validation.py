"""Issue 6 acceptance: the serving model against inference-calibration.csv with the same defaults for every row."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from fmstack.catalog import Catalog
from fmstack.perfmodel.inference_validation import (
    ACCEPT_MEDIAN_PCT,
    ACCEPT_WORST_PCT,
    engine_setup,
    summary,
    validate_inference,
)

VENDORED = Path(__file__).resolve().parents[2] / "src" / "fmstack" / "perfmodel" / "data" / "inference-calibration.csv"
PREDICTED = 22
NOT_EXPRESSIBLE = 17
"""Pinned so that a row cannot silently move from predicted to not expressible (or back)."""


@pytest.mark.xfail(
    strict=True,
    reason="acceptance not met over all 22 predicted rows: median 10.2 % passes, worst 70.8 % fails "
    "(INF-017 Qwen3-235B attention-DP/EP8 +70.8 %, INF-041 DeepSeek-R1 MTP k=3 on H200 +61.6 %, INF-040 "
    "DeepSeek-R1 attention-DP/EP8 on B200 +53.9 %, INF-023 v0.5 batch-1 128-token TTFT -48 %); see docs/inference.md",
)
def test_median_and_worst_error_over_every_predicted_row(catalog: Catalog) -> None:
    median, worst, n = summary(validate_inference(catalog))
    assert n == PREDICTED
    assert median <= ACCEPT_MEDIAN_PCT == 15.0
    assert worst <= ACCEPT_WORST_PCT == 35.0


def test_counts_of_predicted_and_not_expressible_rows(catalog: Catalog) -> None:
    checks = validate_inference(catalog)
    predicted = [c for c in checks if c.predicted is not None]
    assert len(predicted) == PREDICTED
    assert sum(1 for c in checks if c.predicted is None) == NOT_EXPRESSIBLE
    assert all(c.in_scope and c.error_pct is not None for c in predicted)
    # Llama 2 7B is in the zoo: both TensorRT-LLM 2023 rows are predicted; the two MTP rows since session 18
    assert {"INF-022", "INF-025", "INF-038", "INF-041"} <= {c.id for c in predicted}


def test_median_today_is_within_the_bound(catalog: Catalog) -> None:
    """The half of the acceptance that holds: median |error| over all 22 predicted rows."""
    median, _, _ = summary(validate_inference(catalog))
    assert median <= ACCEPT_MEDIAN_PCT


def test_no_row_is_dropped_and_every_exclusion_says_why(catalog: Catalog) -> None:
    checks = validate_inference(catalog)
    with VENDORED.open(newline="") as fh:
        ids = [row["id"] for row in csv.DictReader(fh)]
    assert [c.id for c in checks] == ids
    for c in checks:
        if c.predicted is None:
            assert not c.in_scope and c.reason, c.id


def test_each_exclusion_gives_its_first_real_reason(catalog: Catalog) -> None:
    # the reason is the most basic one that holds: a ratio is not a configuration's number whatever else; an
    # absolute number is excluded for what stops it (a model outside the zoo, no lengths), not its name
    why = {c.id: c.reason for c in validate_inference(catalog) if not c.in_scope}
    assert why["INF-050"].startswith("a relative or claimed number (x)")
    assert "INF-038" not in why and "INF-041" not in why  # MTP speculative decoding is modelled (session 18)
    assert why["INF-048"] == "model 'DeepSeek-R1/V3 family (MoE)' is not in the model zoo"
    assert why["INF-039"] == "input / output length not stated"


def test_engine_setup_is_by_engine_version_not_by_row() -> None:
    for engine in ("TensorRT-LLM v0.6.1", "TensorRT-LLM v0.5"):
        fields, notes = engine_setup(engine)
        assert fields == {"gqa_kv_sharing": False} and "CHANGELOG" in notes[0]
    for engine in ("TensorRT-LLM", "TensorRT-LLM (PyTorch workflow)", "vLLM", "TensorRT-LLM v0.50"):
        assert engine_setup(engine) == ({}, [])


def test_rows_use_their_stated_setup(catalog: Catalog) -> None:
    by_id = {c.id: c for c in validate_inference(catalog)}
    assert "KV read per query head" in by_id["INF-021"].config  # Llama 2 70B, GQA, TensorRT-LLM v0.6.1
    assert "KV read per query head" not in by_id["INF-022"].config  # Llama 2 7B is MHA: nothing to share
    assert "attention-dp" in by_id["INF-040"].config and "ep 8" in by_id["INF-040"].config
    assert "attention-dp" not in by_id["INF-013"].config


def test_vendored_copy_matches_shared_data(shared_dir: Path) -> None:
    assert VENDORED.read_text() == (shared_dir / "data" / "inference-calibration.csv").read_text()
