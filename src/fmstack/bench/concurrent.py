"""GEMM and memory measured in several processes at once: the per-rank rates of a data-parallel job on a CPU.

On a CPU, N data-parallel ranks share the cores, caches and DRAM; a rate measured by one process alone overstates
what each rank gets. Here N processes (gloo group, ``threads`` torch threads each) run every size together after
a barrier, and each size keeps the slowest process's time, because a synchronous step moves at its slowest
rank's pace.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from fmstack.bench.gemm import GemmResult, GemmShape, run_gemm
from fmstack.bench.memory import MemoryResult, run_memory
from fmstack.bench.spawn import end_rank, free_port, run_ranks


def slowest(time_s: float) -> float:
    """The largest ``time_s`` over the ranks of the current process group."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([time_s], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t)


def gemm_slowest(dtype: str, shape: GemmShape, min_time_s: float, peak: float | None) -> GemmResult:
    """One GEMM timed on every rank at once; the slowest rank's time."""
    import torch.distributed as dist

    dist.barrier()
    (g,) = run_gemm("cpu", [dtype], [shape], min_time_s=min_time_s)
    t = slowest(g.time_s)
    tflops = shape.flops / t / 1e12
    return replace(g, time_s=t, tflops=tflops, pct_of_peak=100.0 * tflops / peak if peak else None, time_min_s=t,
                   time_max_s=t)  # fmt: skip


def memory_slowest(size: int, min_time_s: float) -> list[MemoryResult]:
    """copy and triad at one size on every rank at once; the slowest rank's times."""
    import torch.distributed as dist

    dist.barrier()
    out = []
    # one batch, not the best of several: the ranks' batches must overlap to measure the contention a step sees
    for m in run_memory("cpu", [size], min_time_s=min_time_s, trials=1):
        t = slowest(m.time_s)
        out.append(replace(m, time_s=t, bw_gbps=m.bytes_moved / t / 1e9, time_median_s=t, time_max_s=t))
    return out


def _rank(rank: int, n: int, port: int, dtypes: list[str], shapes: list[GemmShape], sizes: list[int], threads: int,
          min_time_s: float, out: Any) -> None:  # fmt: skip
    import torch
    import torch.distributed as dist

    try:
        torch.set_num_threads(threads)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n)
        gemm = []
        for dtype in dtypes:
            for shape in shapes:
                gemm.append(gemm_slowest(dtype, shape, min_time_s, None))
                if rank == 0:
                    out.put(("step",))
        memory = []
        for size in sizes:
            memory += memory_slowest(size, min_time_s)
            if rank == 0:
                out.put(("step",))
                out.put(("step",))
        if rank == 0:
            out.put(("done", gemm, memory))
    except Exception as exc:
        out.put(("error", f"rank {rank}: {type(exc).__name__}: {exc}"))
        raise
    end_rank(out)


def run_concurrent(
    dtypes: list[str],
    shapes: list[GemmShape],
    sizes: list[int],
    *,
    procs: int,
    threads: int = 1,
    min_time_s: float = 0.05,
    on_step: Callable[[], None] | None = None,
) -> tuple[list[GemmResult], list[MemoryResult]]:
    """GEMM (every dtype x shape) and memory (every size) on the CPU in ``procs`` processes at once."""
    gemm, memory = run_ranks(_rank, (procs, free_port(), dtypes, shapes, sizes, threads, min_time_s), num_ranks=procs,
                             what="concurrent bench", timeout_s=1800, on_step=on_step)  # fmt: skip
    return list(gemm), list(memory)
