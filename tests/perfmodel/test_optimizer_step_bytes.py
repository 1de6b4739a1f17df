"""The optimizer step's HBM traffic per parameter from the storage layout, worked by hand for each layout
(docs/perfmodel.md, "Optimizer step traffic"), and the step time it gives."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fmstack.catalog import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.perfmodel.columns import columns_from_configs, columns_of
from fmstack.perfmodel.config import TrainConfig
from fmstack.perfmodel.efficiency import default_efficiency
from fmstack.perfmodel.optimizer_step import optimizer_step_bytes_per_param
from fmstack.perfmodel.training import estimate_training

LLAMA31_8B = 8_030_261_248
"""Llama 3.1 8B's parameters (tests/perfmodel/test_optimizer_layouts.py works them out)."""

# (layout, (grads, moments, master, weights)) in bytes per parameter, bf16 compute unless set. Grads: the norm pass
# and Adam's read (+ the fp32 copy of a bf16 gradient and the fp16 unscale on the fp32 master path); moments: m, v
# read and written; master: fp32 read + write + read again for the weight copy, or the int16 remainder read + write;
# weights: the copy's write (fp32 master) or the in-place bf16 read + write.
STEP_BYTES = [
    ({}, (4 + 4, 2 * 8, 4 + 4 + 4, 2)),  # Megatron-Core distributed optimizer: 38 B
    ({"precision": "fp16"}, (4 + 4 + 4 + 4, 2 * 8, 12, 2)),  # + unscale read + write: 46 B
    ({"optimizer_state_dtype": "bf16"}, (8, 2 * 4, 12, 2)),  # 30 B
    ({"grad_bytes": 2}, (2 + 4 + 4 + 4, 16, 12, 2)),  # bf16 grad .float(): read 2, write 4; 44 B
    ({"precision": "fp8"}, (8, 16, 12, 2)),  # the FP8 copy is refreshed in the forward, not here: 38 B
    ({"precision": "fp8", "fp8_param_gather": True}, (8, 16, 12, 1)),  # quantize_param_shard writes 1 B: 37 B
    ({"precision": "fp8", "fp8_param_gather": True, "grad_bytes": 2}, (2 + 4 + 8, 16, 12, 1)),  # 25.11 FP8 rows: 43
    ({"master_weights": "remainder"}, (4 + 4, 16, 2 + 2, 2 + 2)),  # NeMo 24.07 Apex, fp32 grads: 32 B
    ({"master_weights": "remainder", "grad_bytes": 2}, (2 + 2, 16, 4, 4)),  # 25.11 BF16 precision-aware: 28 B
    ({"master_weights": "remainder", "grad_bytes": 2, "optimizer_state_dtype": "bf16"}, (4, 8, 4, 4)),  # DSv3: 20
    ({"master_weights": "none", "optimizer_state_dtype": "bf16", "grad_bytes": 2}, (4, 8, 0, 4)),  # Nemotron: 16
    ({"master_weights": "none"}, (8, 16, 0, 4)),  # 28 B
    # FSDP mixed precision: norm 4 + Adam's read 4 of the fp32 grad; fp32 param read + write in place, no copy-out
    ({"master_weights": "fp32-params", "sharding": "fsdp"}, (4 + 4, 16, 0, 4 + 4)),  # 32 B
    ({"master_weights": "fp32-params", "sharding": "fsdp", "precision": "fp16"}, (4 + 4 + 4 + 4, 16, 0, 8)),  # 40 B
]  # fmt: skip


@pytest.mark.parametrize(("layout", "parts"), STEP_BYTES)
def test_step_bytes_per_parameter_by_hand(layout: dict[str, object], parts: tuple[float, float, float, float]) -> None:
    b = optimizer_step_bytes_per_param(columns_of(replace(TrainConfig(), **layout)))  # type: ignore[arg-type]
    assert (b.grads, b.moments, b.master, b.weights) == parts
    assert b.total == sum(parts)


def test_default_layout_is_38_bytes_not_the_old_34() -> None:
    """The old constant (34 B) fused the bf16 weight write into Adam; Megatron-Core copies the master in a second pass
    (``_copy_main_params_to_model_params``), reading its 4 B again."""
    assert optimizer_step_bytes_per_param(columns_of(TrainConfig())).total == 34.0 + 4.0


def test_array_columns_match_one_row_at_a_time() -> None:
    configs = [replace(TrainConfig(), **layout) for layout, _ in STEP_BYTES]  # type: ignore[arg-type]
    totals = optimizer_step_bytes_per_param(columns_from_configs(configs)).total
    assert np.array_equal(totals, np.array([sum(parts) for _, parts in STEP_BYTES]))


@pytest.mark.parametrize(("layout", "bytes_per_param"), [({}, 38.0), ({"master_weights": "remainder"}, 32.0),
                                                         ({"optimizer_state_dtype": "bf16",
                                                           "master_weights": "none", "grad_bytes": 2}, 16.0)])  # fmt: skip
def test_optimizer_time_is_local_params_times_bytes_over_hbm(
    catalog: Catalog, layout: dict[str, object], bytes_per_param: float
) -> None:
    """Llama 3.1 8B, ZeRO-1 over 8 H100: each GPU steps 1/8 of the parameters at the memory-bound HBM fraction."""
    cluster = build_cluster(catalog, "p5.48xlarge", 1)
    cfg = replace(TrainConfig(dp=8, global_batch=8, seq_len=8192), **layout)  # type: ignore[arg-type]
    est = estimate_training(catalog.model("llama3.1-8b"), cluster, cfg)
    hbm_bps = cluster.gpu.hbm_bw_gbps * 1e9 * default_efficiency(cluster.gpu).memory
    assert est.optimizer_s == pytest.approx(LLAMA31_8B / 8 * bytes_per_param / hbm_bps, rel=1e-12)
