"""KV router speed: its running sums (``KvRouter.watch``, session 19) against rescanning every worker's requests in
flight at each arrival (the path before), same process, same seeded runs.

Joint runs of Llama 3.1 8B fp8 replicas behind ``--router kv`` (one H100 each, p5.48xlarge): 8 replicas of 4,096 /
256 tokens with 16 shared 3,072-token prefixes at 12 req/s a replica, of 4,096 / 1,024 at 4, of 1,024 / 2,048 with
768-token prefixes at 6 (many more requests in flight), and 4-turn sessions of 512 / 256 on 4 replicas at 30; and
the prefill pool of splits (4 prefill + 4 decode replicas, a 5 ms KV transfer; ``KvRouter.watch_prompts``, the
prompts computed reported): 4,096 / 256 with 16 shared 3,072-token prefixes at 160, 190 (near the prefill pool's
saturation) and 250 req/s (past it: the queues grow through the run), and 4-turn sessions of 2,048 / 128 at 100
turns/s.
Prints the mean requests in flight a worker (a split: a prefill replica, prompts not yet computed) as requests
arrive, the CPU time (the process's: steadier on a shared machine) of each run and of its ``pick`` calls alone, both
ratios, and whether every arrival went to the same worker at the same costs (the runs' results compared too).
Usage: python benchmarks/bench_kv_router.py [--repeat 1] [--requests 6000] [--only split]
"""

from __future__ import annotations

import argparse
import contextlib
import time
from typing import Any
from unittest import mock

from fmstack.catalog import load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.perfmodel.inference import ServeConfig, deployment
from fmstack.perfmodel.inference_prefix import PrefixWorkload
from fmstack.perfmodel.inference_router_kv import KvRouter
from fmstack.perfmodel.inference_session import SessionWorkload
from fmstack.perfmodel.inference_sim_disagg import DisaggSim
from fmstack.perfmodel.inference_sim_disagg_session import SessionDisaggSim
from fmstack.perfmodel.inference_sim_fleet import simulate_fleet
from fmstack.perfmodel.inference_sim_io import SimConfig, SimRequest
from fmstack.perfmodel.inference_sim_session import run_sessions

GROUPS = PrefixWorkload(groups=16, prefix_len=3072)


PREFILL, DECODE, KV_S = 4, 4, 0.005
"""The splits: prefill and decode replicas, the KV transfer's seconds (any prompt, any pair)."""


