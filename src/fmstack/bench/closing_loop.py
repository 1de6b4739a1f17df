"""Closing the loop on this machine: calibrate, predict the reference workload's step time, measure it.

One job of ``num_ranks`` gloo processes (``threads_per_rank`` threads each) does both, interleaved in rounds:
calibrate (GEMM at the step's shapes plus a square sweep, STREAM copy over the op sizes the step touches, gloo
all-reduce up to the gradient size, the step of the workload's size-negligible twin for the framework overhead,
the step's transcendental elementwise ops at its own sizes, its fused attention call forward and backward at its
own shapes), then train a few real DDP steps; repeat. Interleaving matters on a shared
machine: calibration and measurement see the same load, instead of the load of two different minutes. GEMM and
memory run in all ranks at once, as they do in the step (each rank's share of cores, caches and DRAM), and each
size keeps the slowest rank's time: a synchronous data-parallel step moves at its slowest rank's pace.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from fmstack.bench.collectives import CollectiveResult, message_sizes, time_collective
from fmstack.bench.concurrent import gemm_slowest, memory_slowest, slowest
from fmstack.bench.device import DeviceSpec, cpu_name, time_calls
from fmstack.bench.gemm import GemmResult, GemmShape
from fmstack.bench.interference import CpuShare, CpuWatch
from fmstack.bench.memory import MemoryResult
from fmstack.bench.predict_step import (
    TWIN_MICRO_BATCH,
    StepPrediction,
    framework_overhead,
    labelled_memory_ops,
    overhead_twin,
    predict_step,
    step_gemms,
)
from fmstack.bench.profile import build_profile
from fmstack.bench.reference_step import DDPStep, StepMeasurement, slowest_rank
from fmstack.bench.spawn import end_rank, free_port, run_ranks
from fmstack.errors import InputError
from fmstack.perfmodel.calibration import CalibrationProfile
from fmstack.workloads.gpt import GPTConfig, total_params

REFERENCE = GPTConfig(vocab_size=2048, seq_len=64, d_model=256, n_layers=2, n_heads=4)
"""The closing-loop workload: small enough for CI (about 0.15 s a step on one core), GEMM-dominated."""
REFERENCE_MICRO_BATCH = 8


@dataclass(frozen=True, kw_only=True, slots=True)
class LoopResult:
    """Prediction next to measurement."""

    profile: CalibrationProfile
    prediction: StepPrediction
    measurement: StepMeasurement
    cpu: CpuShare | None = None
    """What other processes and the hypervisor took of the machine during the job (None off Linux)."""
    op_gbps: Mapping[str, float] = field(default_factory=dict)
    """Measured rate of each transcendental op at the step's sizes (``predict_step.MEASURED_OPS``), mean over rounds;
    the prediction prices those ops at it."""
    attention_fwd_s: float = 0.0
    """One layer's ``scaled_dot_product_attention`` forward at the step's shapes (slowest rank, mean over rounds)."""
    attention_call_s: float = 0.0
    """The same call's forward + backward: the prediction prices attention at it once per layer."""

    @property
    def ratio(self) -> float:
        """predicted / measured step time."""
        return self.prediction.total_s / self.measurement.median_s


@dataclass(frozen=True, kw_only=True, slots=True)
class _Plan:
    cfg: GPTConfig
    micro_batch: int
    shapes: list[GemmShape]
    mem_sizes: list[int]
    ar_sizes: list[int]
    rounds: int
    steps_per_round: int
    warmup: int
    threads: int
    min_time_s: float


_Round = tuple[
    list[GemmResult], list[MemoryResult], list[CollectiveResult], float, dict[str, float], tuple[float, float]
]


TWIN_STEPS = 10
"""Timed steps of the size-negligible twin per round (about 4 ms each on the 2-vCPU VM); a fixed count, because
every rank must run the same number of DDP steps."""


def _twin_step_s(twin: DDPStep) -> float:
    """Median step time of the size-negligible twin (one untimed step first), the slowest rank's."""
    import torch.distributed as dist

    twin.run(0)
    dist.barrier()
    return slowest(statistics.median(twin.run(i) for i in range(TWIN_STEPS)))


OP_MIN_TIME_S = 0.015
"""Shortest timed batch of each transcendental op (:func:`_op_rates`) and attention call (:func:`_attention_s`): with
the doubling of ``time_calls`` about 0.03-0.05 s per op; 0.16-0.26 s per round for the five ops and about 0.05 s for
attention's forward and forward + backward on the 2-vCPU VM, warm and quiet (measured 2026-11-24)."""


