"""The measure pillar as its users run it (session 15 review): a flag repeated is measured once, --max-dim is a cap
even below the smallest default square, the storage-only text claims no timed batches, and a profile whose numbers
cannot be measurements (a rate <= 0, a GEMM above its catalog peak) is refused instead of moving the estimate.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from fmstack.bench.device import DeviceSpec
from fmstack.bench.gemm import GemmResult, GemmShape
from fmstack.bench.profile import build_profile
from fmstack.bench.runner import BenchOptions, plan_gemm_shapes
from fmstack.catalog import Catalog
from fmstack.errors import InputError
from fmstack.perfmodel.calibration import load_profile
from fmstack.perfmodel.efficiency import check_profile_has_catalog_peak
from tests.cli.test_plan_ux import _invoke


def _fmstack(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fmstack", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd)  # fmt: skip


@pytest.mark.torch
def test_a_repeated_op_or_dtype_is_measured_once(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    quick = ("--quick", "--min-time", "0.005", "--trials", "1", "--json")
    proc = _fmstack("bench", "collectives", "--op", "broadcast", "--op", "broadcast", "--max-bytes", "1024", *quick,
                    cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(proc.stdout)["collectives"]
    assert [(r["op"], r["size_bytes"]) for r in rows] == [("broadcast", 1024)]  # was the same row twice
    proc = _fmstack("bench", "gemm", "--dtype", "fp32", "--dtype", "fp32", "--max-dim", "64", *quick, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [(r["dtype"], r["shape"]["m"]) for r in json.loads(proc.stdout)["gemm"]] == [("fp32", 64)]


def test_max_dim_below_the_smallest_square_is_still_a_cap(catalog: Catalog) -> None:
    shapes = plan_gemm_shapes(BenchOptions(kinds=("gemm",), max_dim=32), catalog)
    assert shapes == [GemmShape(m=32, n=32, k=32)]  # it ran 64^3 before, above the cap the user gave
    assert plan_gemm_shapes(BenchOptions(kinds=("gemm",), max_dim=200), catalog) == [
        GemmShape(m=s, n=s, k=s) for s in (64, 128)
    ]


@pytest.mark.torch
def test_storage_alone_does_not_claim_timed_batches(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    proc = _fmstack("bench", "storage", "--quick", "--path", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "timed batches per point" not in proc.stdout  # storage is one pass per (file size, count)
    assert "storage: one pass per (file size, count); no spread" in proc.stdout


def _h100_profile(catalog: Catalog, fraction: float) -> dict[str, object]:
    gpu = catalog.gpu("H100")
    rows = []
    for s in (1024, 8192):
        shape = GemmShape(m=s, n=s, k=s)
        tflops = fraction * gpu.bf16_dense_tflops
        rows.append(GemmResult(shape=shape, dtype="bf16", time_s=shape.flops / tflops / 1e12, tflops=tflops,
                               pct_of_peak=100 * fraction))  # fmt: skip
    spec = DeviceSpec(kind="cuda", name="NVIDIA H100 80GB HBM3", catalog_gpu=gpu)
    profile = build_profile(spec, gemm=rows, now=datetime(2026, 11, 24, tzinfo=UTC))
    return json.loads(profile.model_dump_json())  # type: ignore[no-any-return]


@pytest.mark.parametrize(("value", "shown"), [(0.0, "got 0"), (-0.5, "got -0.5")])
def test_a_profile_rate_that_is_not_positive_is_refused(catalog: Catalog, tmp_path: Path, value: float,
                                                        shown: str) -> None:  # fmt: skip
    data = _h100_profile(catalog, 0.7)
    data["gemm_efficiency"]["bf16"]["y"] = [value, value]  # type: ignore[index]
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    # before: 0 divided the GEMM time by zero (a traceback), -0.5 gave a negative step time and an MFU of 717 %
    with pytest.raises(InputError, match=rf"field 'gemm_efficiency.bf16': .*y values must be > 0 .*{shown}"):
        load_profile(path)
    code, out = _invoke("estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "1",
                        "--calibration", str(path))  # fmt: skip
    assert code == 2 and "y values must be > 0" in out


def test_a_gemm_faster_than_its_catalog_peak_is_refused(catalog: Catalog, tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(_h100_profile(catalog, 1.5)))
    with pytest.raises(InputError, match=r"gemm_efficiency.bf16 reaches 1.5 of H100's dense peak"):
        check_profile_has_catalog_peak(load_profile(path))
    base = ("estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "1")
    code, out = _invoke(*base, "--calibration", str(path))
    assert code == 2 and "reaches 1.5 of H100's dense peak" in out  # it estimated an MFU of 235 % before
    # exactly the peak is possible (if not likely): accepted
    path.write_text(json.dumps(_h100_profile(catalog, 1.0)))
    code, out = _invoke(*base, "--calibration", str(path))
    assert code == 0, out
