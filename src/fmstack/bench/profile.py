"""Turn bench results into a :class:`CalibrationProfile`, merged into an existing one when given.

Peaks. On a catalog GPU, ``peak_tflops`` and ``peak_memory_bw_gbps`` are the catalog's (spec sheet) values and
efficiency = achieved / spec. On a CPU (or a GPU the catalog does not know) there is no trustworthy spec here:
cores x SIMD width x FMA units x clock cannot be read reliably inside a VM (the FMA-unit count and boost clock
are not exposed), so the peak is defined as the best rate measured in this run, per dtype, and efficiency curves
are relative to it (their maximum is 1). ``device.peak_source`` says which.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from fmstack.bench.collectives import CollectiveResult
from fmstack.bench.device import DeviceSpec
from fmstack.bench.gemm import GemmResult, best_by_flops
from fmstack.bench.memory import KERNELS, MemoryResult
from fmstack.bench.storage import StorageResult
from fmstack.perfmodel.calibration import CalibrationProfile, CollectiveCurve, Curve, DeviceInfo


def catalog_peaks(spec: DeviceSpec) -> tuple[dict[str, float], float | None]:
    """(peak TFLOP/s per dtype, peak memory GB/s) from the catalog, or empty when the device is not in it."""
    gpu = spec.catalog_gpu
    if gpu is None:
        return {}, None
    peaks = {"bf16": gpu.bf16_dense_tflops, "fp16": gpu.fp16_dense_tflops}
    if gpu.fp32_tflops:
        peaks["fp32"] = gpu.fp32_tflops
    return peaks, gpu.hbm_bw_gbps


def _mean_by_x(points: Sequence[tuple[float, float]]) -> Curve:
    by_x: dict[float, list[float]] = {}
    for x, y in points:
        by_x.setdefault(float(x), []).append(y)
    xs = sorted(by_x)
    return Curve(x=xs, y=[sum(by_x[x]) / len(by_x[x]) for x in xs])


def build_profile(
    spec: DeviceSpec,
    *,
    gemm: list[GemmResult] | None = None,
    memory: list[MemoryResult] | None = None,
    collectives: list[CollectiveResult] | None = None,
    storage: list[StorageResult] | None = None,
    num_threads: int | None = None,
    concurrent_processes: int = 1,
    torch_version: str | None = None,
    base: CalibrationProfile | None = None,
    now: datetime | None = None,
) -> CalibrationProfile:
    """A profile from the sections measured now; sections not measured now are kept from ``base``.

    ``base`` must describe the same device (the runner refuses to merge profiles of different devices).
    """
    if base is not None and base.device.name != spec.name:
        raise ValueError(f"cannot merge a profile of {base.device.name!r} into one of {spec.name!r}")
    peaks, mem_peak = catalog_peaks(spec)
    old = base.model_dump() if base is not None else {}
    old_dev = old.get("device", {})
    source = "catalog" if peaks else "measured: best rate in this run"
    peak_tflops = dict(peaks) if peaks else dict(old_dev.get("peak_tflops", {}))
    peak_mem = mem_peak if mem_peak else old_dev.get("peak_memory_bw_gbps")
    update: dict[str, object] = {}
    if gemm:
        tflops: dict[str, Curve] = {}
        eff: dict[str, Curve] = {}
        for dtype in dict.fromkeys(r.dtype for r in gemm):
            xs, ys = best_by_flops(gemm, dtype)
            tflops[dtype] = Curve(x=xs, y=ys)
            if not peaks:
                peak_tflops[dtype] = max(ys)
            if dtype in peak_tflops:
                eff[dtype] = Curve(x=xs, y=[y / peak_tflops[dtype] for y in ys])
        update["gemm_tflops"] = {**old.get("gemm_tflops", {}), **tflops}
        update["gemm_efficiency"] = {**old.get("gemm_efficiency", {}), **eff}
    if memory:
        curves = {k: _mean_by_x([(r.bytes_moved, r.bw_gbps) for r in memory if r.kernel == k])
                  for k in dict.fromkeys(r.kernel for r in memory)}  # fmt: skip
        update["memory_curves"] = curves
        update["memory_bw_gbps"] = curves.get("copy") or next(iter(curves.values()))
        if not mem_peak:
            peak_mem = max((r.bw_gbps for r in memory if r.kernel in KERNELS), default=None)  # STREAM's, not gemv
    if collectives:
        colls: dict[str, CollectiveCurve] = {}
        for op in dict.fromkeys(r.op for r in collectives):
            rows = [r for r in collectives if r.op == op]
            c = _mean_by_x([(r.size_bytes, r.busbw_gbps) for r in rows])
            colls[op] = CollectiveCurve(x=c.x, y=c.y, num_ranks=rows[0].num_ranks, backend=rows[0].backend)
        update["collectives"] = {**old.get("collectives", {}), **colls}
    if storage:
        update["storage_gbps"] = {
            "write": _mean_by_x([(r.file_bytes, r.write_gbps) for r in storage]),
            "read": _mean_by_x([(r.file_bytes, r.read_gbps) for r in storage]),
        }
        update["storage_target"] = storage[0].target
    device = DeviceInfo(
        name=spec.name,
        kind="cuda" if spec.kind == "cuda" else "cpu",
        catalog_gpu=spec.catalog_gpu.name if spec.catalog_gpu else None,
        peak_tflops=peak_tflops,
        peak_memory_bw_gbps=peak_mem,
        peak_source=source,
        num_threads=num_threads if gemm else old_dev.get("num_threads", num_threads),
        # a run that measured neither GEMM nor memory keeps the process count its curves were measured with
        concurrent_processes=concurrent_processes if (gemm or memory) else old_dev.get("concurrent_processes", 1),
    )
    merged = {k: v for k, v in old.items() if k not in ("device", "measured_at", "schema_version")}
    merged.update(update)
    merged["device"] = device
    merged["measured_at"] = now or datetime.now(UTC)
    merged["torch_version"] = torch_version
    return CalibrationProfile.model_validate(merged)
