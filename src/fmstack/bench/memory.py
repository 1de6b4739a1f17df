"""Memory bench: achieved bandwidth of STREAM's copy and triad kernels over buffer sizes, and on a GPU of the
matrix-vector product that reads a decode step's weights.

Bytes counted as STREAM does (McCalpin, "STREAM: Sustainable Memory Bandwidth in High Performance Computers",
www.cs.virginia.edu/stream/ref.html): copy ``a = b`` moves 2 words per element (one read, one write), triad
``a = b + s*c`` moves 3 (two reads, one write). Write-allocate traffic is not counted, as in STREAM.

On CUDA, copy runs as an elementwise kernel (``torch.mul(b, 1.0, out=a)``: STREAM's copy is a compiled loop), not
``Tensor.copy_``: on an H100 ``copy_`` of a contiguous array goes through the driver's device-to-device memcpy,
which reads ~3,000 GB/s up to 256 MiB and 2,430 GB/s from 512 MiB up, while the kernel copy and triad hold
3,010-3,060 GB/s at every size (``benchmarks/bench_hbm_copy_cuda.py``, 2026-11-24). The profile reads the HBM
fraction off copy's largest size, so ``copy_`` put it at 0.73 instead of 0.90. On a CPU copy stays ``copy_`` (the
CPU closing loop prices its memory-bound ops by that curve).

``gemv`` (CUDA only) is ``y = x W^T`` for one bf16 row ``x`` against a weight ``W`` of the buffer's size (k = 4,096
columns), the product a batch-1 decode step runs on every weight (``torch.nn.functional.linear``'s layout); bytes =
W + x + y. Small buffers sit in L2; from well past the L2 size (50 MB on an H100) it measures the rate at which
cuBLAS streams weights from HBM, which the serving model's weight reads use when a profile carries it
(:func:`fmstack.perfmodel.efficiency.efficiency_from_profile`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fmstack.bench.device import kernel_timing
from fmstack.errors import InputError

KERNELS = {"copy": 2, "triad": 3}
"""STREAM kernel -> words moved per element (STREAM's counting)."""

GEMV_K = 4096
"""Columns of the gemv kernel's weight (Llama 3 8B's hidden size)."""

TRIALS = 5
"""Timed batches per kernel and size; the fastest is kept, as STREAM keeps the best of its NTIMES trials."""


def default_kernels(device: str) -> tuple[str, ...]:
    """copy and triad everywhere; gemv on a GPU (what it calibrates, the serving model's weight reads, is a GPU's)."""
    return ("copy", "triad", "gemv") if device == "cuda" else ("copy", "triad")


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryResult:
    """One kernel at one buffer size."""

    kernel: str
    buffer_bytes: int
    """Size of one array."""
    bytes_moved: int
    """Bytes the kernel reads and writes per call (STREAM's count)."""
    time_s: float
    """Seconds per call of the fastest timed batch (STREAM's best of NTIMES)."""
    bw_gbps: float
    pct_of_peak: float | None
    time_median_s: float | None = None
    """Median timed batch, seconds per call."""
    time_max_s: float | None = None
    """Slowest timed batch, seconds per call."""
    calls: int = 0
    """Calls per timed batch."""
    trials: int = 0
    """Timed batches."""
    warmup: int = 0
    """Untimed calls before the first batch."""


def buffer_sizes(device: str, quick: bool, max_bytes: int | None = None) -> list[int]:
    """Array sizes in bytes: 256 KiB .. 64 MiB on a CPU (crossing its caches), up to 1 GiB on a GPU."""
    top = 8 << 20 if quick else (64 << 20 if device == "cpu" else 1 << 30)
    if max_bytes is not None:
        if max_bytes < 1 << 12:
            raise InputError("max-bytes", f"{max_bytes} is too small; allowed: >= 4096")
        top = max_bytes
    sizes = []
    size = 256 << 10 if device == "cpu" else 1 << 20
    size = min(size, top)
    while size <= top:
        sizes.append(size)
        size *= 4
    return sizes


def run_memory(
    device: str,
    sizes: list[int],
    *,
    peak_gbps: float | None = None,
    min_time_s: float = 0.05,
    trials: int = TRIALS,
    on_step: Callable[[], None] | None = None,
    kernels: tuple[str, ...] | None = None,
) -> list[MemoryResult]:
    """Time ``kernels`` (default :func:`default_kernels`) at each size (the best of ``trials`` batches): copy and
    triad on float32 arrays of that size, gemv on a bf16 weight of that size (fp32 off CUDA); % of peak when the
    catalog gives one."""
    import torch

    chosen = kernels if kernels is not None else default_kernels(device)
    unknown = sorted(set(chosen) - {*KERNELS, "gemv"})
    if unknown:
        raise InputError("kernels", f"unknown {', '.join(unknown)}; allowed: copy, triad, gemv")
    results: list[MemoryResult] = []
    for size in sizes:
        n = max(1, size // 4)
        a = torch.empty(n, dtype=torch.float32, device=device)
        b = torch.ones(n, dtype=torch.float32, device=device)
        c = torch.full((n,), 2.0, dtype=torch.float32, device=device)

        def copy(a: torch.Tensor = a, b: torch.Tensor = b) -> None:
            if device == "cuda":
                torch.mul(b, 1.0, out=a)  # an elementwise kernel, not the driver's memcpy (module docstring)
            else:
                a.copy_(b)

        def triad(a: torch.Tensor = a, b: torch.Tensor = b, c: torch.Tensor = c) -> None:
            torch.add(b, c, alpha=3.0, out=a)

        calls: dict[str, tuple[Callable[[], None], int]] = {"copy": (copy, 2 * n * 4), "triad": (triad, 3 * n * 4)}
        if "gemv" in chosen:
            calls["gemv"] = _gemv(device, size)
        for kernel in (k for k in calls if k in chosen):
            call, moved = calls[kernel]
            t = kernel_timing(call, device, min_time_s=min_time_s, trials=trials)
            bw = moved / t.best_s / 1e9
            pct = 100.0 * bw / peak_gbps if peak_gbps else None
            results.append(
                MemoryResult(kernel=kernel, buffer_bytes=n * 4, bytes_moved=moved, time_s=t.best_s, bw_gbps=bw,
                             pct_of_peak=pct, time_median_s=t.median_s, time_max_s=t.worst_s, calls=t.calls,
                             trials=t.trials, warmup=t.warmup)
            )  # fmt: skip
            if on_step:
                on_step()
        if "triad" in chosen and float(a[0]) != 7.0:  # triad wrote a last: 1 + 3*2
            raise RuntimeError(f"triad produced {float(a[0])}, expected 7.0")
    return results


def _gemv(device: str, size: int) -> tuple[Callable[[], None], int]:
    """The gemv kernel for a weight of ``size`` bytes, and the bytes it moves (weight, input row, output row)."""
    import torch

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    width = 2 if device == "cuda" else 4
    rows = max(1, size // (width * GEMV_K))
    w = torch.randn(rows, GEMV_K, dtype=dtype, device=device)
    x = torch.randn(1, GEMV_K, dtype=dtype, device=device)
    y = torch.empty(1, rows, dtype=dtype, device=device)

    def gemv() -> None:
        torch.matmul(x, w.t(), out=y)

    return gemv, width * (rows * GEMV_K + GEMV_K + rows)
