"""Serving-simulation speed: decode stretches priced together against one iteration at a time, same process.

Cases: the simulations ``fmstack plan serve`` runs to verify its cheapest candidates (llama3.1-8b, 5 QPS,
512+128 tokens; DeepSeek-V3 on p5.48xlarge, whose verification includes an attention-DP candidate), the rollout
batch ``fmstack estimate rl --length-spread 0.5`` simulates (llama3.1-70b, 1024+8192 tokens), an open-loop 70B run
with spread lengths and an open-loop attention-DP run (Qwen3-235B-A22B, 8 ranks). The command cases are captured
from the commands themselves (their ``simulate`` calls, arguments and all). Each case runs the old path (``skip_ahead=False``) and the new one,
checks that the results are equal float for float, and prints the wall times and their ratio.
Usage: PYTHONPATH=src python benchmarks/bench_serve_sim.py [--repeat 1]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import time
from collections.abc import Callable, Iterator
from typing import Any

import fmstack.perfmodel.inference_open_loop as open_loop_mod
import fmstack.perfmodel.rl_rollout as rollout_mod
from fmstack.catalog import load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.cli.main import main as cli_main
from fmstack.perfmodel.inference import ServeConfig, deployment
from fmstack.perfmodel.inference_sim import BatchingSim, SimConfig, SimResult, simulate
from fmstack.perfmodel.inference_step import Deployment

Case = tuple[Deployment, ServeConfig, SimConfig]
PLAN = ("plan serve --model llama3.1-8b --qps 5 --input-len 512 --output-len 128 --ttft-p99 0.5 --itl-p99 0.05 "
        "--instance p5.48xlarge --json")  # fmt: skip
PLAN_ADP = ("plan serve --model deepseek-v3 --qps 2 --input-len 2048 --output-len 256 --ttft-p99 2 --itl-p99 0.1 "
            "--instance p5.48xlarge --json")  # fmt: skip
RL = ("estimate rl --model llama3.1-70b --instance p5.48xlarge --nodes 8 --prompts 512 --samples 16 "
      "--prompt-len 1024 --response-len 8192 --rollout-tp 8 --train-tp 8 --length-spread 0.5 --json")  # fmt: skip


@contextlib.contextmanager
def _recording(module: Any, into: list[Case]) -> Iterator[None]:
    real: Callable[[Deployment, ServeConfig, SimConfig], SimResult] = module.simulate

    def rec(d: Deployment, cfg: ServeConfig, sim: SimConfig) -> SimResult:
        into.append((d, cfg, sim))
        return real(d, cfg, sim)

    module.simulate = rec
    try:
        yield
    finally:
        module.simulate = real


def _captured(module: Any, argv: str) -> list[Case]:
    cases: list[Case] = []
    with _recording(module, cases), contextlib.redirect_stdout(io.StringIO()):
        cli_main(argv.split())
    return cases


def _time(cases: list[Case], skip_ahead: bool, repeat: int) -> tuple[float, list[SimResult]]:
    best = float("inf")
    out: list[SimResult] = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = [BatchingSim(d, cfg, sim, skip_ahead=skip_ahead).run() for d, cfg, sim in cases]
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=1, help="Best of this many runs per path.")
    a = ap.parse_args()
    cat = load_catalog()
    open_cfg = ServeConfig(tp=8, input_len=1024, output_len=512)
    open_d = deployment(cat.model("llama3.1-70b"), build_cluster(cat, "p5.48xlarge", 1), open_cfg)
    open_sim = SimConfig(request_rate_per_s=2.0, num_requests=400, warmup_requests=40, length_spread=0.5)
    simulate(open_d, open_cfg, open_sim)  # warm the imports and the calibration caches
    adp_cfg = ServeConfig(tp=8, ep=8, precision="fp8", attention_dp=True, input_len=2048, output_len=256)
    adp_d = deployment(cat.model("qwen3-235b-a22b"), build_cluster(cat, "p5.48xlarge", 1), adp_cfg)
    adp_sim = SimConfig(request_rate_per_s=10.0, num_requests=600, warmup_requests=60, length_spread=0.5)
    cases = {
        "plan serve verification (llama3.1-8b, 5 QPS)": _captured(open_loop_mod, PLAN),
        "RL rollout batch (llama3.1-70b, 1024+8192, spread 0.5)": _captured(rollout_mod, RL),
        "open loop (llama3.1-70b tp8, 2 QPS, 1024+512, spread 0.5)": [(open_d, open_cfg, open_sim)],
        "plan serve verification (deepseek-v3, 2 QPS, p5; one attention-DP candidate)": _captured(
            open_loop_mod, PLAN_ADP
        ),
        "open loop, attention DP (qwen3-235b-a22b tp8 ep8 fp8, 10 QPS, 2048+256, spread 0.5)": [
            (adp_d, adp_cfg, adp_sim)
        ],
    }
    for name, runs in cases.items():
        old_s, old = _time(runs, False, a.repeat)
        new_s, new = _time(runs, True, a.repeat)
        same = old == new
        iters = sum(r.iterations for r in new)
        print(f"{name}: {len(runs)} simulation(s), {iters} iterations; one at a time {old_s:.3f} s, "
              f"stretches {new_s:.3f} s, ratio {old_s / new_s:.1f}x; results identical: {same}")  # fmt: skip
        if not same:
            raise SystemExit(f"{name}: the results differ")


if __name__ == "__main__":
    main()
