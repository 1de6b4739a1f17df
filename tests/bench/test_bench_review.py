"""What a performance engineer bringing up a cluster checks in `fmstack bench` (session 8 review), no torch needed:
spread of every point, the output path tried before measuring, merges that would mix --procs, progress in a
batch log, and a profile measured on the cluster's GPU moving `estimate train` the way its numbers say.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import pytest

from fmstack.bench import device, runner
from fmstack.bench.collectives import CollectiveResult
from fmstack.bench.device import DeviceSpec
from fmstack.bench.gemm import GemmResult, GemmShape
from fmstack.bench.profile import build_profile
from fmstack.bench.runner import BenchOptions
from fmstack.catalog import Catalog
from fmstack.cli.bench_cmd import LineProgress
from fmstack.errors import InputError
from fmstack.perfmodel.calibration import CalibrationProfile, Curve, DeviceInfo, save_profile
from tests.cli.test_plan_ux import _invoke


def test_every_timed_batch_is_kept_for_the_spread(monkeypatch: pytest.MonkeyPatch) -> None:
    # sizing: 1 call lasts 0.125 s < 0.5 s, so the next batch is int(1.2 x 0.5 / 0.125) = 4 calls; it lasts 2.0 s: it
    # is trial 1; then 2 more batches of 4 calls: 1.0 s and 3.0 s.
    batches = iter([0.125, 2.0, 1.0, 3.0])
    seen: list[int] = []

    def fake_batch(fn: object, kind: str, calls: int) -> float:
        seen.append(calls)
        return next(batches)

    monkeypatch.setattr(device, "_batch_s", fake_batch)
    t = device.time_calls(lambda: None, "cpu", min_time_s=0.5, warmup=0, trials=3)
    assert seen == [1, 4, 4, 4]
    calls = 4
    assert t.calls == calls and t.trials == 3 and t.warmup == 0
    assert t.per_call_s == (2.0 / calls, 1.0 / calls, 3.0 / calls)
    assert (t.best_s, t.median_s, t.worst_s) == (1.0 / calls, 2.0 / calls, 3.0 / calls)
    with pytest.raises(InputError, match="trials: 0; allowed: >= 1"):
        device.time_calls(lambda: None, "cpu", min_time_s=0.5, trials=0)


def test_zero_trials_is_refused_before_anything_runs() -> None:
    with pytest.raises(InputError, match=r"trials: 0; allowed: >= 1") as e:
        runner.check_options(BenchOptions(kinds=("gemm",), trials=0))
    assert e.value.field == "trials"


def test_out_is_tried_by_creating_a_file_before_measuring(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """os.access says yes to root in any folder and on a read-only mount; a real file creation does not."""

    def refuse(*args: object, **kwargs: object) -> tuple[int, str]:
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(InputError, match=r"out: cannot write in .*: Read-only file system"):
        runner._check_out(tmp_path / "p.json")


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")
def test_out_under_proc_is_refused_at_once() -> None:
    # as root, os.access(/proc, W_OK) is True; before the probe the whole sweep ran, then the save failed
    with pytest.raises(InputError, match=r"in /proc") as e:
        runner._check_out(Path("/proc/profile.json"))
    assert e.value.field == "out"


def test_probe_leaves_nothing_behind(tmp_path: Path) -> None:
    assert runner._check_out(tmp_path / "p.json") is None
    assert list(tmp_path.iterdir()) == []


def _cpu_profile(procs: int) -> CalibrationProfile:
    return CalibrationProfile(
        device=DeviceInfo(name="cpu x", kind="cpu", concurrent_processes=procs),
        measured_at=datetime(2026, 11, 23, tzinfo=UTC),
        gemm_tflops={"fp32": Curve(x=[1e6, 1e9], y=[0.01, 0.05])},
        memory_bw_gbps=Curve(x=[1e6, 1e8], y=[10.0, 20.0]),
    )


def test_merge_that_would_mix_procs_is_refused(tmp_path: Path) -> None:
    base = _cpu_profile(2)
    out = tmp_path / "p.json"
    # memory measured by 1 process next to GEMM curves of 2 processes: one concurrent_processes cannot say both
    with pytest.raises(InputError, match=r"procs: 1, but .* measured with --procs 2") as e:
        runner._check_same_procs(base, BenchOptions(kinds=("memory",), procs=1, out=out))
    assert e.value.field == "procs"
    runner._check_same_procs(base, BenchOptions(kinds=("memory",), procs=2, out=out))  # same procs: merged
    runner._check_same_procs(base, BenchOptions(kinds=("gemm", "memory"), procs=1, out=out))  # both replaced
    runner._check_same_procs(base, BenchOptions(kinds=("collectives",), procs=1, out=out))  # neither touched


def test_collectives_only_run_keeps_the_process_count_of_the_kept_curves() -> None:
    row = CollectiveResult(op="all_reduce", size_bytes=1024, count=256, num_ranks=2, backend="gloo", time_s=1e-3,
                           algbw_gbps=1.024e-3, busbw_gbps=1.024e-3, wrong=0)  # fmt: skip
    merged = build_profile(DeviceSpec(kind="cpu", name="cpu x"), collectives=[row], concurrent_processes=1,
                           base=_cpu_profile(2))  # fmt: skip
    assert merged.device.concurrent_processes == 2
    assert merged.gemm_tflops == _cpu_profile(2).gemm_tflops and "all_reduce" in merged.collectives


def test_line_progress_prints_at_most_every_interval() -> None:
    now = [0.0]
    stream = io.StringIO()
    p = LineProgress("gemm", 6, stream, interval_s=10.0, clock=lambda: now[0])
    for t in (1.0, 9.0, 10.5, 12.0, 21.0, 25.0):
        now[0] = t
        p.advance()
    assert stream.getvalue().splitlines() == ["bench gemm: 3/6 points, 10 s", "bench gemm: 5/6 points, 21 s"]


def _h100_profile(catalog: Catalog, fraction: float, path: Path) -> Path:
    """What `bench gemm --device cuda --dtype bf16 --out` writes on an H100 whose GEMMs all reach ``fraction``."""
    gpu = catalog.gpu("H100")
    spec = DeviceSpec(kind="cuda", name="NVIDIA H100 80GB HBM3", catalog_gpu=gpu)
    rows = []
    for s in (1024, 2048, 4096, 8192):
        shape = GemmShape(m=s, n=s, k=s)
        tflops = fraction * gpu.bf16_dense_tflops
        rows.append(GemmResult(shape=shape, dtype="bf16", time_s=shape.flops / tflops / 1e12, tflops=tflops,
                               pct_of_peak=100 * fraction))  # fmt: skip
    save_profile(build_profile(spec, gemm=rows, torch_version="2.13.0"), path)
    return path


def test_a_measured_h100_profile_moves_the_estimate_the_way_its_numbers_say(catalog: Catalog, tmp_path: Path) -> None:
    base = ["estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "1", "--json"]
    code, out = _invoke(*base)
    assert code == 0, out
    default = json.loads(out)
    got = {}
    for fraction in (0.5, 0.9):
        path = _h100_profile(catalog, fraction, tmp_path / f"p{fraction}.json")
        code, out = _invoke(*base, "--calibration", str(path))
        assert code == 0, out
        got[fraction] = json.loads(out)
    # the default Hopper bf16 curve is 0.58..0.76 over these GEMMs: 50 % is slower, 90 % faster
    assert got[0.5]["step_time_s"] > default["step_time_s"] > got[0.9]["step_time_s"]
    # flat curves: every GEMM takes flops / (peak x fraction), so the GEMM part scales by 0.9 / 0.5 exactly
    ratio = got[0.5]["breakdown"]["parts_s"]["gemm"] / got[0.9]["breakdown"]["parts_s"]["gemm"]
    assert ratio == pytest.approx(0.9 / 0.5, rel=1e-9)
