"""All four benches run for real on this CPU through the CLI (small sizes), and the profile they write.

Assertions are invariants of the definitions (rate = work / time, busbw = algbw x nccl-tests factor, every
collective's result checked element by element, CPU peak = best measured rate), not measured values.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fmstack.bench.collectives import OPS, bus_factor
from fmstack.perfmodel.calibration import load_profile

pytest.importorskip("torch")
pytestmark = pytest.mark.torch


def _fmstack(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fmstack", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd)  # fmt: skip


@pytest.fixture(scope="module")
def bench_all(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    work = tmp_path_factory.mktemp("bench")
    store = work / "store"
    store.mkdir()
    proc = _fmstack("bench", "all", "--quick", "--threads", "1", "--min-time", "0.02", "--model", "llama3.1-8b",
                    "--path", str(store), "--out", str(work / "profile.json"), "--json", cwd=work)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout), work


def test_gemm_rows(bench_all: tuple[dict[str, Any], Path]) -> None:
    data, _ = bench_all
    rows = data["gemm"]
    assert {r["shape"]["label"].split()[0] for r in rows} == {"square", "llama3.1-8b"}
    for r in rows:
        s = r["shape"]
        assert r["flops"] == 2 * s["m"] * s["n"] * s["k"]
        assert r["tflops"] == pytest.approx(r["flops"] / r["time_s"] / 1e12)
        assert max(s["m"], s["n"], s["k"]) <= 1024  # scaled down on CPU
        assert r["pct_of_peak"] is None  # a CPU has no catalog peak
        # spread: the median of 5 timed batches lies between the fastest and the slowest
        assert r["trials"] == 5 and r["calls"] >= 1 and r["warmup"] == 2
        assert r["time_min_s"] <= r["time_s"] <= r["time_max_s"]
    assert data["device"]["spec_tflops"] is None and data["device"]["spec_memory_bw_gbps"] is None
    assert data["timing"]["trials"] == 5 and data["timing"]["min_time_s"] == 0.02
    assert set(data["timing"]) == {"min_time_s", "trials", "gemm", "memory", "collectives", "storage"}


def test_memory_rows(bench_all: tuple[dict[str, Any], Path]) -> None:
    rows = bench_all[0]["memory"]
    assert {r["kernel"] for r in rows} == {"copy", "triad"}
    for r in rows:
        words = 2 if r["kernel"] == "copy" else 3  # STREAM's counting
        assert r["bytes_moved"] == words * r["buffer_bytes"]
        assert r["bw_gbps"] == pytest.approx(r["bytes_moved"] / r["time_s"] / 1e9)
        assert r["trials"] == 5 and r["time_s"] <= r["time_median_s"] <= r["time_max_s"]  # time_s: the fastest


def test_collectives_are_correct_and_busbw_is_nccl_tests(bench_all: tuple[dict[str, Any], Path]) -> None:
    rows = bench_all[0]["collectives"]
    assert {r["op"] for r in rows} == set(OPS)
    for r in rows:
        assert r["wrong"] == 0, r
        assert r["num_ranks"] == 2 and r["backend"] == "gloo"
        assert r["algbw_gbps"] == pytest.approx(r["size_bytes"] / r["time_s"] / 1e9)
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * bus_factor(r["op"], 2))
        # time_s is the mean over all iterations, i.e. the parts' means weighted by their iterations, plus the
        # microseconds between parts: never below the fastest part
        assert r["trials"] == 5 and r["iters"] >= 5 and r["time_min_s"] <= r["time_s"]
        assert r["time_min_s"] <= r["time_max_s"]


def test_storage_rows_and_nothing_left(bench_all: tuple[dict[str, Any], Path]) -> None:
    data, work = bench_all
    assert len(data["storage"]) == 3
    assert all(r["write_gbps"] > 0 and r["read_gbps"] > 0 for r in data["storage"])
    assert list((work / "store").iterdir()) == []


def test_profile_file(bench_all: tuple[dict[str, Any], Path]) -> None:
    data, work = bench_all
    assert data["kept_sections"] == []  # a new file: nothing kept from an earlier profile
    prof = load_profile(work / "profile.json")
    assert prof.device.kind == "cpu" and prof.device.catalog_gpu is None
    assert prof.device.num_threads == 1
    best = max(r["tflops"] for r in data["gemm"])
    assert prof.device.peak_tflops["fp32"] == pytest.approx(best)  # CPU peak := best measured rate
    assert max(prof.gemm_efficiency["fp32"].y) == pytest.approx(1.0)
    assert prof.memory_bw_gbps is not None and set(prof.memory_curves) == {"copy", "triad"}
    assert set(prof.collectives) == set(OPS)
    assert prof.collectives["all_reduce"].num_ranks == 2
    assert set(prof.storage_gbps) == {"write", "read"}
    assert {p.name for p in work.iterdir()} == {"store", "profile.json"}  # no temporary file left


def test_profile_is_merged_not_clobbered(bench_all: tuple[dict[str, Any], Path], tmp_path: Path) -> None:
    _, work = bench_all
    out = tmp_path / "p.json"
    out.write_text((work / "profile.json").read_text())
    before = load_profile(out)
    proc = _fmstack("bench", "memory", "--quick", "--max-bytes", "262144", "--min-time", "0.01", "--out", str(out),
                    cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    after = load_profile(out)
    assert after.gemm_tflops == before.gemm_tflops and after.collectives == before.collectives
    assert after.memory_bw_gbps != before.memory_bw_gbps
    assert "profile written" in proc.stdout
    # measured_at is now this run's: the text says which curves are older, and from when
    kept = f"kept from the profile it updated (measured {before.measured_at:%Y-%m-%d %H:%M} UTC): gemm, collectives, storage"
    assert kept in proc.stdout


def test_nccl_tests_text_layout(tmp_path: Path) -> None:
    proc = _fmstack("bench", "collectives", "--quick", "--op", "all_reduce", "--max-bytes", "65536",
                    "--min-time", "0.01", cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    header = next(ln for ln in lines if "algbw" in ln)
    assert header.split()[1:] == ["size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong"]
    rows = [ln.split() for ln in lines if ln.strip() and ln.strip()[0].isdigit()]
    assert [int(r[0]) for r in rows] == [1024, 16384]
    for size, count, dtype, redop, root, _t_us, algbw, busbw, wrong in rows:
        assert int(count) == int(size) // 4 and (dtype, redop, root, wrong) == ("float", "sum", "-1", "0")
        assert float(busbw) == pytest.approx(float(algbw), abs=0.011)  # 2 ranks: 2(n-1)/n = 1
    assert any(ln.startswith("# Avg bus bandwidth") for ln in lines)
    # what was measured and how: no catalog spec for a CPU, the timing, the spread of each size
    assert any(ln.startswith("spec: none in the catalog for") for ln in lines)
    assert any(ln.startswith("timing: every batch runs >= 0.01 s") for ln in lines)
    spread = lines.index(next(ln for ln in lines if ln.startswith("# spread: the timed loop in 5 parts")))
    assert lines[spread + 1].split()[1:] == ["size", "iters", "min", "max"]
    assert [int(ln.split()[1]) for ln in lines[spread + 2 : spread + 4]] == [1024, 16384]


def test_bench_help_does_not_import_torch() -> None:
    code = (
        "import sys\nfrom fmstack.cli.main import main\n"
        "try:\n    main(['bench', 'gemm', '--help'])\nexcept SystemExit:\n    pass\n"
        "assert 'torch' not in sys.modules, 'bench --help imported torch'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "Example:" in proc.stdout


def test_out_that_is_not_a_profile_is_left_untouched(tmp_path: Path) -> None:
    out = tmp_path / "notes.json"
    out.write_text('{"my": "notes"}')
    proc = _fmstack("bench", "memory", "--quick", "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 2
    # the field is the flag the user typed (it said `calibration` before), and the reason is kept
    assert proc.stderr.strip().startswith(f"fmstack: error: out: {out} exists and is not a calibration profile")
    assert "field 'device': missing required field" in proc.stderr and "never overwritten" in proc.stderr
    assert out.read_text() == '{"my": "notes"}'
    assert [p.name for p in tmp_path.iterdir()] == ["notes.json"]


def test_profile_of_another_device_is_not_merged_or_overwritten(tmp_path: Path) -> None:
    from fmstack.perfmodel.calibration import CalibrationProfile, DeviceInfo, save_profile

    out = tmp_path / "other.json"
    other = CalibrationProfile(device=DeviceInfo(name="NVIDIA H100 80GB HBM3", kind="cuda"),
                               measured_at="2026-01-01T00:00:00Z")  # fmt: skip
    save_profile(other, out)
    text = out.read_text()
    proc = _fmstack("bench", "memory", "--quick", "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 2
    assert "is the profile of 'NVIDIA H100 80GB HBM3', not of this device" in proc.stderr
    assert out.read_text() == text


def test_gemm_and_memory_in_two_processes_at_once(tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    proc = _fmstack("bench", "gemm", "--procs", "2", "--threads", "1", "--quick", "--min-time", "0.01",
                    "--max-dim", "128", "--out", str(out), "--json", cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(proc.stdout)["gemm"]
    assert [r["shape"]["m"] for r in rows] == [64, 128]
    for r in rows:
        assert r["tflops"] == pytest.approx(r["flops"] / r["time_s"] / 1e12)
    prof = load_profile(out)
    assert prof.device.concurrent_processes == 2 and prof.device.num_threads == 1


def test_cpu_gemm_table_reads_in_gflops(tmp_path: Path) -> None:
    """A CPU's GEMM rates are far below 1 TFLOP/s: the table shows GFLOP/s (35.2, not 0.0352 or 4.131e-05), equal to
    the JSON's tflops x 1000 (walk-through, session 8)."""
    args = ("bench", "gemm", "--quick", "--threads", "1", "--min-time", "0.01", "--trials", "2")
    text = _fmstack(*args, cwd=tmp_path)
    assert text.returncode == 0, text.stderr[-2000:]
    header = next(ln for ln in text.stdout.splitlines() if "shape" in ln and "dtype" in ln)
    assert "GFLOP/s" in header and "TFLOP/s" not in header
    rows = [ln.split("│")[1:-1] for ln in text.stdout.splitlines() if ln.startswith("│ square")]
    rates = [float(r[8].replace(",", "")) for r in rows]
    assert rates and all(1.0 <= x < 1e4 for x in rates)  # tens to thousands of GFLOP/s on a CPU core


def test_machine_load_is_reported(bench_all: tuple[dict[str, Any], Path]) -> None:
    from fmstack.bench.interference import BUSY_SHARE_LIMIT

    load = bench_all[0]["machine_load"]
    if not Path("/proc/stat").exists():
        assert load is None
        return
    assert load["wall_s"] > 0 and load["cpus"] >= 1
    assert load["other_processes_cpu_s"] >= 0 and load["steal_s"] >= 0
    capacity = load["wall_s"] * load["cpus"]
    assert load["others_share"] == pytest.approx((load["other_processes_cpu_s"] + load["steal_s"]) / capacity)
    assert load["disturbed"] == (load["others_share"] > BUSY_SHARE_LIMIT)


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="/proc/stat is Linux")
def test_a_busy_machine_is_named_in_the_text_output(monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from fmstack.bench import interference
    from fmstack.cli.main import cli

    monkeypatch.setattr(interference, "BUSY_SHARE_LIMIT", -1.0)  # any neighbour at all counts as busy
    result = CliRunner().invoke(cli, ["bench", "memory", "--quick", "--max-bytes", "262144", "--min-time", "0.01"])
    assert result.exit_code == 0, result.output
    assert "warning: this machine was busy during the run: other processes" in result.output
