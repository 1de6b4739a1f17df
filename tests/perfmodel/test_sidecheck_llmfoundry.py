"""Side check: PyTorch FSDP BF16 runs of MosaicML llm-foundry (validation_llmfoundry.py, docs/perfmodel.md).

Data: mosaicml/llm-foundry scripts/train/benchmarking/README.md @ 061f2c7ce64e655100286584a7629e2a09f827ba, tables
"H100 80GB BF16", "A100 80GB with 1600 Gbps node-node interconnect (RoCE)" and "A100 40GB with 1600 Gbps node-node
interconnect (RoCE)" (src/fmstack/perfmodel/data/llmfoundry/benchmarks.csv, every row). These rows are not
calibration data: no constant is set from them, and the tests assert invariants and the documented direction of
the errors, not a tolerance chosen after seeing them.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections import defaultdict

import pytest

from fmstack.catalog import load_catalog
from fmstack.catalog.loader import Catalog
from fmstack.catalog.params import count_params
from fmstack.catalog.topology import build_cluster
from fmstack.perfmodel.training import estimate_training
from fmstack.perfmodel.validation_llmfoundry import (
    SYSTEMS,
    TABLES,
    SideCheck,
    check_llmfoundry,
    mpt_model,
    row_config,
    rows,
    sidecheck_catalog,
    summarize,
)


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


@pytest.fixture(scope="module")
def checks(catalog: Catalog) -> list[SideCheck]:
    return check_llmfoundry(catalog)


def test_every_published_row_is_compared(checks: list[SideCheck]) -> None:
    counts = {t: sum(1 for c in checks if c.table == t) for t in TABLES}
    assert counts == {"a100-80gb-roce": 61, "a100-40gb-roce": 78, "h100-80gb-bf16": 52}
    assert all(c.error_pct is not None and not c.not_expressible for c in checks)
    assert all(c.fits for c in checks), [c for c in checks if not c.fits]


def test_parameter_counts_equal_the_published_numparams(checks: list[SideCheck]) -> None:
    """Learned positions sized to the row's SeqLen, biases, tied embeddings: the README's NumParams exactly."""
    for c in checks:
        assert c.model_params == c.published_params, (c.model, c.seq_len)


def test_mpt_7b_by_hand(catalog: Catalog) -> None:
    """MPT-7B at 2048: 32 x (4 h^2 + 4h [qkv, out biases] + 8 h^2 + 5h [fc biases] + 4h [2 LayerNorms])
    + 50368 h [tied wte] + 2048 h [wpe] + 2h [final norm], h = 4096."""
    h = 4096
    expected = 32 * (12 * h * h + 13 * h) + 50368 * h + 2048 * h + 2 * h
    assert expected == 6_658_859_008
    assert count_params(mpt_model(sidecheck_catalog(catalog), "7b", 2048)).total == expected


def test_row_mapping() -> None:
    """AC True -> full recompute; DEFAULT reduces in fp32, PURE in bf16; tp 1, dp = # GPUs, fsdp."""
    by_key = {(r["table"], r["model"], r["seq_len"], r["num_gpus"]): r for r in rows()}
    cfg = row_config(by_key[("a100-80gb-roce", "7b", "2048", "8")])
    assert (cfg.tp, cfg.pp, cfg.dp, cfg.sharding, cfg.recompute) == (1, 1, 8, "fsdp", "none")
    assert (cfg.micro_batch, cfg.global_batch, cfg.reduce_bytes, cfg.num_micro_batches) == (6, 96, 4, 2)
    cfg = row_config(by_key[("a100-40gb-roce", "7b", "2048", "128")])
    assert (cfg.dp, cfg.recompute, cfg.reduce_bytes, cfg.micro_batch, cfg.global_batch) == (128, "full", 2, 18, 2304)