def _measured_ops(cfg: GPTConfig, micro_batch: int, num_params: int) -> dict[str, Callable[[], object]]:
    """The ops of ``predict_step.MEASURED_OPS`` as the step calls them, at its own tensor sizes (fp32): GELU on the
    (tokens x ffn) activation, log-softmax on the (tokens x vocab) logits, AdamW's sqrt on all parameters as one
    flat tensor (the copy curve prices that pass at the same flat size)."""
    import torch
    import torch.nn.functional as F

    n_tok, f = micro_batch * cfg.seq_len, cfg.ffn_mult * cfg.d_model
    g = torch.Generator().manual_seed(0)
    h, dh = torch.randn(n_tok, f, generator=g), torch.randn(n_tok, f, generator=g)
    z, dz = torch.randn(n_tok, cfg.vocab_size, generator=g), torch.randn(n_tok, cfg.vocab_size, generator=g)
    logp = torch.log_softmax(z, -1)
    v = torch.rand(num_params, generator=g)
    return {
        "gelu": lambda: F.gelu(h),
        "gelu_backward": lambda: torch.ops.aten.gelu_backward(dh, h),
        "log_softmax": lambda: torch.log_softmax(z, -1),
        "log_softmax_backward": lambda: torch.ops.aten._log_softmax_backward_data(dz, logp, 1, torch.float32),
        "adamw_sqrt": lambda: torch.sqrt(v),
    }


def _op_rates(plan: _Plan, num_params: int) -> dict[str, float]:
    """GB/s of each transcendental op at the step's sizes (bytes as ``labelled_memory_ops`` counts them), timed on
    all ranks at once after a barrier, the slowest rank's."""
    import torch.distributed as dist

    size = {label: b for label, b, _ in labelled_memory_ops(plan.cfg, plan.micro_batch, num_params) if label}
    rates = {}
    for label, fn in _measured_ops(plan.cfg, plan.micro_batch, num_params).items():
        dist.barrier()
        t = slowest(time_calls(fn, "cpu", min_time_s=OP_MIN_TIME_S).best_s)
        rates[label] = size[label] / t / 1e9
    return rates


def _attention_calls(cfg: GPTConfig, micro_batch: int) -> tuple[Callable[[], object], Callable[[], object]]:
    """The step's attention call (workloads.gpt's Block: causal ``scaled_dot_product_attention`` on q, k, v viewed
    as (batch, heads, T, head_dim) out of the qkv projection's (batch, T, 3 d) output, fp32), forward and forward +
    backward. q, k, v are leaves with the step's strides, so the backward is the attention kernel's alone: the
    split's and the re-layout's copies around it are priced as memory-bound ops."""
    import torch
    import torch.nn.functional as F

    b, t, d, h = micro_batch, cfg.seq_len, cfg.d_model, cfg.n_heads
    g = torch.Generator().manual_seed(0)
    shape = (b, t, h, d // h)
    qkv = torch.randn(b, t, 3 * d, generator=g)
    q, k, v = (qkv[:, :, i * d : (i + 1) * d].view(shape).transpose(1, 2).detach().requires_grad_() for i in range(3))
    dy = torch.randn(shape, generator=g).transpose(1, 2)  # the gradient arrives through the output's transpose

    def fwd() -> object:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def fwd_bwd() -> object:
        return torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v), dy)

    return fwd, fwd_bwd


def _attention_s(plan: _Plan) -> tuple[float, float]:
    """Seconds of one attention forward and of forward + backward at the step's shapes (:func:`_attention_calls`),
    timed on all ranks at once after a barrier, the slowest rank's."""
    import torch.distributed as dist

    out = []
    for fn in _attention_calls(plan.cfg, plan.micro_batch):
        dist.barrier()
        out.append(slowest(time_calls(fn, "cpu", min_time_s=OP_MIN_TIME_S).best_s))
    return out[0], out[1]


def _calibrate_round(plan: _Plan, rank: int, n: int, twin: DDPStep, num_params: int) -> _Round:
    import torch

    gemm = [gemm_slowest("fp32", shape, plan.min_time_s, None) for shape in plan.shapes]
    memory = [m for size in plan.mem_sizes for m in memory_slowest(size, plan.min_time_s)]
    colls = [time_collective("all_reduce", size, rank, n, torch.device("cpu"), plan.min_time_s, "gloo")
             for size in plan.ar_sizes]  # fmt: skip
    return gemm, memory, colls, _twin_step_s(twin), _op_rates(plan, num_params), _attention_s(plan)


