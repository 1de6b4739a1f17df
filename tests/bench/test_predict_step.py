"""The closing loop's framework-overhead term (bench.predict_step): the twin, the subtraction, the sum."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from fmstack.bench.predict_step import TWIN_MICRO_BATCH, framework_overhead, overhead_twin, predict_step
from fmstack.errors import InputError
from fmstack.perfmodel.calibration import CalibrationProfile, Curve, DeviceInfo
from fmstack.workloads.gpt import GPTConfig, flops_per_step

CFG = GPTConfig(vocab_size=2048, seq_len=64, d_model=256, n_layers=2, n_heads=4)


def _flat_profile() -> CalibrationProfile:
    """10 GFLOP/s for every GEMM and 10 GB/s for every memory op: times are FLOPs / 1e10 and bytes / 1e10."""
    return CalibrationProfile(
        device=DeviceInfo(name="cpu x", kind="cpu", concurrent_processes=1),
        measured_at=datetime(2026, 11, 23, tzinfo=UTC),
        gemm_tflops={"fp32": Curve(x=[1.0, 1e12], y=[0.01, 0.01])},
        memory_bw_gbps=Curve(x=[1.0, 1e12], y=[10.0, 10.0]),
    )


def test_twin_keeps_the_op_sequence_and_drops_the_sizes() -> None:
    twin = overhead_twin(CFG)
    assert (twin.n_layers, twin.n_heads, twin.ffn_mult) == (2, 4, 4)
    assert (twin.vocab_size, twin.seq_len, twin.d_model) == (8, 4, 8)  # 2 floats per head
    # the reference step does 6.64 GFLOP; the twin over 10^5 times fewer
    assert flops_per_step(CFG, global_batch_size=8) / flops_per_step(twin, global_batch_size=TWIN_MICRO_BATCH) > 1e5


def test_overhead_is_the_twin_step_less_the_twins_priced_work() -> None:
    profile = _flat_profile()
    twin = predict_step(overhead_twin(CFG), micro_batch=TWIN_MICRO_BATCH, num_ranks=1, profile=profile)
    # flat curves: the twin's work is its FLOPs / 1e10 plus its bytes / 1e10, a few microseconds
    work_s = twin.gemm_flops / 1e10 + twin.memory_bytes / 1e10
    assert twin.total_s == pytest.approx(work_s)
    assert work_s < 1e-4
    assert framework_overhead(CFG, twin_step_s=4e-3, num_ranks=1, profile=profile) == pytest.approx(4e-3 - work_s)
    assert framework_overhead(CFG, twin_step_s=work_s / 2, num_ranks=1, profile=profile) == 0.0  # never negative


def test_overhead_is_added_to_the_step() -> None:
    profile = _flat_profile()
    base = predict_step(CFG, micro_batch=8, num_ranks=1, profile=profile)
    with_oh = predict_step(CFG, micro_batch=8, num_ranks=1, profile=profile, overhead_s=4e-3)
    assert base.overhead_s == 0.0 and base.total_s == base.work_s
    assert with_oh.total_s == pytest.approx(base.total_s + 4e-3) and with_oh.work_s == base.work_s
    with pytest.raises(InputError) as e:
        predict_step(CFG, micro_batch=8, num_ranks=1, profile=profile, overhead_s=-1e-3)
    assert e.value.field == "overhead_s"
