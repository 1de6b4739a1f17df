"""Router speed: `plan serve` with a router that simulates the replicas together against the default per-replica
check, same process.

Runs the README's plan (Llama 3.1 70B, 20 req/s of 2048/256 tokens, TTFT p99 0.5 s, ITL p99 0.05 s, ``--no-disagg``)
with ``--router round-robin`` (each candidate checked as one of its replicas, the path before session 16), then with
``least-loaded``, ``cache-aware`` and ``kv`` (every replica of a candidate simulated together,
:mod:`fmstack.perfmodel.inference_sim_fleet`), and with a 16-group shared-prefix workload; prints each wall time and
CPU time (the process's: steadier on a shared machine), the CPU time's ratio to round-robin's and the plan.
``--reference``: the joint cases again with every replica's stretch stopped at every arrival
(``simulate_fleet(lazy=False)``, the path before the lazy replicas), and the ratio of the two.
Usage: python benchmarks/bench_router.py [--repeat 1] [--reference]
"""

from __future__ import annotations

import argparse
import functools
import time
from unittest import mock

from fmstack.catalog import load_catalog
from fmstack.perfmodel import inference_open_loop
from fmstack.perfmodel.inference_disagg import SLO
from fmstack.perfmodel.inference_plan import ServePlan, plan_serve
from fmstack.perfmodel.inference_prefix import PrefixWorkload
from fmstack.perfmodel.inference_sim_fleet import simulate_fleet


def _plan(router: str, prefix: PrefixWorkload | None, *, lazy: bool = True) -> tuple[float, float, ServePlan]:
    """Wall and CPU seconds of the plan, and the plan."""
    cat = load_catalog()
    t0, c0 = time.perf_counter(), time.process_time()
    with mock.patch.object(inference_open_loop, "simulate_fleet", functools.partial(simulate_fleet, lazy=lazy)):
        plan = plan_serve(cat, cat.model("llama3.1-70b"), qps=20.0, input_len=2048, output_len=256,
                          slo=SLO(ttft_s=0.5, itl_s=0.05), search_disagg=False, router=router, prefix=prefix)  # fmt: skip
    return time.perf_counter() - t0, time.process_time() - c0, plan


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--reference", action="store_true", help="also the joint cases without the lazy replicas")
    args = ap.parse_args()
    groups = PrefixWorkload(groups=16, prefix_len=1536)
    cases = [("round-robin", None), ("least-loaded", None), ("cache-aware", None), ("kv", None),
             ("round-robin", groups), ("cache-aware", groups), ("kv", groups)]  # fmt: skip
    base = 0.0
    for router, prefix in cases:
        wall_s, cpu_s, plan = min((_plan(router, prefix) for _ in range(args.repeat)), key=lambda x: x[1])
        base = base or cpu_s
        b = plan.best
        sim = b.sim or {}
        label = router + (" + 16 prefix groups" if prefix else "")
        print(
            f"{label:32s} {wall_s:6.2f} s wall {cpu_s:6.2f} s CPU  x{cpu_s / base:5.2f}  {b.replicas} x tp {b.tp} "
            f"{b.precision} on {b.instance} ${b.cost_per_hour_usd:,.2f}/h  TTFT p99 "
            f"{sim.get('ttft_p99_s', float('nan')):.3f} s  ITL p99 {sim.get('itl_p99_s', float('nan')):.4f} s"
        )
        if args.reference and (router != "round-robin" or prefix is not None):
            _, ref_s, ref = min((_plan(router, prefix, lazy=False) for _ in range(args.repeat)), key=lambda x: x[1])
            same = "the same plan" if repr(ref) == repr(plan) else "PLANS DIFFER"
            print(f"{'  every stretch cut (lazy=False)':32s} {'':13s} {ref_s:6.2f} s CPU  lazy x{ref_s / cpu_s:4.2f} "
                  f"faster, {same}")  # fmt: skip


if __name__ == "__main__":
    main()
