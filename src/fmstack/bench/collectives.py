"""Collectives bench: a real multi-process torch.distributed job (gloo on CPU, NCCL on CUDA).

algbw and busbw exactly as NVIDIA nccl-tests defines them (doc/PERFORMANCE.md): algbw = S / t, where S is the
buffer size the collective is named by (all-reduce and broadcast: the buffer; all-gather: the gathered output;
reduce-scatter: the full input; all-to-all: one rank's send buffer), and busbw = algbw * factor with
factor = 2(n-1)/n for all-reduce, (n-1)/n for all-gather, reduce-scatter and all-to-all, and 1 for broadcast.
The per-iteration time is averaged over ranks (nccl-tests' default ``-a 1``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from fmstack.bench.spawn import end_rank, free_port, run_ranks
from fmstack.errors import InputError

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")
IN_PLACE = {"all_reduce", "broadcast"}
"""torch.distributed's all_reduce and broadcast work in place; the others write a separate output."""


def bus_factor(op: str, num_ranks: int) -> float:
    """busbw / algbw for ``op`` on ``num_ranks`` ranks (nccl-tests doc/PERFORMANCE.md)."""
    if op not in OPS:
        raise InputError("op", f"unknown collective {op!r}; allowed: {', '.join(OPS)}")
    if num_ranks < 1:
        raise InputError("ranks", f"{num_ranks} ranks; allowed: >= 1")
    n = num_ranks
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op == "broadcast":
        return 1.0
    return (n - 1) / n


def algbw_gbps(size_bytes: float, time_s: float) -> float:
    """algbw = S / t in GB/s (1e9 bytes/s), S as nccl-tests names it for the collective."""
    return size_bytes / time_s / 1e9


def busbw_gbps(op: str, size_bytes: float, time_s: float, num_ranks: int) -> float:
    return algbw_gbps(size_bytes, time_s) * bus_factor(op, num_ranks)


@dataclass(frozen=True, kw_only=True, slots=True)
class CollectiveResult:
    """One collective at one size, averaged over ranks."""

    op: str
    size_bytes: int
    count: int
    """Elements per rank as nccl-tests prints them (all-gather: send count; reduce-scatter: receive count)."""
    num_ranks: int
    backend: str
    time_s: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: int
    """Elements that differed from the expected result in a checked call (nccl-tests' #wrong)."""
    time_min_s: float | None = None
    """Fastest of the ``trials`` parts of the timed loop, seconds per iteration (averaged over ranks)."""
    time_max_s: float | None = None
    """Slowest part, seconds per iteration."""
    iters: int = 0
    """Timed iterations in all (``time_s`` is their mean, as nccl-tests reports)."""
    trials: int = 0
    """Parts the timed loop was split into for the spread."""
    warmup: int = 0
    """Untimed calls before the timed loop (the checked call, one warm-up call, the call that sizes the loop)."""


def message_sizes(device: str, quick: bool, num_ranks: int, max_bytes: int | None = None) -> list[int]:
    """Sizes (bytes, multiples of 4*num_ranks): 1 KiB..16 MiB on CPU (quick: ..1 MiB), ..1 GiB on CUDA."""
    top = (1 << 20) if quick else ((16 << 20) if device == "cpu" else (1 << 30))
    if max_bytes is not None:
        if max_bytes < 4 * num_ranks:
            raise InputError("max-bytes", f"{max_bytes} < 4 bytes x ranks({num_ranks}); allowed: >= {4 * num_ranks}")
        top = max_bytes
    step = 16 if quick else 4
    sizes: list[int] = []
    size = 1 << 10
    while size <= top:
        sizes.append(size - size % (4 * num_ranks))
        size *= step
    return sizes or [top - top % (4 * num_ranks)]


def _count(op: str, size: int, n: int) -> int:
    elems = size // 4
    return elems // n if op in ("all_gather", "reduce_scatter", "all_to_all") else elems


