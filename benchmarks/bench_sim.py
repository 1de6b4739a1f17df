"""Fleet-twin speed: simulated days per second for 2,048 p5 nodes, 30 days, 50,000 jobs, faults on.

Prints the ratio against a baseline measured in the same run: the bare event loop popping the same number of
no-op events. Usage: python benchmarks/bench_sim.py [--policy fifo] [--priority multifactor] [--days 30] [--jobs 50000]
"""

from __future__ import annotations

import argparse
import time

from fmstack.catalog import load_catalog
from fmstack.sim.config import SimConfig
from fmstack.sim.engine import Environment
from fmstack.sim.simulator import Simulator


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--policy", default="slurm-backfill")
    ap.add_argument("--days", type=float, default=30.0)
    ap.add_argument("--jobs", type=int, default=50000)
    ap.add_argument("--nodes", type=int, default=2048)
    ap.add_argument("--priority", default="fifo")
    a = ap.parse_args()
    cfg = SimConfig(nodes=a.nodes, days=a.days, jobs=a.jobs, spares=16, policy=a.policy, priority=a.priority)
    sim = Simulator(cfg, load_catalog())
    t0 = time.perf_counter()
    sim.run()
    wall = time.perf_counter() - t0
    n = sim.env.events_processed
    env = Environment(0)
    for i in range(n):
        env.schedule(float(i), 0)
    t1 = time.perf_counter()
    env.run(float(n), lambda k, d: None)
    base = time.perf_counter() - t1
    print(f"policy={a.policy} priority={a.priority} nodes={a.nodes} days={a.days} jobs={a.jobs} events={n}")
    print(f"wall {wall:.2f} s, {a.days / wall:.3f} simulated days/s; no-op loop {base:.3f} s; ratio {wall / base:.1f}x")


if __name__ == "__main__":
    main()
