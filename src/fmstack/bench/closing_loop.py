"""Closing the loop on this machine: calibrate, predict the reference workload's step time, measure it.

Calibration runs each rank's conditions: ``threads_per_rank`` torch threads for GEMM and memory (restored after),
the GEMM shapes the step actually uses plus a square sweep, STREAM copy over the op sizes the step touches, and a
``num_ranks``-process gloo all-reduce up to the gradient size.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from fmstack.bench.collectives import message_sizes, run_collectives
from fmstack.bench.device import DeviceSpec, cpu_name
from fmstack.bench.gemm import GemmShape, run_gemm
from fmstack.bench.memory import run_memory
from fmstack.bench.predict_step import StepPrediction, predict_step, step_gemms
from fmstack.bench.profile import build_profile
from fmstack.bench.reference_step import StepMeasurement, measure_step
from fmstack.bench.spawn import free_port, run_ranks
from fmstack.perfmodel.calibration import CalibrationProfile
from fmstack.workloads.gpt import GPTConfig, total_params

REFERENCE = GPTConfig(vocab_size=2048, seq_len=64, d_model=256, n_layers=2, n_heads=4)
"""The closing-loop workload: small enough for CI (about 0.1 s a step on one core), GEMM-dominated."""
REFERENCE_MICRO_BATCH = 8


@dataclass(frozen=True, kw_only=True, slots=True)
class LoopResult:
    """Prediction next to measurement."""

    profile: CalibrationProfile
    prediction: StepPrediction
    measurement: StepMeasurement

    @property
    def ratio(self) -> float:
        """predicted / measured step time."""
        return self.prediction.total_s / self.measurement.median_s


def _calib_rank(rank: int, n: int, port: int, shapes: list[GemmShape], sizes: list[int], threads: int,
                min_time_s: float, out: Any) -> None:  # fmt: skip
    """One of ``n`` processes measuring GEMM and memory at the same time as the others (barrier per size).

    Each size keeps the slowest rank's time: a synchronous data-parallel step moves at its slowest rank's pace.
    """
    import torch
    import torch.distributed as dist

    def slowest(time_s: float) -> float:
        t = torch.tensor([time_s], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t)

    try:
        torch.set_num_threads(threads)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n)
        gemm = []
        for shape in shapes:
            dist.barrier()
            (g,) = run_gemm("cpu", ["fp32"], [shape], min_time_s=min_time_s)
            t = slowest(g.time_s)
            gemm.append(replace(g, time_s=t, tflops=shape.flops / t / 1e12))
        memory = []
        for size in sizes:
            dist.barrier()
            for m in run_memory("cpu", [size], min_time_s=min_time_s):
                t = slowest(m.time_s)
                memory.append(replace(m, time_s=t, bw_gbps=m.bytes_moved / t / 1e9))
        dist.barrier()
        if rank == 0:
            out.put(("done", gemm, memory))
        dist.destroy_process_group()
    except Exception as exc:
        out.put(("error", f"rank {rank}: {type(exc).__name__}: {exc}"))
        raise


def calibrate_for(
    cfg: GPTConfig, *, micro_batch: int, num_ranks: int, threads_per_rank: int = 1, min_time_s: float = 0.05
) -> CalibrationProfile:
    """A CPU profile measured at the sizes the reference step uses, under the step's concurrency.

    GEMM and memory run in ``num_ranks`` processes at once (``threads_per_rank`` threads each), because that is
    what each DDP rank gets: its share of the cores, caches and DRAM bandwidth while the other ranks compute.
    """
    import torch

    shapes = list(dict.fromkeys((s.m, s.n, s.k) for s, _ in step_gemms(cfg, micro_batch)))
    squares = [(s, s, s) for s in (64, 128, 256, 512)]
    gemm_shapes = [GemmShape(m=m, n=n, k=k, label="step") for m, n, k in shapes + squares]
    mem_sizes = [16 << 10 << 2 * i for i in range(7)]
    args = (num_ranks, free_port(), gemm_shapes, mem_sizes, threads_per_rank, min_time_s)
    gemm, memory = run_ranks(_calib_rank, args, num_ranks=num_ranks, what="calibration", timeout_s=600)
    grad_bytes = total_params(cfg) * 4
    top = 1 << 20
    while top < min(grad_bytes, 25 << 20):
        top *= 4
    colls = run_collectives("cpu", ["all_reduce"], message_sizes("cpu", False, num_ranks, top), num_ranks=num_ranks,
                            min_time_s=min_time_s)  # fmt: skip
    spec = DeviceSpec(kind="cpu", name=cpu_name())
    return build_profile(spec, gemm=gemm, memory=memory, collectives=colls, num_threads=threads_per_rank,
                         concurrent_processes=num_ranks, torch_version=str(torch.__version__))  # fmt: skip


def close_loop(
    cfg: GPTConfig = REFERENCE,
    *,
    micro_batch: int = REFERENCE_MICRO_BATCH,
    num_ranks: int = 2,
    threads_per_rank: int = 1,
    steps: int = 10,
    profile: CalibrationProfile | None = None,
) -> LoopResult:
    """Calibrate (unless a profile is given), predict, then measure the real DDP step."""
    prof = profile or calibrate_for(
        cfg, micro_batch=micro_batch, num_ranks=num_ranks, threads_per_rank=threads_per_rank
    )
    prediction = predict_step(cfg, micro_batch=micro_batch, num_ranks=num_ranks, profile=prof)
    measurement = measure_step(cfg, micro_batch=micro_batch, num_ranks=num_ranks, steps=steps,
                               threads_per_rank=threads_per_rank)  # fmt: skip
    return LoopResult(profile=prof, prediction=prediction, measurement=measurement)
