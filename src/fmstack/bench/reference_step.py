"""Measure the step time of the reference training workload: the workloads' GPT under DDP on gloo processes.

A minimal, timed DDP loop (forward, cross-entropy, backward with DDP's bucketed gradient all-reduce, AdamW) over
``fmstack.workloads.gpt`` (GPTConfig, build_model, synthetic_batch). Each rank uses ``threads_per_rank`` intra-op
threads, so 2 ranks x 1 thread fill a 2-core machine without oversubscribing it. The step time of a step is the
slowest rank's; the result is the median over the timed steps (robust to a noisy neighbour on a shared machine).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

from fmstack.bench.spawn import free_port, run_ranks
from fmstack.errors import InputError
from fmstack.workloads.gpt import GPTConfig


@dataclass(frozen=True, kw_only=True, slots=True)
class StepMeasurement:
    """Measured step times of the reference workload."""

    num_ranks: int
    micro_batch: int
    """Sequences per rank per step."""
    step_times_s: tuple[float, ...]
    """Per timed step, the slowest rank's time."""
    num_params: int

    @property
    def median_s(self) -> float:
        return statistics.median(self.step_times_s)


def _rank_main(rank: int, n: int, port: int, cfg: GPTConfig, batch: int, warmup: int, steps: int, threads: int,
               out: Any) -> None:  # fmt: skip
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    from fmstack.workloads.gpt import build_model, synthetic_batch

    try:
        torch.set_num_threads(threads)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n)
        torch.manual_seed(0)
        model = DDP(build_model(cfg))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
        times = []
        for step in range(warmup + steps):
            x, y = synthetic_batch(cfg, seed=0, step=step, rank=rank, batch_size=batch)
            start = time.perf_counter()
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, cfg.vocab_size), y.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
            times.append(time.perf_counter() - start)
        t = torch.tensor(times[warmup:], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        if rank == 0:
            out.put(("done", t.tolist(), sum(p.numel() for p in model.parameters())))
        dist.destroy_process_group()
    except Exception as exc:
        out.put(("error", f"rank {rank}: {type(exc).__name__}: {exc}"))
        raise


def measure_step(
    cfg: GPTConfig,
    *,
    micro_batch: int,
    num_ranks: int = 2,
    warmup: int = 3,
    steps: int = 10,
    threads_per_rank: int = 1,
    timeout_s: float = 300.0,
) -> StepMeasurement:
    """Spawn ``num_ranks`` gloo processes, train ``warmup + steps`` steps, return the timed steps."""
    for name, value, low in (("micro-batch", micro_batch, 1), ("ranks", num_ranks, 1), ("steps", steps, 1),
                             ("threads", threads_per_rank, 1), ("warmup", warmup, 0)):  # fmt: skip
        if value < low:
            raise InputError(name, f"{value}; allowed: >= {low}")
    args = (num_ranks, free_port(), cfg, micro_batch, warmup, steps, threads_per_rank)
    times, num_params = run_ranks(_rank_main, args, num_ranks=num_ranks, what="reference step", timeout_s=timeout_s)
    return StepMeasurement(num_ranks=num_ranks, micro_batch=micro_batch, step_times_s=tuple(times),
                           num_params=int(num_params))  # fmt: skip
