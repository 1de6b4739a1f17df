"""Memory bench: achieved bandwidth of STREAM's copy and triad kernels over buffer sizes.

Bytes counted as STREAM does (McCalpin, "STREAM: Sustainable Memory Bandwidth in High Performance Computers",
www.cs.virginia.edu/stream/ref.html): copy ``a = b`` moves 2 words per element (one read, one write), triad
``a = b + s*c`` moves 3 (two reads, one write). Write-allocate traffic is not counted, as in STREAM.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fmstack.bench.device import kernel_timing
from fmstack.errors import InputError

KERNELS = {"copy": 2, "triad": 3}
"""kernel -> words moved per element (STREAM's counting)."""

TRIALS = 5
"""Timed batches per kernel and size; the fastest is kept, as STREAM keeps the best of its NTIMES trials. One batch
per point let a single disturbed batch stand for the plateau (a 1 GiB copy on one H100 lease read 2,439 GB/s against
~3,000 GB/s for triad and on another lease)."""


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
) -> list[MemoryResult]:
    """Time copy and triad on float32 arrays of each size (the best of ``trials`` batches); % of peak when the
    catalog gives one."""
    import torch

    results: list[MemoryResult] = []
    for size in sizes:
        n = max(1, size // 4)
        a = torch.empty(n, dtype=torch.float32, device=device)
        b = torch.ones(n, dtype=torch.float32, device=device)
        c = torch.full((n,), 2.0, dtype=torch.float32, device=device)

        def copy(a: torch.Tensor = a, b: torch.Tensor = b) -> None:
            a.copy_(b)

        def triad(a: torch.Tensor = a, b: torch.Tensor = b, c: torch.Tensor = c) -> None:
            torch.add(b, c, alpha=3.0, out=a)

        kernels: dict[str, Callable[[], None]] = {"copy": copy, "triad": triad}
        for kernel, call in kernels.items():
            t = kernel_timing(call, device, min_time_s=min_time_s, trials=trials)
            moved = KERNELS[kernel] * n * 4
            bw = moved / t.best_s / 1e9
            pct = 100.0 * bw / peak_gbps if peak_gbps else None
            results.append(
                MemoryResult(kernel=kernel, buffer_bytes=n * 4, bytes_moved=moved, time_s=t.best_s, bw_gbps=bw,
                             pct_of_peak=pct, time_median_s=t.median_s, time_max_s=t.worst_s, calls=t.calls,
                             trials=t.trials, warmup=t.warmup)
            )  # fmt: skip
            if on_step:
                on_step()
        if float(a[0]) != 7.0:  # triad ran last: 1 + 3*2
            raise RuntimeError(f"triad produced {float(a[0])}, expected 7.0")
    return results
