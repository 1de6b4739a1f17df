"""The memory model against published peak memory (torchtitan, data/peak-memory.csv)."""

from __future__ import annotations

import pytest

from fmstack.catalog import Catalog
from fmstack.errors import InputError
from fmstack.perfmodel.validation_peak_memory import (
    TOLERANCE_PCT,
    MemoryCheck,
    check_peak_memory,
    load_rows,
    memory_summary,
    row_config,
)

GIB = 2.0**30
LLAMA31_8B_PARAMS = 8_030_261_248
"""2 x 128,256 x 4,096 (untied embedding and output) + 32 x (2 x 4,096^2 + 2 x 4,096 x 1,024 + 3 x 4,096 x 14,336
+ 2 x 4,096) + 4,096 (final norm)."""


@pytest.fixture(scope="module")
def checks(catalog: Catalog) -> list[MemoryCheck]:
    return check_peak_memory(catalog)


def test_every_row_is_read_and_only_op_level_checkpointing_is_left_out(checks: list[MemoryCheck]) -> None:
    assert [c.id for c in checks] == [f"M{n:03d}" for n in range(1, 21)]
    left_out = {c.id for c in checks if c.not_expressible}
    assert left_out == {"M001", "M002", "M003", "M008", "M009", "M010", "M019", "M020"}  # selective-op rows
    assert memory_summary(checks)["compared"] == 12


def test_m004_by_hand(checks: list[MemoryCheck]) -> None:
    """Llama 3.1 8B, FSDP 8, full recompute, 32,768 tokens per GPU, FSDP2's fp32-params layout: every part by hand."""
    c = next(c for c in checks if c.id == "M004")
    n = LLAMA31_8B_PARAMS
    assert c.parts_gib["weights"] * GIB == pytest.approx(4 * n / 8)  # FSDP2's fp32 parameters (the master), sharded
    assert c.parts_gib["grads"] * GIB == pytest.approx(4 * n / 8)  # fp32 reduce dtype, sharded
    assert c.parts_gib["optimizer"] * GIB == pytest.approx(8 * n / 8)  # Adam m + v, sharded; no separate master
    # full recompute keeps each layer's input (2h B per token) + fp32 logits (4 V B per token, Korthikanti sec. 4.3)
    assert c.parts_gib["activations"] * GIB == pytest.approx(32768 * (32 * 2 * 4096 + 4 * 128256))
    layer = 2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
    assert c.parts_gib["temporary"] * GIB == pytest.approx(2 * layer * 2, rel=1e-6)  # two gathered bf16 layers
    assert c.predicted_gib == pytest.approx(sum(c.parts_gib.values()))
    assert c.error_pct == pytest.approx(100 * (c.predicted_gib - 83.9) / 83.9)


def test_context_parallel_keeps_tokens_per_gpu(checks: list[MemoryCheck]) -> None:
    # Table 2: seq x 2 with cp x 2 and FSDP / 2 on 8 GPUs: the same tokens per GPU and the same sharded bytes
    # (dp x cp = 8), so the model predicts the same memory; torchtitan measured 83.9-84.5 GiB (within 0.7 %)
    table2 = [c for c in checks if c.id in ("M004", "M005", "M006", "M007")]
    assert len({round(c.predicted_gib or 0.0, 6) for c in table2}) == 1
    measured = [c.measured_gib for c in table2]
    assert (max(measured) - min(measured)) / min(measured) < 0.01


def test_pipeline_rows_keep_the_stage_weights_whole(catalog: Catalog) -> None:
    row = next(r for r in load_rows() if r["id"] == "M013")
    assumptions: list[str] = []
    cfg = row_config(row, assumptions)
    assert (cfg.sharding, cfg.micro_batch, cfg.global_batch, cfg.sequence_parallel) == ("zero2", 4, 256, True)
    assert any("reshard_after_forward=False" in a for a in assumptions)


@pytest.mark.xfail(
    strict=True,
    reason="the model (Megatron-Core / Transformer Engine storage) predicts 34-55 % less than torchtitan's peak "
    "reserved: torchtitan's loss upcasts the logits to fp32 outside the compiled blocks (bf16 logits + fp32 copy + "
    "fp32 log-softmax, 10 B per logit against the model's 4 B: +23.5 GiB on M004), full recompute rematerialises one "
    "layer in backward, and the caching allocator's reserved bytes exceed the live tensors; docs/perfmodel.md, "
    "'Memory against published peak memory'",
)
def test_published_peak_memory_within_tolerance(checks: list[MemoryCheck]) -> None:
    # tolerance set before the first comparison: every compared row within 25 % of the published peak
    misses = [c.id for c in checks if c.error_pct is not None and abs(c.error_pct) > TOLERANCE_PCT]
    assert not misses, misses


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("tp", "0", "a positive integer, got 0"),
        ("dp", "x", "a positive integer, got 'x'"),
        ("num_gpus", "16", "!= num_gpus(16)"),
        ("sharding", "zero1", "fsdp, got 'zero1'"),
        ("precision", "fp8", "bf16 or float8-torchao, got 'fp8'"),
        ("local_batch", "12", "a multiple of pp(8), got 12"),
    ],
)
def test_a_bad_row_names_its_field(key: str, value: str, says: str) -> None:
    row = {**next(r for r in load_rows() if r["id"] == "M013"), key: value}
    with pytest.raises(InputError, match=f"peak-memory row M013: {key}") as info:
        row_config(row, [])
    assert says in str(info.value)


def test_validate_memcheck_prints_json_and_text() -> None:
    import json

    from click.testing import CliRunner

    from fmstack.cli.validate_cmd import validate

    r = CliRunner().invoke(validate, ["--only", "memcheck", "--json"])
    assert r.exit_code == 0, r.output
    block = json.loads(r.output)["memory_check_peak"]
    assert (len(block["cases"]), block["summary"]["compared"], block["tolerance_pct"]) == (20, 12, TOLERANCE_PCT)
    text = CliRunner().invoke(validate, ["--only", "memcheck"], terminal_width=250).output
    assert "M004" in text and "83.9" in text and "12 rows compared" in text
