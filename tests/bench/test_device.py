"""Device resolution and the CUDA path (runs for real only where torch sees a GPU)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fmstack.bench.device import check_device, resolve_device, time_per_call_s
from fmstack.catalog import Catalog
from fmstack.errors import InputError

torch = pytest.importorskip("torch")


def test_unknown_device_is_refused_before_torch() -> None:
    with pytest.raises(InputError, match="allowed: cpu, cuda"):
        check_device("tpu")


def test_cuda_resolves_or_says_there_is_none(catalog: Catalog) -> None:
    if torch.cuda.is_available():
        spec = resolve_device("cuda", catalog)
        assert spec.kind == "cuda" and spec.name == torch.cuda.get_device_name(0)
    else:
        with pytest.raises(InputError, match="device: cuda requested but torch sees no CUDA device"):
            resolve_device("cuda", catalog)


def test_cpu_device_is_named(catalog: Catalog) -> None:
    spec = resolve_device("cpu", catalog)
    assert spec.kind == "cpu" and spec.name and spec.catalog_gpu is None


def test_timer_counts_calls() -> None:
    calls = []
    per_call = time_per_call_s(lambda: calls.append(1), "cpu", min_time_s=0.01, warmup=2)
    # warm-up calls plus doubling batches: at least 2 + 1 calls, and a positive mean time per call
    assert len(calls) >= 3 and per_call > 0


@pytest.mark.gpu
def test_bench_all_on_cuda(tmp_path: Path) -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device on this machine")
    ranks = "2" if torch.cuda.device_count() >= 2 else None
    args = ["bench", "all", "--device", "cuda", "--quick", "--path", str(tmp_path), "--json"]
    if ranks is None:
        args = ["bench", "gemm", "--device", "cuda", "--quick", "--json"]
    proc = subprocess.run([sys.executable, "-m", "fmstack", *args], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    assert data["device"]["kind"] == "cuda"
    if data["device"]["catalog_gpu"]:
        assert all(0 < r["pct_of_peak"] <= 100 for r in data["gemm"])


def test_timer_keeps_the_fastest_of_best_of_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    from fmstack.bench import device

    # the first batch (1 call) already lasts min_time_s; then best_of - 1 = 3 more batches of the same size
    batches = iter([1.0, 2.0, 0.6, 1.5])
    seen: list[int] = []

    def fake_batch(fn: object, kind: str, calls: int) -> float:
        seen.append(calls)
        return next(batches)

    monkeypatch.setattr(device, "_batch_s", fake_batch)
    assert device.time_per_call_s(lambda: None, "cpu", min_time_s=0.5, warmup=0, best_of=4) == 0.6
    assert seen == [1, 1, 1, 1]
