"""Data-parallel wire bytes follow the gradient dtype (session 17, helper H; docs/perfmodel.md, Data parallelism)."""

from __future__ import annotations

import pytest

from fmstack.catalog import load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.perfmodel.collectives import GroupPlacement, collective_time_s, ring_all_reduce_time_s
from fmstack.perfmodel.columns import columns_of
from fmstack.perfmodel.config import TrainConfig, reduce_bytes_of, wire_bytes, wire_fields
from fmstack.perfmodel.memory import local_params
from fmstack.perfmodel.modelconsts import model_consts
from fmstack.perfmodel.training import estimate_training
from fmstack.perfmodel.validation import MODEL_NAMES, _rows, case_config

CAT = load_catalog(None)


def test_ring_all_reduce_of_fp32_gradients_costs_twice_bf16_hand_worked() -> None:
    # 1e9 gradient elements, 16 ranks, ring at B = 50 GB/s, alpha = 20 us:
    # latency 2(n-1) alpha = 30 * 20 us = 600 us in both; bandwidth 2(n-1)/n * S / B = 1.875 * S / 50e9:
    # fp32 (S = 4e9 B) 150 ms -> 150.6 ms; bf16 (S = 2e9 B) 75 ms -> 75.6 ms. The latency does not scale.
    assert ring_all_reduce_time_s(1e9 * 4, 16, 50.0, 20e-6) == pytest.approx(0.1506, rel=1e-12)
    assert ring_all_reduce_time_s(1e9 * 2, 16, 50.0, 20e-6) == pytest.approx(0.0756, rel=1e-12)


def test_step_prices_the_all_reduce_at_the_gradients_wire_bytes() -> None:
    """Plain DDP (sharding none, no overlap) on one p5 node, dp 8: the DP link time is one all-reduce of the local
    gradient elements times 4 B (fp32 gradients, Megatron-Core's default under bf16) or 2 B (--grad-dtype bf16)."""
    model, cluster = CAT.model("llama3.1-8b"), build_cluster(CAT, "p5.48xlarge", 1)
    fp32 = TrainConfig(dp=8, global_batch=8, seq_len=4096, sharding="none", overlap_dp=False)
    bf16 = fp32.with_(**wire_fields("bf16", None))
    params, _ = local_params(model_consts(model), columns_of(fp32))
    group = GroupPlacement(num_ranks=8, ranks_per_domain=8)
    for cfg, wire in ((fp32, 4), (bf16, 2)):
        assert reduce_bytes_of(cfg) == wire
        expected = float(collective_time_s("all_reduce", params * wire, group, cluster))
        assert estimate_training(model, cluster, cfg).comm["dp"].link_s == pytest.approx(expected, rel=1e-12)


def test_wire_bytes_rule() -> None:
    """Megatron-LM arguments.py (core_v0.15.0): bf16 sets accumulate_allreduce_grads_in_fp32 (fp32 buffer, fp32
    reduction); fp16 leaves it off (fp16 buffer); grad_reduce_in_fp32=False keeps a bf16 buffer."""
    assert wire_bytes("bf16", 4) == 4
    assert wire_bytes("fp8", 4) == 4
    assert wire_bytes("bf16", 2) == 2
    assert wire_bytes("fp16", 4) == 2
    assert reduce_bytes_of(TrainConfig()) == 4
    assert reduce_bytes_of(TrainConfig(precision="fp16")) == 2
    assert reduce_bytes_of(TrainConfig(reduce_bytes=2)) == 2  # a software's own reduce dtype wins


def _row(case_id: str) -> tuple[TrainConfig, list[str]]:
    row = next(r for r in _rows() if r["id"] == case_id)
    assumptions: list[str] = []
    return case_config(row, CAT.model(MODEL_NAMES[row["model"]]), assumptions), assumptions


@pytest.mark.parametrize(
    ("case_id", "wire", "source"),
    [
        # Narayanan et al. 2021, SC21 scripts (Megatron-LM de7dc40f, examples/sc21/CONFIG.sh --fp16, no
        # --accumulate-allreduce-grads-in-fp32): fp16 gradient buffer, fp16 all-reduce
        ("T008", 2, "Megatron-LM fp16"),
        # Korthikanti et al. 2022 (fp16 mixed, Megatron-LM): fp16, DP = 1
        ("T023", 2, "Megatron-LM fp16"),
        # NeMo 24.07 (Apex DistributedFusedAdam grad_sync_dtype = dtype = fp32, launcher tag 24.07)
        ("T060", 4, "grad_sync_dtype = dtype"),
        # Megatron-Bridge 0.2.0 recipes: cfg.ddp.grad_reduce_in_fp32 = False
        ("T067", 2, "grad_reduce_in_fp32 = False"),
        ("T069", 2, "grad_reduce_in_fp32 = False"),
        # torchtitan (commit 3f20451b): FSDP2 reduce_dtype = training.mixed_precision_reduce = float32
        ("T039", 4, "reduce_dtype=float32"),
    ],
)
def test_validation_rows_carry_their_softwares_wire(case_id: str, wire: int, source: str) -> None:
    cfg, assumptions = _row(case_id)
    assert cfg.reduce_bytes == wire  # set explicitly for every row, not left to the default
    assert any(source in a for a in assumptions), assumptions
