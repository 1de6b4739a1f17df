"""Closing the loop on one CUDA GPU: calibrate GEMM and HBM bandwidth, predict the reference GPT step, measure it.

Usage: python benchmarks/bench_closing_loop_cuda.py [--preset medium] [--d-model N] [--layers N] [--batch 8]
       [--steps 20] [--json FILE]

The GPU twin of bench_closing_loop.py (which runs 2 gloo ranks on a CPU). Same predictor
(fmstack.bench.predict_step: every GEMM at the calibrated TFLOP/s for its FLOPs, every memory-bound op at the
calibrated bandwidth for its size, fp32 as the workload runs by default), same workload (fmstack.workloads.gpt under
DDP, AdamW foreach), here one rank on one GPU (NCCL process group of size 1, so DDP's bucket copies run as in a job).
The baseline is the measured median step time from the same run; the ratio is predicted / measured. The predictor
has no kernel-launch term, so a model too small to fill the GPU is expected to be predicted too fast: the script
prints the kernel count per step (from the PyTorch profiler) so the gap can be read against launch overhead.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from dataclasses import asdict, replace
from datetime import UTC, datetime

from fmstack.bench.device import resolve_device
from fmstack.bench.gemm import GemmShape, run_gemm
from fmstack.bench.memory import buffer_sizes, run_memory
from fmstack.bench.predict_step import predict_step, step_gemms
from fmstack.bench.profile import build_profile, catalog_peaks
from fmstack.catalog import load_catalog
from fmstack.workloads.gpt import PRESETS, build_model, synthetic_batch


def _measure(cfg, batch: int, warmup: int, steps: int) -> tuple[list[float], int, int]:  # type: ignore[no-untyped-def]
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("nccl", rank=0, world_size=1)
    dev = torch.device("cuda", 0)
    torch.manual_seed(0)
    model = DDP(build_model(cfg).to(dev), device_ids=[0])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    params = sum(p.numel() for p in model.parameters())

    def step(i: int) -> None:
        x, y = synthetic_batch(cfg, seed=0, step=i, rank=0, batch_size=batch)
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        loss = F.cross_entropy(model(x).reshape(-1, cfg.vocab_size), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for i in range(warmup):
        step(i)
    times = []
    for i in range(warmup, warmup + steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step(i)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        step(warmup + steps)
        torch.cuda.synchronize()
    kernels = sum(e.count for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA)
    dist.destroy_process_group()
    return times, params, kernels


def main() -> None:
    import torch

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="medium", choices=sorted(PRESETS))
    p.add_argument("--d-model", type=int)
    p.add_argument("--layers", type=int)
    p.add_argument("--heads", type=int)
    p.add_argument("--batch", type=int, default=8, help="sequences per step")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--min-time", type=float, default=0.05, help="seconds per GEMM / memory measurement")
    p.add_argument("--json", help="write the numbers here")
    args = p.parse_args()
    cfg = PRESETS[args.preset]
    over = {"d_model": args.d_model, "n_layers": args.layers, "n_heads": args.heads}
    cfg = replace(cfg, **{k: v for k, v in over.items() if v is not None})

    spec = resolve_device("cuda", load_catalog())
    peaks, mem_peak = catalog_peaks(spec)
    unique = dict.fromkeys((s.m, s.n, s.k) for s, _ in step_gemms(cfg, args.batch))
    squares = [(s, s, s) for s in (256, 512, 1024, 2048, 4096, 8192)]
    shapes = [GemmShape(m=m, n=n, k=k, label="step") for m, n, k in [*unique, *squares]]
    t0 = time.perf_counter()
    gemm = run_gemm("cuda", ["fp32"], shapes, peak_tflops=peaks, min_time_s=args.min_time)
    memory = run_memory("cuda", buffer_sizes("cuda", False), peak_gbps=mem_peak, min_time_s=args.min_time)
    calib_s = time.perf_counter() - t0
    profile = build_profile(spec, gemm=gemm, memory=memory, torch_version=str(torch.__version__))
    pred = predict_step(cfg, micro_batch=args.batch, num_ranks=1, profile=profile)
    times, params, kernels = _measure(cfg, args.batch, args.warmup, args.steps)
    measured = statistics.median(times)
    tokens = args.batch * cfg.seq_len
    out = {
        "date_utc": f"{datetime.now(UTC):%Y-%m-%d %H:%M}",
        "device": spec.name,
        "catalog_gpu": spec.catalog_gpu.name if spec.catalog_gpu else None,
        "torch": str(torch.__version__),
        "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "workload": {"preset": args.preset, **asdict(cfg)},
        "batch": args.batch,
        "params": params,
        "calibration_s": calib_s,
        "predicted_s": {"gemm": pred.gemm_s, "memory": pred.memory_s, "total": pred.total_s},
        "measured_step_s": {"median": measured, "min": min(times), "max": max(times), "n": len(times)},
        "ratio_predicted_over_measured": pred.total_s / measured,
        "cuda_kernels_per_step": kernels,
        "achieved_tflops": pred.gemm_flops / measured / 1e12,
        "tokens_per_s": tokens / measured,
        "gemm": [
            {"m": g.shape.m, "n": g.shape.n, "k": g.shape.k, "tflops": g.tflops, "pct": g.pct_of_peak} for g in gemm
        ],
        "memory": [{"kernel": m.kernel, "bytes": m.buffer_bytes, "gbps": m.bw_gbps} for m in memory],
    }
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1, default=str)
    print(f"# {out['date_utc']} UTC, {spec.name}, torch {torch.__version__}, TF32 matmul {out['tf32_matmul']}")
    print(f"# workload: {cfg}, batch {args.batch}, {params / 1e6:.1f} M params, fp32, 1 rank (NCCL, DDP)")
    print(f"calibration    : {calib_s:6.1f} s ({len(gemm)} GEMMs, {len(memory)} memory points)")
    print(
        f"predicted step : {pred.total_s * 1e3:8.2f} ms (GEMM {pred.gemm_s * 1e3:.2f}, memory {pred.memory_s * 1e3:.2f})"
    )
    print(f"measured step  : {measured * 1e3:8.2f} ms median of {len(times)} (min {min(times) * 1e3:.2f})")
    print(f"ratio          : {pred.total_s / measured:8.3f} predicted / measured; {kernels} CUDA kernels per step")


if __name__ == "__main__":
    main()
