"""Routers under multi-turn sessions: `estimate serve --turns 8` on Llama 3.1 70B fp8, 4 replicas of tp 2 on one
p5.48xlarge, sessions of 8 turns of 512 new tokens and 256 out, 5 s think time, at ``--qps`` requests/s in all;
prints TTFT p50 / p99 (all turns, first turns, later turns), the prompt-token hit rate and the run's CPU time for
each router, each seed (docs/inference.md, Multi-turn sessions, has the table).
Usage: python benchmarks/bench_sessions.py [--qps 14] [--seeds 0 1 2] [--routers random round-robin ...]
"""

from __future__ import annotations

import argparse
import json
import time

from click.testing import CliRunner

from fmstack.cli.main import cli

ROUTERS = ("random", "round-robin", "least-loaded", "power-of-two", "cache-aware", "kv", "session")
ARGV = ["estimate", "serve", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--tp", "2", "--precision", "fp8",
        "--input-len", "512", "--output-len", "256", "--replicas", "4", "--turns", "8", "--think-time-s", "5",
        "--json"]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--qps", type=float, default=14.0)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--routers", nargs="+", default=list(ROUTERS))
    args = ap.parse_args()
    print(f"{'router':14s} seed  TTFT p50   p99 | first p50   p99 | later p50   p99 | hit(tok) later | CPU s")
    for router in args.routers:
        for seed in args.seeds:
            c0 = time.process_time()
            res = CliRunner().invoke(cli, [*ARGV, "--qps", repr(args.qps), "--router", router, "--seed", str(seed)])
            cpu = time.process_time() - c0
            d = json.loads(res.output)
            s = d["sessions"]
            print(f"{router:14s} {seed:4d} {d['ttft_p50_s']:6.3f} {d['ttft_p99_s']:6.3f} | "
                  f"{s['ttft_p50_s_first_turn']:6.3f} {s['ttft_p99_s_first_turn']:6.3f} | "
                  f"{s['ttft_p50_s_later_turns']:6.3f} {s['ttft_p99_s_later_turns']:6.3f} | "
                  f"{s['token_hit_rate']:.3f} {s['token_hit_rate_later_turns']:.3f} | {cpu:5.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