def _loop_rank(rank: int, n: int, port: int, plan: _Plan, out: Any) -> None:
    import torch
    import torch.distributed as dist

    try:
        torch.set_num_threads(plan.threads)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n)
        job = DDPStep(plan.cfg, micro_batch=plan.micro_batch, rank=rank)
        twin = DDPStep(overhead_twin(plan.cfg), micro_batch=TWIN_MICRO_BATCH, rank=rank)
        step = 0
        for _ in range(plan.warmup):
            job.run(step)
            step += 1
        rounds = []
        times: list[float] = []
        for _ in range(plan.rounds):
            rounds.append(_calibrate_round(plan, rank, n, twin, job.num_params))
            dist.barrier()
            mine = []
            for _ in range(plan.steps_per_round):
                mine.append(job.run(step))
                step += 1
            times += slowest_rank(mine)
        if rank == 0:
            out.put(("done", rounds, times, job.num_params))
        del job, twin  # the DDP models use the group: release them before it is destroyed
    except Exception as exc:
        out.put(("error", f"rank {rank}: {type(exc).__name__}: {exc}"))
        raise
    end_rank(out)


def close_loop(
    cfg: GPTConfig = REFERENCE,
    *,
    micro_batch: int = REFERENCE_MICRO_BATCH,
    num_ranks: int = 2,
    threads_per_rank: int = 1,
    rounds: int = 3,
    steps_per_round: int = 3,
    warmup: int = 3,
    min_time_s: float = 0.05,
) -> LoopResult:
    """Calibrate and measure in one interleaved job, then predict from the calibration and compare."""
    import torch

    for name, value in (("rounds", rounds), ("steps", steps_per_round), ("ranks", num_ranks - 1)):
        if value < 1:
            raise InputError(name, f"{value}; allowed: >= 1 (ranks >= 2)")
    unique = dict.fromkeys((s.m, s.n, s.k) for s, _ in step_gemms(cfg, micro_batch))
    squares = [(s, s, s) for s in (64, 128, 256, 512)]
    grad_bytes = total_params(cfg) * 4
    top = 1 << 20
    while top < min(grad_bytes, 25 << 20):
        top *= 4
    plan = _Plan(cfg=cfg, micro_batch=micro_batch, shapes=[GemmShape(m=m, n=n, k=k, label="step")
                 for m, n, k in [*unique, *squares]], mem_sizes=[16 << 10 << 2 * i for i in range(7)],
                 ar_sizes=message_sizes("cpu", False, num_ranks, top), rounds=rounds, steps_per_round=steps_per_round,
                 warmup=warmup, threads=threads_per_rank, min_time_s=min_time_s)  # fmt: skip
    with CpuWatch() as watch:
        per_round, times, num_params = run_ranks(_loop_rank, (num_ranks, free_port(), plan), num_ranks=num_ranks,
                                                 what="closing loop", timeout_s=900)  # fmt: skip
    gemm = [replace(g, time_s=t, tflops=g.shape.flops / t / 1e12)
            for g, t in zip(per_round[0][0], _mean_over([r[0] for r in per_round]), strict=True)]  # fmt: skip
    memory = [replace(m, time_s=t, bw_gbps=m.bytes_moved / t / 1e9)
              for m, t in zip(per_round[0][1], _mean_over([r[1] for r in per_round]), strict=True)]  # fmt: skip
    colls = [replace(c, time_s=t, algbw_gbps=c.size_bytes / t / 1e9, busbw_gbps=c.busbw_gbps * c.time_s / t)
             for c, t in zip(per_round[0][2], _mean_over([r[2] for r in per_round]), strict=True)]  # fmt: skip
    spec = DeviceSpec(kind="cpu", name=cpu_name())
    profile = build_profile(spec, gemm=gemm, memory=memory, collectives=colls, num_threads=threads_per_rank,
                            concurrent_processes=num_ranks, torch_version=str(torch.__version__))  # fmt: skip
    twin_s = statistics.fmean(r[3] for r in per_round)
    overhead_s = framework_overhead(cfg, twin_step_s=twin_s, num_ranks=num_ranks, profile=profile)
    # each op's rate over the rounds: its bytes over its mean time, as for the curves above
    op_gbps = {k: 1 / statistics.fmean(1 / r[4][k] for r in per_round) for k in per_round[0][4]}
    attention_fwd_s, attention_call_s = (statistics.fmean(r[5][i] for r in per_round) for i in (0, 1))
    prediction = predict_step(cfg, micro_batch=micro_batch, num_ranks=num_ranks, profile=profile,
                              overhead_s=overhead_s, op_gbps=op_gbps, attention_call_s=attention_call_s)  # fmt: skip
    measurement = StepMeasurement(num_ranks=num_ranks, micro_batch=micro_batch, step_times_s=tuple(times),
                                  num_params=int(num_params))  # fmt: skip
    return LoopResult(profile=profile, prediction=prediction, measurement=measurement, cpu=watch.result,
                      op_gbps=op_gbps, attention_fwd_s=attention_fwd_s, attention_call_s=attention_call_s)  # fmt: skip


def _mean_over(rounds: list[list[Any]]) -> list[float]:
    """Mean ``time_s`` of each entry over the rounds (each round lists the same sizes in the same order)."""
    return [statistics.fmean(r[i].time_s for r in rounds) for i in range(len(rounds[0]))]
