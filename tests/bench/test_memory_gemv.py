"""The memory bench's weight-streaming kernel (gemv) and how a profile's gemv rate reaches the serving model."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from fmstack.bench.memory import GEMV_K, default_kernels, run_memory
from fmstack.bench.predict_decode import price_decode
from fmstack.catalog import load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel.calibration import CalibrationProfile, Curve, DeviceInfo
from fmstack.perfmodel.efficiency import default_efficiency, efficiency_from_profile

CAT = load_catalog()
H100 = build_cluster(CAT, "p5.48xlarge", 1)


def _profile(copy_gbps: float, gemv_gbps: float | None, top_bytes: float = 2e9) -> CalibrationProfile:
    curves = {"copy": Curve(x=[1e6, top_bytes], y=[2000.0, copy_gbps])}
    if gemv_gbps is not None:
        curves["gemv"] = Curve(x=[1e6, top_bytes / 2], y=[3900.0, gemv_gbps])  # small weights sit in L2: faster
    return CalibrationProfile(
        device=DeviceInfo(name="NVIDIA H100 80GB HBM3", kind="cuda", catalog_gpu="H100", peak_memory_bw_gbps=3350.0),
        measured_at=datetime(2026, 11, 24, tzinfo=UTC),
        memory_bw_gbps=curves["copy"],
        memory_curves=curves,
    )


def test_gemv_rate_prices_the_weights_and_copy_the_rest() -> None:
    """A profile whose kernel copy reads 3,015 GB/s (0.9 of 3,350; the H100 of 2026-11-24 read 3,015) and whose
    gemv reads 2,680 GB/s (0.8 of 3,350)."""
    eff = efficiency_from_profile(_profile(3015.0, 2680.0), H100.gpu)
    assert eff.memory == pytest.approx(0.9)
    assert eff.weight_memory == pytest.approx(0.8)
    arch = CAT.model("llama3.1-8b")
    p = price_decode(arch, H100, eff, batch=64, attended=2049)
    # weights: 7,504,924,672 non-embedding parameters x 2 B at 2,680 GB/s; KV: 64 x 2050 x 128 KiB at 3,015 GB/s
    assert p.parts_s["weight_reads"] == pytest.approx(2 * 7_504_924_672 / 2680e9, rel=1e-4)
    assert p.parts_s["kv_cache_reads"] == pytest.approx(64 * 2050 * 131_072 / 3015e9, rel=1e-6)


def test_a_profile_without_gemv_prices_weights_at_the_copy_rate_and_defaults_are_unchanged() -> None:
    eff = efficiency_from_profile(_profile(3015.0, None), H100.gpu)
    assert eff.weight_memory is None and eff.weight_read_memory == eff.memory == pytest.approx(0.9)
    default = default_efficiency(H100.gpu)
    assert default.weight_memory is None and default.weight_read_memory == default.memory == 0.8


def test_gemv_on_cpu_counts_weight_and_both_rows() -> None:
    pytest.importorskip("torch")
    assert "gemv" not in default_kernels("cpu") and "gemv" in default_kernels("cuda")
    (row,) = run_memory("cpu", [1 << 20], min_time_s=0.001, trials=1, kernels=("gemv",))
    rows = (1 << 20) // (4 * GEMV_K)  # fp32 off CUDA: 64 rows of 4,096
    assert row.kernel == "gemv" and row.bytes_moved == 4 * (rows * GEMV_K + GEMV_K + rows)
    assert row.bw_gbps == pytest.approx(row.bytes_moved / row.time_s / 1e9)


def test_unknown_kernel_is_refused() -> None:
    pytest.importorskip("torch")
    with pytest.raises(InputError, match=r"^kernels: unknown gemm; allowed: copy, triad, gemv$"):
        run_memory("cpu", [1 << 20], kernels=("gemm",))


def test_curves_that_stay_in_the_caches_calibrate_no_hbm_fraction() -> None:
    """`bench memory --quick` stops at 8 MiB buffers: on an H100 a 4 MiB gemv read 764 GB/s from L2 (0.23 of the
    peak); priced as HBM it tripled a decode step. Such curves keep the defaults, and the source says why."""
    eff = efficiency_from_profile(_profile(4521.0, 764.0, top_bytes=16 * 2**20), H100.gpu)
    assert eff.memory == 0.8 and eff.weight_memory is None
    assert eff.source.endswith(
        "(copy ends at 16 MiB, gemv ends at 8 MiB, within the caches: the default HBM fraction kept)"
    )
    assert efficiency_from_profile(_profile(3015.0, 2845.0), H100.gpu).source.endswith("measured 2026-11-24")


def test_routed_experts_stream_no_faster_than_dense_weights() -> None:
    """Hopper has no measured grouped-GEMM fraction: the experts take the dense weight-read fraction (gemv's when
    measured), not copy's."""
    eff = efficiency_from_profile(_profile(3015.0, 2680.0), H100.gpu)
    assert eff.grouped_memory is None and eff.expert_memory == eff.weight_read_memory == pytest.approx(0.8)
    blackwell = default_efficiency(CAT.gpu("B200"))
    assert blackwell.expert_memory == blackwell.grouped_memory == 0.694
