"""`fmstack plan rl` search time: the bound-pruned search against the exhaustive one (every point estimated), same
process, same cases; checks that both rank the same rows with the same step times, and prints the wall times, the
points each priced and the ratio. Usage: python benchmarks/bench_plan_rl.py [--repeat 2] [--top 10]
"""

from __future__ import annotations

import argparse
import time

from fmstack.catalog import load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.perfmodel.rl import RLConfig
from fmstack.perfmodel.rl_plan import RLPlan, plan_rl

CASES = [
    ("llama3.1-8b", 2, RLConfig(), 2),
    ("llama3.1-8b", 8, RLConfig(), 2),
    ("llama3.1-70b", 4, RLConfig(), 1),
    (
        "llama3.1-70b",
        4,
        RLConfig(prompts_per_step=64, prompt_len=256, response_len=8192, reference=False, old_logprob=False),
        2,
    ),
]


def _timed(case: tuple[str, int, RLConfig, int], top: int, prune: bool) -> tuple[float, RLPlan]:
    cat = load_catalog(None)
    model, nodes, base, age = case
    t0 = time.perf_counter()
    plan = plan_rl(cat.model(model), [build_cluster(cat, "p5.48xlarge", nodes)], base, top=top,
                   max_trajectory_age=age, prune=prune)  # fmt: skip
    return time.perf_counter() - t0, plan


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=2, help="pruned/exhaustive pairs, alternating (the VM is shared)")
    ap.add_argument("--top", type=int, default=10)
    args = ap.parse_args()
    total_p = total_e = 0.0
    for case in CASES:
        best_p = best_e = float("inf")
        for _ in range(args.repeat):
            tp, pruned = _timed(case, args.top, True)
            te, full = _timed(case, args.top, False)
            best_p, best_e = min(best_p, tp), min(best_e, te)
        same = [(r.point, r.estimate.step_time_s) for r in pruned.ranked] == [
            (r.point, r.estimate.step_time_s) for r in full.ranked
        ]
        assert same, f"{case[:2]}: the pruned search ranked other rows"
        total_p, total_e = total_p + best_p, total_e + best_e
        print(f"{case[0]} x {case[1]} nodes (age {case[3]}, response {case[2].response_len}): {pruned.considered} "
              f"points; pruned {best_p:.2f} s ({pruned.evaluated} estimated), exhaustive {best_e:.2f} s "
              f"({full.evaluated} estimated): {best_e / best_p:.1f}x, best {pruned.best.point.placement.label} "
              f"{pruned.best.estimate.step_time_s:.2f} s in both")  # fmt: skip
    print(f"all cases: pruned {total_p:.2f} s, exhaustive {total_e:.2f} s: {total_e / total_p:.1f}x")


if __name__ == "__main__":
    main()
