"""Checkpoint stress benchmark: SIGKILL the reference workload at random moments during async saves, N times
(default 100), resuming each time; then compare the final loss curve with an uninterrupted run.

    python3 benchmarks/bench_checkpoint_kill.py [--kills 100] [--seed 0] [--out benchmarks/results/...json]

Prints: kills survived, committed checkpoints verified complete, lost steps per kill (max, mean), the wall time per
kill-and-resume cycle against the baseline of one uninterrupted run measured in the same invocation (ratio), and
whether the final curve is bit-identical. Exit 1 if any invariant fails.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fmstack.workloads.metrics import read_loss_curve
from fmstack.workloads.stress import run_stress


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kills", type=int, default=100)
    p.add_argument("--interval", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sync", action="store_true", help="commit each save before the next step (--ckpt-sync)")
    p.add_argument("--out", type=Path, help="write the result as JSON here")
    args = p.parse_args()
    # each run is killed in its first or second save, so it advances at most two intervals: make room for all kills
    steps = 2 * args.interval * (args.kills + 2)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        argv = [sys.executable, "-m", "fmstack.workloads.train", "--steps", str(steps), "--dropout", "0.1"]
        argv += ["--batch-size", "4"]
        t0 = time.perf_counter()
        subprocess.run([*argv, "--metrics-file", str(work / "ref.jsonl")], check=True, capture_output=True, env=env)
        baseline_s = time.perf_counter() - t0
        res = run_stress(
            work / "s", kills=args.kills, steps=steps, interval=args.interval, seed=args.seed, sync=args.sync
        )
        same = read_loss_curve(work / "s" / "metrics.jsonl") == read_loss_curve(work / "ref.jsonl")
    lost = [k.lost_steps for k in res.kills]
    never_lost_committed = all(k.resumed_from >= k.last_committed_seen for k in res.kills)
    bounded = all(0 <= x <= (1 if args.sync else 2) * args.interval for x in lost)
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cpus",
        "kills": len(res.kills),
        "checkpoints_verified": res.checkpoints_verified,
        "interval_steps": args.interval,
        "lost_steps_max": max(lost),
        "lost_steps_mean": sum(lost) / len(lost),
        "never_lost_a_committed_checkpoint": never_lost_committed,
        "sync": args.sync,
        "lost_within_bound": bounded,
        "bound_steps": (1 if args.sync else 2) * args.interval,
        "final_curve_bit_identical": same,
        "baseline_run_s": round(baseline_s, 2),
        "wall_s": round(res.wall_s, 1),
        "cycle_over_baseline_ratio": round(res.wall_s / (len(res.kills) + 1) / baseline_s, 3),
    }
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if (never_lost_committed and bounded and same and len(res.kills) == args.kills) else 1


if __name__ == "__main__":
    sys.exit(main())