def _cases(n: int) -> list[tuple[str, ServeConfig, SimConfig]]:
    short = ServeConfig(precision="fp8", input_len=4096, output_len=256)
    long = ServeConfig(precision="fp8", input_len=4096, output_len=1024)
    chat = ServeConfig(precision="fp8", input_len=512, output_len=256)
    chat_long = ServeConfig(precision="fp8", input_len=1024, output_len=2048)
    return [
        ("8 replicas, 4096/256, 16 prefixes", short,
         SimConfig(request_rate_per_s=12.0, replicas=8, router="kv", num_requests=n, warmup_requests=n // 10,
                   prefix=GROUPS)),
        ("8 replicas, 4096/1024, 16 prefixes", long,
         SimConfig(request_rate_per_s=4.0, replicas=8, router="kv", num_requests=n, warmup_requests=n // 10,
                   prefix=GROUPS)),
        ("8 replicas, 1024/2048, 16 prefixes", chat_long,
         SimConfig(request_rate_per_s=6.0, replicas=8, router="kv", num_requests=n, warmup_requests=n // 10,
                   prefix=PrefixWorkload(groups=16, prefix_len=768))),
        ("4 replicas, sessions 4 x 512/256", chat,
         SimConfig(request_rate_per_s=30.0, replicas=4, router="kv", num_requests=n, warmup_requests=n // 10,
                   sessions=SessionWorkload(turns=4, think_time_s=2.0))),
        *((f"split 4P+4D, 4096/256, {rate:.0f}/s", short,
           SimConfig(request_rate_per_s=rate, router="kv", num_requests=n, warmup_requests=n // 10, prefix=GROUPS))
          for rate in (160.0, 190.0, 250.0)),
        ("split 4P+4D, sessions 4 x 2048/128", ServeConfig(precision="fp8", input_len=2048, output_len=128),
         SimConfig(request_rate_per_s=100.0, router="kv", num_requests=n, warmup_requests=n // 10,
                   sessions=SessionWorkload(turns=4, think_time_s=2.0))),
    ]  # fmt: skip


def _prefill_pool_only(self: KvRouter) -> None:
    """The path before in a split: the prefill router, rescanning."""
    self.prefill_pool = True


def _run(cfg: ServeConfig, sim: SimConfig, *, rescan: bool, split: bool) -> tuple[float, float, list[Any], Any, float]:
    """CPU seconds of the run and of its picks, every arrival's (worker, costs), the run's outcome and the mean
    requests in flight a worker as each arrival was routed."""
    cat = load_catalog()
    d = deployment(cat.model("llama3.1-8b"), build_cluster(cat, "p5.48xlarge", 1), cfg)
    trace: list[Any] = []
    spent = [0.0]
    flight: list[float] = []
    pick = KvRouter.pick

    def timed(self: KvRouter, req: SimRequest, caches: Any, prefix_len: int) -> int:
        c = time.process_time()
        k = pick(self, req, caches, prefix_len)
        spent[0] += time.process_time() - c
        trace.append((k, tuple(self.last_costs)))
        flight.append(sum(self.in_flight(j) for j in range(self.replicas)) / self.replicas)
        return k

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(KvRouter, "pick", timed))
        if rescan:  # the path before: no running sums, every pick rescans
            stack.enter_context(mock.patch.object(KvRouter, "watch", lambda self, workers: None))
            stack.enter_context(mock.patch.object(KvRouter, "watch_prompts", _prefill_pool_only))
        out: Any
        c0 = time.process_time()
        if split and sim.sessions is not None:
            s: Any = SessionDisaggSim(d, cfg, sim, prefill_replicas=PREFILL, decode_replicas=DECODE,
                                      kv_time=lambda tokens: [[KV_S] * DECODE] * PREFILL)  # fmt: skip
            s.run()
            out = [(q.arrival_s, q.first_token_s, q.last_token_s) for q in s._requests]
        elif split:
            s = DisaggSim(d, cfg, sim, prefill_replicas=PREFILL, decode_replicas=DECODE, kv_transfer_s=KV_S)
            s.run()
            out = [(q.arrival_s, q.first_token_s, q.last_token_s) for q in s._requests]
        elif sim.sessions is not None:
            out = [(q.arrival_s, q.first_token_s, q.last_token_s) for q in run_sessions(d, cfg, sim).requests]
        else:
            out = simulate_fleet(d, cfg, sim).to_json()
        cpu = time.process_time() - c0
    return cpu, spent[0], trace, out, sum(flight) / len(flight)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--requests", type=int, default=6000)
    ap.add_argument("--only", choices=["joint", "split"], help="the colocated joint runs or the splits alone")
    args = ap.parse_args()
    print(f"{'case':36s} {'in flight':>9s} {'run CPU s (rescan -> sums)':>28s} {'ratio':>6s} {'picks CPU s':>20s} "
          f"{'ratio':>6s}  routing")  # fmt: skip
    for label, cfg, sim in _cases(args.requests):
        split = label.startswith("split")
        if args.only is not None and split != (args.only == "split"):
            continue
        new = min((_run(cfg, sim, rescan=False, split=split) for _ in range(args.repeat)), key=lambda x: x[0])
        old = min((_run(cfg, sim, rescan=True, split=split) for _ in range(args.repeat)), key=lambda x: x[0])
        same = "identical" if (new[2], new[3]) == (old[2], old[3]) else "DIFFERS"
        print(f"{label:36s} {new[4]:9.1f} {old[0]:12.2f} -> {new[0]:6.2f} s   x{old[0] / new[0]:5.2f} {old[1]:9.2f} -> {new[1]:6.2f} s"
              f" x{old[1] / new[1]:5.1f}  {same} ({len(new[2])} arrivals)")  # fmt: skip


if __name__ == "__main__":
    main()
