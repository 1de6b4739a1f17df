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

from fmstack.bench.spawn import end_rank, free_port, run_ranks
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


class DDPStep:
    """The reference step on this rank (inside an initialised gloo process group): model, optimizer, data."""

    def __init__(self, cfg: GPTConfig, *, micro_batch: int, rank: int) -> None:
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP

        from fmstack.workloads.gpt import build_model

        torch.manual_seed(0)
        self.cfg = cfg
        self.micro_batch = micro_batch
        self.rank = rank
        self.model = DDP(build_model(cfg))
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3, foreach=True)
        self.num_params = sum(p.numel() for p in self.model.parameters())

    def run(self, step: int) -> float:
        """One training step (forward, loss, backward with DDP's all-reduce, AdamW); its seconds on this rank."""
        import torch.nn.functional as F

        from fmstack.workloads.gpt import synthetic_batch

        x, y = synthetic_batch(self.cfg, seed=0, step=step, rank=self.rank, batch_size=self.micro_batch)
        start = time.perf_counter()
        logits = self.model(x)
        loss = F.cross_entropy(logits.reshape(-1, self.cfg.vocab_size), y.reshape(-1))
        self.opt.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        self.opt.step()
        return time.perf_counter() - start


def slowest_rank(values: list[float]) -> list[float]:
    """Element-wise maximum over ranks (all ranks must call it with lists of the same length)."""
    import torch
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [float(v) for v in t.tolist()]


def _rank_main(rank: int, n: int, port: int, cfg: GPTConfig, batch: int, warmup: int, steps: int, threads: int,
               out: Any) -> None:  # fmt: skip
    import torch
    import torch.distributed as dist

    try:
        torch.set_num_threads(threads)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n)
        job = DDPStep(cfg, micro_batch=batch, rank=rank)
        times = [job.run(step) for step in range(warmup + steps)]
        slow = slowest_rank(times[warmup:])
        if rank == 0:
            out.put(("done", slow, job.num_params))
        del job  # the DDP model uses the group: release it before it is destroyed
    except Exception as exc:
        out.put(("error", f"rank {rank}: {type(exc).__name__}: {exc}"))
        raise
    end_rank(out)


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