def _worker(rank: int, n: int, port: int, device: str, ops: list[str], sizes: list[int], min_time_s: float,
            trials: int, out: Any) -> None:  # fmt: skip
    """One rank: join the group, run every op at every size, report averages from rank 0."""
    import torch
    import torch.distributed as dist

    try:
        torch.set_num_threads(1)
        backend = "nccl" if device == "cuda" else "gloo"
        if device == "cuda":
            torch.cuda.set_device(rank)
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n)
        dev = torch.device(device, rank) if device == "cuda" else torch.device("cpu")
        results = []
        for op in ops:
            for size in sizes:
                results.append(time_collective(op, size, rank, n, dev, min_time_s, backend, trials=trials))
                if rank == 0:
                    out.put(("step", op, size))
        if rank == 0:
            out.put(("done", [asdict(r) for r in results]))
    except Exception as exc:  # reported to the parent, which raises it as one line
        out.put(("error", f"rank {rank}: {type(exc).__name__}: {exc}"))
        raise
    end_rank(out)


def time_collective(
    op: str, size: int, rank: int, n: int, dev: Any, min_time_s: float, backend: str, *, trials: int = 1
) -> CollectiveResult:
    """One collective at one size on this rank (every rank calls it): checked once, warmed up, then a timed loop
    of iterations split into ``trials`` consecutive parts, each timed (device synchronised at its ends)."""
    import torch
    import torch.distributed as dist

    elems = size // 4
    per = elems // n
    f32 = torch.float32
    if op == "all_reduce":
        buf = torch.full((elems,), float(rank + 1), dtype=f32, device=dev)
        expect = torch.full((elems,), n * (n + 1) / 2, dtype=f32, device=dev)
        got = buf

        def call() -> None:
            dist.all_reduce(buf)
    elif op == "broadcast":
        buf = torch.full((elems,), 1.0 if rank == 0 else 0.0, dtype=f32, device=dev)
        expect = torch.ones(elems, dtype=f32, device=dev)
        got = buf

        def call() -> None:
            dist.broadcast(buf, src=0)
    elif op == "all_gather":
        src = torch.full((per,), float(rank + 1), dtype=f32, device=dev)
        got = torch.empty(per * n, dtype=f32, device=dev)
        expect = torch.arange(1, n + 1, dtype=f32, device=dev).repeat_interleave(per)
        # torch 2.13 renamed all_gather_into_tensor to all_gather_single (the old name warns on every rank)
        ag = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)

        def call() -> None:
            ag(got, src)
    elif op == "reduce_scatter":
        src = torch.full((per * n,), float(rank + 1), dtype=f32, device=dev)
        got = torch.empty(per, dtype=f32, device=dev)
        expect = torch.full((per,), n * (n + 1) / 2, dtype=f32, device=dev)

        # torch 2.13 renamed reduce_scatter_tensor to reduce_scatter_single (the old name warns)
        rs = getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)

        def call() -> None:
            rs(got, src)
    else:  # all_to_all: rank r sends chunk j = r*n + j to rank j, so rank r receives j*n + r from rank j
        src = (rank * n + torch.arange(n, dtype=f32, device=dev)).repeat_interleave(per)
        got = torch.empty(per * n, dtype=f32, device=dev)
        expect = (torch.arange(n, dtype=f32, device=dev) * n + rank).repeat_interleave(per)

        def call() -> None:
            dist.all_to_all_single(got, src)

    call()  # the checked call, then warm-up
    wrong = torch.tensor([int((got != expect).sum())], dtype=torch.int64, device=dev)
    dist.all_reduce(wrong)
    call()
    iters = max(trials, _agree_iters(call, dev, min_time_s))
    parts = [iters // trials + (1 if i < iters % trials else 0) for i in range(trials)]
    _sync(dev)
    dist.barrier()
    part_s = []
    start = time.perf_counter()
    for count in parts:
        part_start = time.perf_counter()
        for _ in range(count):
            call()
        if trials > 1:
            _sync(dev)
        part_s.append((time.perf_counter() - part_start) / count)
    _sync(dev)
    per_iter = torch.tensor([(time.perf_counter() - start) / iters, *part_s], dtype=torch.float64, device=dev)
    dist.all_reduce(per_iter)
    mean = [float(v) / n for v in per_iter.tolist()]
    time_s = mean[0]
    return CollectiveResult(op=op, size_bytes=size, count=_count(op, size, n), num_ranks=n, backend=backend,
                            time_s=time_s, algbw_gbps=algbw_gbps(size, time_s),
                            busbw_gbps=busbw_gbps(op, size, time_s, n), wrong=int(wrong), time_min_s=min(mean[1:]),
                            time_max_s=max(mean[1:]), iters=iters, trials=trials, warmup=3)  # fmt: skip


def _sync(dev: Any) -> None:
    import torch

    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _agree_iters(call: Callable[[], None], dev: Any, min_time_s: float) -> int:
    """Iterations for ``min_time_s``, from the slowest rank's single-call time, so every rank runs the same."""
    import torch
    import torch.distributed as dist

    _sync(dev)
    start = time.perf_counter()
    call()
    _sync(dev)
    t = torch.tensor([time.perf_counter() - start], dtype=torch.float64, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return max(3, min(1000, int(min_time_s / max(float(t), 1e-9)) + 1))


def run_collectives(
    device: str,
    ops: list[str],
    sizes: list[int],
    *,
    num_ranks: int = 2,
    min_time_s: float = 0.05,
    trials: int = 1,
    timeout_s: float = 600.0,
    on_step: Callable[[], None] | None = None,
) -> list[CollectiveResult]:
    """Spawn ``num_ranks`` processes (torch.multiprocessing, spawn) that run the collectives; rank 0 reports."""
    for op in ops:
        bus_factor(op, num_ranks)
    if num_ranks < 2:
        raise InputError("ranks", f"{num_ranks}; a collective needs at least 2 processes; allowed: >= 2")
    if device == "cuda":
        import torch

        have = torch.cuda.device_count()
        if have < num_ranks:
            raise InputError("ranks", f"{num_ranks} ranks but {have} CUDA devices; allowed: 2..{have}")
    (rows,) = run_ranks(_worker, (num_ranks, free_port(), device, ops, sizes, min_time_s, trials), num_ranks=num_ranks,
                        what="collectives bench", timeout_s=timeout_s, on_step=on_step)  # fmt: skip
    return [CollectiveResult(**d) for d in rows]


def format_nccl_tests(results: list[CollectiveResult]) -> str:
    """Text in nccl-tests' column layout (one table per op; the in-place or out-of-place column group)."""
    lines: list[str] = []
    for op in dict.fromkeys(r.op for r in results):
        rows = [r for r in results if r.op == op]
        mode = "in-place" if op in IN_PLACE else "out-of-place"
        n, backend = rows[0].num_ranks, rows[0].backend
        lines.append(f"# {op}  nranks {n}  backend {backend}")
        lines.append(f"# {'':10}  {'':12}  {'':8}  {'':6}  {'':6}  {mode:^32}")
        lines.append(
            f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}  {'time':>7}  {'algbw':>6}  "
            f"{'busbw':>6} {'#wrong':>6}"
        )
        lines.append(
            f"# {'(B)':>10}  {'(elements)':>12}  {'':8}  {'':6}  {'':6}  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}"
        )
        for r in rows:
            redop = "sum" if op in ("all_reduce", "reduce_scatter") else "none"
            root = 0 if op == "broadcast" else -1
            t_us = r.time_s * 1e6
            t = f"{t_us:7.2f}" if t_us < 1e4 else f"{t_us:7.0f}"
            lines.append(
                f"{r.size_bytes:12d}  {r.count:12d}  {'float':>8}  {redop:>6}  {root:6d}  {t}  "
                f"{r.algbw_gbps:6.2f}  {r.busbw_gbps:6.2f}  {r.wrong:5d}"
            )
        avg = sum(r.busbw_gbps for r in rows) / len(rows)
        lines.append(f"# Avg bus bandwidth    : {avg:g}")
        if all(r.trials for r in rows):
            lines.append(f"# spread: the timed loop in {rows[0].trials} parts, per-iteration time of the fastest and "
                         f"slowest part (us), after {rows[0].warmup} untimed calls")  # fmt: skip
            lines.append(f"# {'size':>10}  {'iters':>7}  {'min':>9}  {'max':>9}")
            for r in rows:
                lo, hi = (r.time_min_s or 0.0) * 1e6, (r.time_max_s or 0.0) * 1e6
                lines.append(f"# {r.size_bytes:10d}  {r.iters:7d}  {lo:9.2f}  {hi:9.2f}")
        lines.append("#")
    return "\n".join(lines)
