"""Published runs fit: the memory model against the runs of Megatron-Bridge's 25.11 table, which all ran."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from fmstack.catalog import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.perfmodel.training import TrainingEstimate, estimate_training
from fmstack.perfmodel.validation import MEGATRON_BRIDGE_25_11, MODEL_NAMES, _rows, _system, case_config

TABLE_MBS_CONTRADICTS_GBS = {"T069"}
"""GPT-OSS H100: MBS 4 x GA 2 x dp 16 = 128 sequences, not the printed GBS 512; its recipe says MBS 1."""


def _estimate(catalog: Catalog, row: dict[str, str], **overrides: object) -> TrainingEstimate:
    model = catalog.model(MODEL_NAMES[row["model"]])
    cfg = replace(case_config(row, model, []), **overrides)  # type: ignore[arg-type]
    system = _system(row["gpu"])
    cluster = build_cluster(catalog, system, math.ceil(cfg.num_gpus / catalog.instance(system).num_gpus))
    return estimate_training(model, cluster, cfg)


ROWS_25_11 = [row for row in _rows() if MEGATRON_BRIDGE_25_11 in row["source"] and row["model"] in MODEL_NAMES]


def test_the_table_has_its_rows() -> None:
    assert [r["id"] for r in ROWS_25_11] == [f"T0{n}" for n in (66, 67, 68, 69, 70, 71, 72, 73, 75, 78)]


@pytest.mark.parametrize("row", ROWS_25_11, ids=[r["id"] for r in ROWS_25_11])
def test_every_25_11_run_fits(catalog: Catalog, row: dict[str, str]) -> None:
    est = _estimate(catalog, row)
    if row["id"] in TABLE_MBS_CONTRADICTS_GBS:
        assert not est.fits  # at the printed MBS 4 it would not have run ...
        est = _estimate(catalog, row, micro_batch=1)  # ... at the recipe's MBS 1 it does
    m = est.memory
    assert est.fits, f"{row['id']}: {m.total_gib:.1f} GiB > {m.capacity_gib - m.reserve_gib:.1f} GiB usable"
    # and not by a wide margin: a model that fits everything proves nothing (the tightest runs use most of HBM)
    assert m.total_gib > 0.25 * m.capacity_gib


def test_h100_capacity_is_what_nvml_reports(catalog: Catalog) -> None:
    # 81,559 MiB (nvidia-smi), not 80e9 bytes = 74.5 GiB
    assert catalog.gpu("H100").hbm_gib == pytest.approx(81559 / 1024)
    assert catalog.gpu("H100").hbm_gib - 80e9 / 2**30 == pytest.approx(5.14, abs=0.01)
