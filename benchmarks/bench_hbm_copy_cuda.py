"""Why a 1 GiB float32 ``copy_`` read ~2.43 TB/s on an H100 when 256 MiB read ~3.0: copy paths by array size.

Usage (needs a CUDA GPU): python benchmarks/bench_hbm_copy_cuda.py

``Tensor.copy_`` of a contiguous same-dtype tensor (float32 and bf16), a kernel copy (``torch.mul(a, 1.0, out=b)``:
the same bytes, one read and one write per element) and STREAM's triad, each timed by CUDA-graph replay (fastest of
3 batches), GB/s as STREAM counts bytes. The baseline for each row is the triad of the same size in the same
process. Results: benchmarks/results/decode-loop-h100-2026-11-24/hbm-probe.txt.
"""

from __future__ import annotations

from collections.abc import Callable

from fmstack.bench.device import kernel_time_per_call_s


def rates(mib: int) -> dict[str, float]:
    import torch

    n = mib * (1 << 20) // 4
    a, c = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    b = torch.empty_like(a)
    x = a.to(torch.bfloat16)
    y = torch.empty_like(x)
    calls: dict[str, tuple[Callable[[], object], int]] = {
        "copy_": (lambda: b.copy_(a), 8 * n),
        "mul1": (lambda: torch.mul(a, 1.0, out=b), 8 * n),
        "triad": (lambda: torch.add(a, c, alpha=2.0, out=b), 12 * n),
        "bf16 copy_": (lambda: y.copy_(x), 4 * n),
    }
    return {k: moved / kernel_time_per_call_s(fn, "cuda", min_time_s=0.1, best_of=3) / 1e9
            for k, (fn, moved) in calls.items()}  # fmt: skip


def main() -> None:
    for mib in (64, 256, 512, 1024, 2048, 4096):
        r = rates(mib)
        ratio = "  ".join(f"{k} {v:6.0f} GB/s ({v / r['triad']:.2f} x triad)" for k, v in r.items() if k != "triad")
        print(f"{mib:5} MiB/array: triad {r['triad']:6.0f} GB/s  {ratio}", flush=True)


if __name__ == "__main__":
    main()
