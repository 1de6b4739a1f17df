"""Router speed: `plan serve` with a router that simulates the replicas together against the default per-replica
check, same process.

Runs the README's plan (Llama 3.1 70B, 20 req/s of 2048/256 tokens, TTFT p99 0.5 s, ITL p99 0.05 s, ``--no-disagg``)
with ``--router round-robin`` (each candidate checked as one of its replicas, the path before session 16), then with
``least-loaded`` and ``cache-aware`` (every replica of a candidate simulated together,
:mod:`fmstack.perfmodel.inference_sim_fleet`), and with a 16-group shared-prefix workload; prints each wall time,
its ratio to round-robin's and the plan. Usage: python benchmarks/bench_router.py [--repeat 1]
"""

from __future__ import annotations

import argparse
import time

from fmstack.catalog import load_catalog
from fmstack.perfmodel.inference_disagg import SLO
from fmstack.perfmodel.inference_plan import ServePlan, plan_serve
from fmstack.perfmodel.inference_prefix import PrefixWorkload


def _plan(router: str, prefix: PrefixWorkload | None) -> tuple[float, ServePlan]:
    cat = load_catalog()
    t0 = time.perf_counter()
    plan = plan_serve(cat, cat.model("llama3.1-70b"), qps=20.0, input_len=2048, output_len=256,
                      slo=SLO(ttft_s=0.5, itl_s=0.05), search_disagg=False, router=router, prefix=prefix)  # fmt: skip
    return time.perf_counter() - t0, plan


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    groups = PrefixWorkload(groups=16, prefix_len=1536)
    cases = [("round-robin", None), ("least-loaded", None), ("cache-aware", None), ("round-robin", groups),
             ("cache-aware", groups)]  # fmt: skip
    base = 0.0
    for router, prefix in cases:
        best_s, plan = min((_plan(router, prefix) for _ in range(args.repeat)), key=lambda x: x[0])
        base = base or best_s
        b = plan.best
        sim = b.sim or {}
        label = router + (" + 16 prefix groups" if prefix else "")
        print(
            f"{label:34s} {best_s:6.2f} s  x{best_s / base:4.2f}  {b.replicas} x tp {b.tp} {b.precision} on "
            f"{b.instance} ${b.cost_per_hour_usd:,.2f}/h  TTFT p99 {sim.get('ttft_p99_s', float('nan')):.3f} s  "
            f"ITL p99 {sim.get('itl_p99_s', float('nan')):.4f} s"
        )


if __name__ == "__main__":
    main()
