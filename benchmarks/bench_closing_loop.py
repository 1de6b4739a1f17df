"""Closing the loop: calibrate on this CPU, predict the reference DDP step time, measure it, print the ratio.

Usage: python benchmarks/bench_closing_loop.py [--rounds 3] [--steps 3] [--repeats 1] [--markdown]

The reference workload is fmstack.workloads.gpt's GPT (bench.closing_loop.REFERENCE) under DDP on 2 gloo
processes with 1 thread each. The baseline is the measured median step time from the same run; the ratio is
predicted / measured (1.0 is a perfect prediction; issue 7 accepts 0.7..1.3). "ratio w/o overhead" is the same run's
prediction without the framework overhead (bench.predict_step.framework_overhead). "ratio copy-priced" is the same
run's prediction with every memory-bound op at the copy bandwidth, i.e. the predictor before the transcendental ops
(GELU, log-softmax, AdamW's sqrt: predict_step.MEASURED_OPS) were priced from their own measurement ("ops ms").
"ratio attn as GEMMs" is the same run's prediction with attention priced as its batched GEMMs, i.e. the predictor
before the fused scaled_dot_product_attention call was priced from its own forward + backward measurement ("attn ms").
"""

from __future__ import annotations

import argparse
import os
import platform
from datetime import UTC, datetime

from fmstack.bench.closing_loop import REFERENCE, REFERENCE_MICRO_BATCH, close_loop
from fmstack.bench.device import cpu_name
from fmstack.bench.predict_step import predict_step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="calibrate-then-train rounds")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per round")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--markdown", action="store_true", help="print a table row per repeat for results/")
    args = parser.parse_args()
    print(f"# {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {cpu_name()}, {os.cpu_count()} cores, {platform.platform()}")
    print(f"# workload: {REFERENCE}, micro-batch {REFERENCE_MICRO_BATCH} per rank, 2 gloo ranks x 1 thread")
    if args.markdown:
        print("| run | predicted ms | gemm ms | memory ms | ops ms | all-reduce ms | overhead ms | measured median ms | "
              "ratio | ratio w/o overhead | ratio copy-priced | others % | attn ms | attn as GEMMs ms | "
              "ratio attn as GEMMs | load |")  # fmt: skip
        print("|" + " --- |" * 16)
    for i in range(args.repeats):
        r = close_loop(rounds=args.rounds, steps_per_round=args.steps)
        p, m = r.prediction, r.measurement
        others = f"{100 * r.cpu.others_share:.1f}" if r.cpu else "-"
        copy = predict_step(REFERENCE, micro_batch=REFERENCE_MICRO_BATCH, num_ranks=m.num_ranks, profile=r.profile,
                            overhead_s=p.overhead_s, attention_call_s=r.attention_call_s)  # fmt: skip
        gemm_attn = predict_step(REFERENCE, micro_batch=REFERENCE_MICRO_BATCH, num_ranks=m.num_ranks,
                                 profile=r.profile, overhead_s=p.overhead_s, op_gbps=r.op_gbps)  # fmt: skip
        attn_as_gemms_s = gemm_attn.gemm_s - p.gemm_s
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        if args.markdown:
            print(f"| {i + 1} | {p.total_s * 1e3:.1f} | {p.gemm_s * 1e3:.1f} | {p.memory_s * 1e3:.1f} | "
                  f"{p.measured_ops_s * 1e3:.1f} | {p.allreduce_s * 1e3:.1f} | {p.overhead_s * 1e3:.1f} | "
                  f"{m.median_s * 1e3:.1f} | {r.ratio:.3f} | {p.work_s / m.median_s:.3f} | "
                  f"{copy.total_s / m.median_s:.3f} | {others} | {p.attention_s * 1e3:.2f} | "
                  f"{attn_as_gemms_s * 1e3:.2f} | {gemm_attn.total_s / m.median_s:.3f} | {load:.2f} |")  # fmt: skip
            continue
        print(
            f"predicted step : {p.total_s * 1e3:8.1f} ms  (GEMM {p.gemm_s * 1e3:.1f}, attention "
            f"{p.attention_s * 1e3:.1f}, memory-bound {p.memory_s * 1e3:.1f}, all-reduce {p.allreduce_s * 1e3:.1f}, "
            f"framework overhead {p.overhead_s * 1e3:.1f})"
        )
        print(
            f"  measured ops : {p.measured_ops_s * 1e3:.1f} ms of the memory-bound part ("
            + ", ".join(f"{k} {v:.1f} GB/s" for k, v in r.op_gbps.items())
            + f"; {(copy.memory_s - p.memory_s + p.measured_ops_s) * 1e3:.1f} ms at copy bandwidth)"
        )
        print(f"  attention    : {p.attention_s * 1e3:.2f} ms measured (forward {r.attention_fwd_s * 1e3:.2f} + "
              f"backward {(r.attention_call_s - r.attention_fwd_s) * 1e3:.2f} ms a layer); priced as GEMMs it was "
              f"{attn_as_gemms_s * 1e3:.2f} ms")  # fmt: skip
        print(f"  work         : {p.gemm_flops / 1e9:.2f} GFLOP, {p.memory_bytes / 1e6:.0f} MB moved, "
              f"{p.grad_bytes / 1e6:.1f} MB of gradients all-reduced")  # fmt: skip
        print(f"measured step  : {m.median_s * 1e3:8.1f} ms  (median of {len(m.step_times_s)}; "
              f"min {min(m.step_times_s) * 1e3:.1f}, max {max(m.step_times_s) * 1e3:.1f})")  # fmt: skip
        print(
            f"ratio predicted/measured: {r.ratio:.3f} (without the framework overhead {p.work_s / m.median_s:.3f}, "
            f"all memory-bound ops at copy bandwidth {copy.total_s / m.median_s:.3f}, "
            f"attention as GEMMs {gemm_attn.total_s / m.median_s:.3f}; load {load:.2f})"
        )
        if r.cpu is not None:
            print(f"machine        : {r.cpu.describe()}{'  DISTURBED' if r.cpu.disturbed else ''}")


if __name__ == "__main__":
    main()
