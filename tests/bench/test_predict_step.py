"""The closing loop's predictor (bench.predict_step): the framework-overhead term (the twin, the subtraction, the sum)
and the transcendental ops and fused attention priced from their own measurements."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from fmstack.bench.predict_step import (
    MEASURED_OPS,
    TWIN_MICRO_BATCH,
    framework_overhead,
    labelled_memory_ops,
    memory_ops,
    overhead_twin,
    predict_step,
)
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


# CFG at micro-batch 8: N = 512 tokens, f = 1024, V = 2048, 2,647,040 parameters; fp32 bytes of each measured op,
# times its count per step (labelled_memory_ops' convention)
GELU_BYTES = 2 * (2 * 512 * 1024 * 4)  # 2 layers x (read + write) of the N x f activation = 8,388,608
MEASURED_BYTES = {
    "gelu": GELU_BYTES,
    "gelu_backward": 2 * (3 * 512 * 1024 * 4),  # reads the gradient and the input, writes the gradient
    "log_softmax": 4 * 512 * 2048 * 4,  # max, sum of exp, read + write
    "log_softmax_backward": 4 * 512 * 2048 * 4,
    "adamw_sqrt": 2 * 2_647_040 * 4,  # reads v, writes its sqrt
}


def test_measured_ops_are_labelled_in_the_memory_ops() -> None:
    ops = labelled_memory_ops(CFG, 8, 2_647_040)
    assert [(b, c) for _, b, c in ops] == memory_ops(CFG, 8, 2_647_040)
    assert {label: b * c for label, b, c in ops if label} == MEASURED_BYTES
    assert set(MEASURED_BYTES) == set(MEASURED_OPS)


def test_a_measured_op_is_priced_at_its_own_rate() -> None:
    profile = _flat_profile()
    base = predict_step(CFG, micro_batch=8, num_ranks=1, profile=profile)
    # GELU measured at 5 GB/s, half the flat 10 GB/s: its 8,388,608 bytes take 1.6777216 ms instead of 0.8388608
    half = predict_step(CFG, micro_batch=8, num_ranks=1, profile=profile, op_gbps={"gelu": 5.0})
    assert half.measured_ops_s == pytest.approx(1.6777216e-3)
    assert half.memory_s == pytest.approx(base.memory_s + 0.8388608e-3)
    assert half.memory_bytes == base.memory_bytes and half.gemm_s == base.gemm_s and base.measured_ops_s == 0.0
    # all five at 2.5 GB/s: 75,702,272 bytes in 30.2809088 ms instead of 7.5702272 ms
    assert sum(MEASURED_BYTES.values()) == 75_702_272
    slow = predict_step(CFG, micro_batch=8, num_ranks=1, profile=profile, op_gbps=dict.fromkeys(MEASURED_OPS, 2.5))
    assert slow.measured_ops_s == pytest.approx(30.2809088e-3)
    assert slow.total_s == pytest.approx(base.total_s + 30.2809088e-3 - 7.5702272e-3)
    # a rate equal to the copy bandwidth changes nothing
    same = predict_step(CFG, micro_batch=8, num_ranks=1, profile=profile, op_gbps=dict.fromkeys(MEASURED_OPS, 10.0))
    assert same.total_s == pytest.approx(base.total_s)


@pytest.mark.parametrize("rates", [{"gelu": 0.0}, {"layer_norm": 5.0}, {"adamw_sqrt": -1.0}])
def test_bad_op_rates_are_refused(rates: dict[str, float]) -> None:
    with pytest.raises(InputError) as e:
        predict_step(CFG, micro_batch=8, num_ranks=1, profile=_flat_profile(), op_gbps=rates)
    assert e.value.field == "op_gbps"


# CFG at micro-batch 8: attention's batched GEMMs have rows = 8 x 4 heads x 64 = 2048; Q K^T and P V each
# 2 x 2048 x 64 x 64 = 16,777,216 FLOPs, each done 3 times (forward, two backward) in each of 2 layers
ATTENTION_FLOPS = 2 * 3 * 2 * 16_777_216  # 201,326,592: 20.1326592 ms at the flat 10 GFLOP/s


def test_measured_attention_replaces_its_gemm_price_and_keeps_its_flops() -> None:
    profile = _flat_profile()
    base = predict_step(CFG, micro_batch=8, num_ranks=1, profile=profile)
    # one layer's forward + backward measured at 2 ms: 4 ms for the 2 layers instead of 20.1326592 ms of GEMMs
    meas = predict_step(CFG, micro_batch=8, num_ranks=1, profile=profile, attention_call_s=2e-3)
    assert base.attention_s == 0.0 and base.gemm_s == pytest.approx(base.gemm_flops / 1e10)
    assert meas.attention_s == pytest.approx(4e-3)
    assert meas.gemm_flops == base.gemm_flops == flops_per_step(CFG, global_batch_size=8)  # FLOPs still counted
    assert meas.gemm_s == pytest.approx((base.gemm_flops - ATTENTION_FLOPS) / 1e10)
    assert meas.total_s == pytest.approx(base.total_s - 20.1326592e-3 + 4e-3)
    assert meas.work_s == pytest.approx(meas.gemm_s + 4e-3 + meas.memory_s + meas.allreduce_s)
    assert meas.memory_s == base.memory_s and meas.allreduce_s == base.allreduce_s
    # a measurement equal to the GEMM price changes nothing
    same = predict_step(CFG, micro_batch=8, num_ranks=1, profile=profile, attention_call_s=20.1326592e-3 / 2)
    assert same.total_s == pytest.approx(base.total_s)


@pytest.mark.parametrize("seconds", [0.0, -1e-3, float("nan"), float("inf")])
def test_bad_attention_time_is_refused(seconds: float) -> None:
    with pytest.raises(InputError) as e:
        predict_step(CFG, micro_batch=8, num_ranks=1, profile=_flat_profile(), attention_call_s=seconds)
    assert e.value.field == "attention_call_s"
