"""The default Hopper GEMM efficiency curve against GEMMs measured on a real H100 SXM (80 GB HBM3, 700 W).

Measured by `fmstack bench gemm --device cuda --model llama3.1-8b --tokens 8192` on two machines on 2026-11-23
(benchmarks/results/gpu-h100-2026-11-23/: call1 timed by host-synchronised batches, call2 by CUDA-graph replays).
Only GEMMs of >= 1e10 FLOPs are compared: below that the default curve describes GEMMs inside a training step, and
the measurement of an isolated small GEMM (call1: host dispatch; call2: one kernel from L2) is a different thing.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np
import pytest

from fmstack.catalog import Catalog
from fmstack.perfmodel.efficiency import default_efficiency

RESULTS = Path(__file__).parents[2] / "benchmarks" / "results" / "gpu-h100-2026-11-23"


def _points() -> list[tuple[str, float, float]]:
    out = []
    for run in ("call1-host-timed", "call2"):
        data = json.loads((RESULTS / run / "bench-gemm.json").read_text(encoding="utf-8"))
        assert data["device"]["catalog_gpu"] == "H100"
        for r in data["gemm"]:
            if r["dtype"] in ("bf16", "fp16") and r["flops"] >= 1e10:
                out.append((r["dtype"], float(r["flops"]), r["pct_of_peak"] / 100.0))
    return out


def test_default_hopper_curve_matches_measured_large_gemms(catalog: Catalog) -> None:
    eff = default_efficiency(catalog.gpu("H100"))
    points = _points()
    assert len(points) == 28  # 7 shapes >= 1e10 FLOPs x 2 dtypes x 2 machines
    rel = [float(eff.gemm_at(d, np.array([f]))[0]) / m - 1.0 for d, f, m in points]
    # measured: median of default / measured - 1 is +4 %, range -17 % (2048^3, which the default puts below the
    # plateau) to +20 % (one 8192x4096x14336 run at 63 % of peak, 75 % on the other machine)
    assert statistics.median(rel) == pytest.approx(0.04, abs=0.04)
    assert all(-0.25 < r < 0.25 for r in rel)
