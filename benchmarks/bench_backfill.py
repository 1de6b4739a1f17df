"""Backfill speed: the fleet twin with the faster backfill cycle against the reference cycle, same process.

Runs the ``fmstack simulate --help`` example (2,048 p5 nodes, 30 days, 50,000 jobs, slurm-backfill, llama3
faults, seed 1) once with ``BackfillPolicy(reference=True)`` (the cycle as written before session 8) and once
with the default cycle, checks that the JSON summaries are byte-identical, and prints both wall times and the
ratio. Usage: python benchmarks/bench_backfill.py [--policy easy-backfill] [--days 30] [--jobs 50000] [--repeat 1]
"""

from __future__ import annotations

import argparse
import dataclasses
import time

from fmstack.catalog import load_catalog
from fmstack.orchestration.policies.backfill import BackfillPolicy
from fmstack.sim.config import SimConfig
from fmstack.sim.export import to_json
from fmstack.sim.metrics import summarise
from fmstack.sim.simulator import Simulator


def _run(cfg: SimConfig, *, reference: bool) -> tuple[float, float, str]:
    sim = Simulator(cfg, load_catalog())
    assert isinstance(sim.policy, BackfillPolicy), "this benchmark is for the backfill policies"
    sim.policy = dataclasses.replace(sim.policy, reference=reference)
    t0, c0 = time.perf_counter(), time.process_time()
    sim.run()
    return time.perf_counter() - t0, time.process_time() - c0, to_json(summarise(sim))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--policy", default="slurm-backfill")
    ap.add_argument("--priority", default="fifo")
    ap.add_argument("--days", type=float, default=30.0)
    ap.add_argument("--jobs", type=int, default=50000)
    ap.add_argument("--nodes", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=1, help="old/new pairs, alternating (the VM is shared)")
    a = ap.parse_args()
    cfg = SimConfig(nodes=a.nodes, days=a.days, jobs=a.jobs, policy=a.policy, priority=a.priority, seed=a.seed)
    print(f"policy={a.policy} priority={a.priority} nodes={a.nodes} days={a.days} jobs={a.jobs} seed={a.seed}")
    olds: list[float] = []
    news: list[float] = []
    for _ in range(a.repeat):
        old_s, old_cpu, old_json = _run(cfg, reference=True)
        new_s, new_cpu, new_json = _run(cfg, reference=False)
        same = old_json == new_json
        print(f"wall: reference {old_s:.2f} s, new {new_s:.2f} s, ratio {old_s / new_s:.2f}x; "
              f"CPU: {old_cpu:.2f} s, {new_cpu:.2f} s, ratio {old_cpu / new_cpu:.2f}x; identical JSON: {same}")  # fmt: skip
        if not same:
            raise SystemExit("the outputs differ")
        olds.append(old_cpu)
        news.append(new_cpu)
    print(f"best of {a.repeat} (CPU): reference {min(olds):.2f} s, new {min(news):.2f} s, "
          f"ratio {min(olds) / min(news):.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