def test_full_recompute_is_slower_at_every_shape(catalog: Catalog) -> None:
    cat = sidecheck_catalog(catalog)
    for row in rows():
        model = mpt_model(cat, row["model"], int(row["seq_len"]))
        instance = SYSTEMS[row["table"]][0]
        cluster = build_cluster(cat, instance, max(1, int(row["num_gpus"]) // 8))
        cfg = row_config(row)
        none = estimate_training(model, cluster, cfg.with_(recompute="none")).tokens_per_s_per_gpu
        full = estimate_training(model, cluster, cfg.with_(recompute="full")).tokens_per_s_per_gpu
        assert full < none, (row["table"], row["model"], row["seq_len"])


def _seq_pairs(checks: list[SideCheck]) -> list[tuple[SideCheck, SideCheck]]:
    """Neighbouring sequence lengths of one model in one table on 8 GPUs."""
    groups: dict[tuple[str, str], list[SideCheck]] = defaultdict(list)
    for c in checks:
        if c.num_gpus == 8:
            groups[(c.table, c.model)].append(c)
    pairs = []
    for group in groups.values():
        group.sort(key=lambda c: c.seq_len)
        pairs += [(a, b) for a, b in itertools.pairwise(group) if b.seq_len > a.seq_len]
    return pairs


def test_throughput_falls_with_sequence_length_at_equal_checkpointing(checks: list[SideCheck]) -> None:
    pairs = [(a, b) for a, b in _seq_pairs(checks) if a.activation_checkpointing == b.activation_checkpointing]
    assert len(pairs) > 80
    for a, b in pairs:
        assert b.predicted_tokens_per_s_per_gpu is not None and a.predicted_tokens_per_s_per_gpu is not None
        assert b.predicted_tokens_per_s_per_gpu < a.predicted_tokens_per_s_per_gpu, (a.table, a.model, a.seq_len)


def test_model_orders_sequence_lengths_as_measured(checks: list[SideCheck]) -> None:
    """Every neighbouring pair moves the measured way (7B 1024 with AC -> 2048 without included), except: MPT-760M
    at 512 and 1024 on A100 80GB, whose measured MFU (45 %, 48 %) is below its own 2048 row's (57 %); and MPT-13B
    1024 with AC (micro-batch 40) -> 2048 without AC (micro-batch 2) on A100 80GB and H100, where the run gained
    nothing from dropping the recompute (MFU 59.5 -> 59.6 % and 44.3 -> 39.8 %) and the model gains its 1/4."""
    disagree = []
    for a, b in _seq_pairs(checks):
        assert a.predicted_tokens_per_s_per_gpu is not None and b.predicted_tokens_per_s_per_gpu is not None
        measured_up = b.measured_tokens_per_s_per_gpu > a.measured_tokens_per_s_per_gpu
        if measured_up != (b.predicted_tokens_per_s_per_gpu > a.predicted_tokens_per_s_per_gpu):
            disagree.append((a.table, a.model, a.seq_len, b.seq_len))
    assert sorted(disagree) == [
        ("a100-80gb-roce", "mpt-13b", 1024, 2048),
        ("a100-80gb-roce", "mpt-760m", 512, 1024),
        ("a100-80gb-roce", "mpt-760m", 1024, 2048),
        ("h100-80gb-bf16", "mpt-13b", 1024, 2048),
    ]


def test_model_is_faster_than_these_runs_most_on_h100(checks: list[SideCheck]) -> None:
    """docs/perfmodel.md, "Side check": on every table the median row is predicted faster than measured (the
    efficiency defaults describe fused Megatron-Core / Transformer Engine stacks, these are 2023 eager PyTorch
    runs), and the H100 table's median error is the largest (no Transformer Engine on that stack)."""
    got = {t: summarize(checks, t) for t in TABLES}
    assert all(s.compared > 0 and s.median_error_pct > 0 for s in got.values())
    h100 = got["h100-80gb-bf16"].median_error_pct
    assert h100 > got["a100-80gb-roce"].median_error_pct and h100 > got["a100-40gb-roce"].median_error_pct


@pytest.mark.xfail(
    strict=True,
    reason="missed: A100 median |error| 40.5 % (80GB) and 35.6 % (40GB) against the 15 % bound set before the "
    "run; the misses grow as models shrink (125M-760M +62 % / +54 %) and sequences grow (>= 16k: +67 % / +63 %); "
    "7B-70B rows are +13.5 % / +13.2 % (docs/perfmodel.md, Side check)",
)
def test_a100_median_error_within_15_pct(checks: list[SideCheck]) -> None:
    for table in ("a100-80gb-roce", "a100-40gb-roce"):
        assert summarize(checks, table).median_abs_error_pct <= 15.0


def test_validate_cli_side_check_section(checks: list[SideCheck]) -> None:
    proc = subprocess.run([sys.executable, "-m", "fmstack", "validate", "--only", "sidecheck", "--json"],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert set(data) == {"side_check_llmfoundry"}
    side = data["side_check_llmfoundry"]
    assert "061f2c7ce64e655100286584a7629e2a09f827ba" in side["source"]
    assert len(side["cases"]) == len(checks) == 191
    for key in TABLES:
        assert side["tables"][key]["median_abs_error_pct"] == summarize(checks, key).median_abs_error_pct
