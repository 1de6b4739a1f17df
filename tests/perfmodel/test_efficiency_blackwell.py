"""The default Blackwell GEMM curves against the published measurements they are derived from.

Sources and numbers are in data/efficiency.yaml (`source` of blackwell, blackwell-ultra, GB200) and docs/perfmodel.md.
Each plateau is the hopper curve's times a Blackwell / Hopper ratio measured by one source with one method.
"""

from __future__ import annotations

import statistics

import pytest

from fmstack.catalog import Catalog
from fmstack.perfmodel.efficiency import default_efficiency

PLATEAU = 1e12

# BF16 Blackwell / Hopper ratios, each from one source (fraction of dense peak, TFLOP/s over peak)
BF16_RATIOS = {
    "MAMF B200 / H100": (1745.0 / 2250) / (794.5 / 989),
    "XLA sm_100 / sm_90, b4 4096^3": (1670.467 / 2250) / (788.699 / 989.5),
    "TE guide B300 / H200 NVL, autocast": (19.1727e12 / 12.758e-3 / 2250e12) / (19.1727e12 / 32.014e-3 / 835e12),
    "TE guide B300 / H200 NVL, pre-quantized": (19.1727e12 / 13.102e-3 / 2250e12) / (19.1727e12 / 31.968e-3 / 835e12),
}
# FP8: the TE guide's like-for-like ratios (the hopper FP8 plateau is TE GEMMs at LLM shapes)
FP8_TE_RATIOS = {
    "current scaling, pre-quantized": (19.1727e12 / 6.812e-3 / 4500e12) / (19.1727e12 / 16.785e-3 / 1671e12),
    "delayed scaling, autocast": (19.1727e12 / 7.802e-3 / 4500e12) / (19.1727e12 / 18.978e-3 / 1671e12),
}


def test_blackwell_plateaus_are_hopper_times_the_measured_ratios(catalog: Catalog) -> None:
    hopper, b200 = default_efficiency(catalog.gpu("H100")), default_efficiency(catalog.gpu("B200"))
    bf16 = statistics.median(BF16_RATIOS.values())
    assert bf16 == pytest.approx(0.931, abs=0.001)
    assert b200.gemm_at("bf16", PLATEAU) == pytest.approx(hopper.gemm_at("bf16", PLATEAU) * bf16, abs=0.005)
    fp8 = statistics.mean(FP8_TE_RATIOS.values())
    assert fp8 == pytest.approx(0.909, abs=0.001)
    assert b200.gemm_at("fp8", PLATEAU) == pytest.approx(hopper.gemm_at("fp8", PLATEAU) * fp8, abs=0.005)


def test_blackwell_bf16_shape_matches_the_measured_b200_sizes(catalog: Catalog) -> None:
    b200 = default_efficiency(catalog.gpu("B200"))
    # pyptx.dev cuBLAS sweep 2048^3 at 1,006 TFLOP/s
    assert b200.gemm_at("bf16", 2.0 * 2048**3) == pytest.approx(1006 / 2250, abs=0.01)
    # 4096^3 (1.37e11): pyptx 1,532, XLA b1 4096^3 1,416.9 and b4 4096x4096x1024 1,350.5 TFLOP/s; their mean
    at_4096 = statistics.mean([1532 / 2250, 1416.867 / 2250, 1350.486 / 2250])
    assert b200.gemm_at("bf16", 2.0 * 4096**3) == pytest.approx(at_4096, abs=0.01)


def test_blackwell_fp4_at_decode_size_matches_flashinfer(catalog: Catalog) -> None:
    """flashinfer PR #1979 (CUDA 13, cuDNN 9.15): NVFP4 m 1024 n 7168 k 4608 on B200, best 3,841 TFLOP/s (0.427); the curve 0.411."""
    b200 = default_efficiency(catalog.gpu("B200"))
    measured = 3840.714 / 9000
    assert b200.gemm_at("fp4", 2.0 * 1024 * 7168 * 4608) == pytest.approx(measured, rel=0.04)
    # NVFP4 reaches the same fraction of its (2x) peak as FP8: MAMF 73.6 % vs 76.3 %, so fp4 = the fp8 curve
    for flops in (1e8, 1e10, 1e11, PLATEAU):
        assert b200.gemm_at("fp4", flops) == b200.gemm_at("fp8", flops)


def test_gb200_reaches_the_measured_fraction_of_b200s(catalog: Catalog) -> None:
    """MAMF: GB200 72.9 % BF16 / 72.3 % FP8 of its peak against B200's 77.6 % / 76.3 %."""
    b200, gb200 = default_efficiency(catalog.gpu("B200")), default_efficiency(catalog.gpu("GB200"))
    for dtype, ratio in (("bf16", 72.9 / 77.6), ("fp8", 72.3 / 76.3), ("fp4", 72.3 / 76.3)):
        for flops in (1e10, 1e11, PLATEAU):
            assert gb200.gemm_at(dtype, flops) == pytest.approx(b200.gemm_at(dtype, flops) * ratio, abs=0.006)
    assert gb200.attention == pytest.approx(b200.attention * 72.9 / 77.6, abs=0.005)
    # B300 shares B200's BF16 / FP8 curves (MAMF within 2 %); its FP4 is the FP8 curve x 0.377 / 0.625 (TE guide)
    b300 = default_efficiency(catalog.gpu("B300"))
    assert b300.gemm_at("bf16", PLATEAU) == b200.gemm_at("bf16", PLATEAU)
    assert b300.gemm_at("fp4", PLATEAU) == pytest.approx(b300.gemm_at("fp8", PLATEAU) * 0.377 / 0.625, abs=0.005)
