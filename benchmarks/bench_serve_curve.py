"""Serving curve benchmark: 1,000 points of a latency / throughput curve, vectorised vs one point at a time.

    python3 benchmarks/bench_serve_curve.py [--points 1000] [--repeat 5] [--out benchmarks/results/...md]

The vectorised path is :func:`fmstack.perfmodel.inference.serve_curve` over an array of concurrencies (Llama 3.1
70B, tp 8, bf16, 2048/256 tokens on p5.48xlarge). The baseline, measured in the same run, is the same curve built
by calling :func:`fmstack.perfmodel.inference.estimate_serve` once per concurrency (a scalar Python loop).
Prints both wall times, the speed-up ratio, and whether the two agree to 1e-12. Goal: 1,000 points in <= 1 s.
Exit 1 if the goal is missed or the two disagree.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from fmstack.catalog import load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.perfmodel.inference import ServeConfig, deployment, estimate_serve, serve_curve

GOAL_S = 1.0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--points", type=int, default=1000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--out", type=Path, help="append the result (markdown) here")
    args = p.parse_args()
    cat = load_catalog()
    model = cat.model("llama3.1-70b")
    cluster = build_cluster(cat, "p5.48xlarge", 1)
    cfg = ServeConfig(tp=8, input_len=2048, output_len=256)
    conc = np.linspace(1, 2000, args.points).round()

    best_vec = float("inf")
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        d = deployment(model, cluster, cfg)  # included: a user builds the deployment once per curve
        curve = serve_curve(d, cfg, conc)
        best_vec = min(best_vec, time.perf_counter() - t0)

    t0 = time.perf_counter()
    loop = [
        estimate_serve(model, cluster, ServeConfig(tp=8, input_len=2048, output_len=256, concurrency=int(c)))
        for c in conc
    ]
    scalar_s = time.perf_counter() - t0
    ttft = np.array([e.ttft_s for e in loop])
    thr = np.array([e.output_tokens_per_s for e in loop])
    agree = bool(
        np.allclose(ttft, curve.ttft_s, rtol=1e-12) and np.allclose(thr, curve.output_tokens_per_s, rtol=1e-12)
    )
    ratio = scalar_s / best_vec
    lines = [
        f"serve curve benchmark {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.node()} "
        f"({platform.processor() or platform.machine()}, Python {platform.python_version()})",
        f"- vectorised serve_curve, {args.points} points: {best_vec * 1e3:.1f} ms (best of {args.repeat})",
        f"- baseline scalar loop of estimate_serve, same points: {scalar_s * 1e3:.0f} ms",
        f"- ratio (baseline / vectorised): {ratio:.0f}x; results agree to 1e-12: {agree}",
        f"- goal {args.points} points <= {GOAL_S:.0f} s: {'met' if best_vec <= GOAL_S else 'MISSED'}",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        with args.out.open("a", encoding="utf-8") as fh:
            fh.write(text + "\n\n")
    return 0 if agree and best_vec <= GOAL_S else 1


if __name__ == "__main__":
    sys.exit(main())
