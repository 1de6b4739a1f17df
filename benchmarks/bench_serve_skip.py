"""Serving-simulation skip-ahead over prompt chunks (session 15), same process: each case runs the simulation one
iteration at a time (``skip_ahead=False``), with decode-only stretches alone (``chunk_stretches=False``: the
simulation until session 14; a split's prefill replicas priced per iteration) and with every stretch (the default),
checks that the results are equal float for float (every percentile, mean, iteration count; the split's pool
statistics too) and prints the wall times and their ratios. ``--plan`` also times `plan serve` end to end on the
slow cases of docs/inference.md, its simulations session 14's way and its decode curves computed per split
(:class:`fmstack.perfmodel.inference_plan_disagg.DecodePools` off) against the default, and checks that the plans
are equal, every candidate's every field. ``--seeds N`` runs the identity check over ``N`` seeds of a long-prompt
case and prints the largest relative difference of any figure (0: bit for bit).

Cases: Llama 3.1 8B TP 2 fp8 at 100,000/512 tokens in 512-token chunks at 94 % of the replica's capacity (the
open-loop sizing of ``estimate serve --qps``: 8,104 requests), 32,000/1 tokens in 2,048-token chunks at 1.25
req/s (`plan serve`'s check of its cheapest colocated row at 5 req/s), and the 20P(tp 1):1D(tp 4) split `plan
serve` picks at 100,000/512, 5 req/s, TTFT 30 s, ITL 0.1 s on p6-b200.48xlarge.
Usage: PYTHONPATH=src python benchmarks/bench_serve_skip.py [--quick] [--plan] [--seeds 20] [--no-step]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np

import fmstack.perfmodel.inference_open_loop as open_loop_mod
import fmstack.perfmodel.inference_plan as plan_mod
import fmstack.perfmodel.inference_sim_disagg as disagg_mod
from fmstack.catalog import load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.perfmodel.inference import ServeConfig, deployment
from fmstack.perfmodel.inference_disagg import SLO
from fmstack.perfmodel.inference_open_loop import capacity_rps, open_loop_run
from fmstack.perfmodel.inference_plan import plan_serve
from fmstack.perfmodel.inference_plan_disagg import run_split
from fmstack.perfmodel.inference_sim import BatchingSim, SimConfig, SimResult
from fmstack.perfmodel.inference_sim_disagg import DisaggSim, pool_stats
from fmstack.perfmodel.inference_step import Deployment

MODES = {"step": {"skip_ahead": False}, "session 14": {"chunk_stretches": False}, "now": {}}


def _colocated(d: Deployment, cfg: ServeConfig, sim: SimConfig, modes: list[str]) -> dict[str, tuple[float, Any]]:
    out: dict[str, tuple[float, Any]] = {}
    for mode in modes:
        t0 = time.perf_counter()
        s = BatchingSim(d, cfg, sim, **MODES[mode])
        r = s.run()
        out[mode] = (time.perf_counter() - t0, (r, s.iterations, s.clock_s, _digest(s._requests)))
    return out


def _digest(requests: list[Any]) -> str:
    """Every request's every token time, as a digest of their bytes (equal only if equal float for float)."""
    h = hashlib.sha256()
    for q in requests:
        h.update(np.array([q.first_token_s, q.last_token_s, *q.gaps_s], dtype=np.float64).tobytes())
    return h.hexdigest()


def _report(name: str, runs: dict[str, tuple[float, Any]], extra: str = "") -> None:
    now = runs["now"][0]
    ratios = ", ".join(f"{mode} {t:.2f} s ({t / now:.1f}x)" for mode, (t, _) in runs.items() if mode != "now")
    print(f"{name}: now {now:.2f} s; {ratios}{extra}")
    first = runs["now"][1]
    for mode, (_, result) in runs.items():
        if result != first:
            raise SystemExit(f"{name}: {mode} differs from now")


def _long_prompt(cat: Any, quick: bool) -> tuple[Deployment, ServeConfig, SimConfig, float]:
    cfg = ServeConfig(tp=2, precision="fp8", input_len=100_000, output_len=512, max_num_tokens=512)
    d = deployment(cat.model("llama3.1-8b"), build_cluster(cat, "p5.48xlarge", 1), cfg)
    run = open_loop_run(d, cfg, 0.94 * capacity_rps(d, cfg))
    assert run.sim is not None
    sim = run.sim if not quick else replace(run.sim, num_requests=600, warmup_requests=300)
    return d, cfg, sim, run.utilization


def _split(cat: Any, quick: bool, modes: list[str]) -> dict[str, tuple[float, Any]]:
    clusters: dict[tuple[str, int], Any] = {}

    def cluster_of(name: str, nodes: int) -> Any:
        if (name, nodes) not in clusters:
            clusters[name, nodes] = build_cluster(cat, name, nodes, part_of_domain=True)
        return clusters[name, nodes]

    captured: list[tuple[Any, ...]] = []
    module: Any = disagg_mod  # its ``_make`` is patched here to capture the run's arguments
    real = module._make

    def capture(*args: Any, **kw: Any) -> DisaggSim:
        captured.append((args, kw))
        raise _Captured

    cfg = ServeConfig(tp=1, precision="fp8", input_len=100_000, output_len=512, max_num_tokens=2048)
    dc = replace(cfg, tp=4)
    module._make = capture
    try:
        run_split(cluster_of, cat.model("llama3.1-8b"), cfg, "p6-b200.48xlarge", 5.0, 20, 1, 0, decode_cfg=dc)
    except _Captured:
        pass
    finally:
        module._make = real
    (d, c, sim), kw = captured[0]
    if quick:
        sim = replace(sim, num_requests=800, warmup_requests=300)
    out: dict[str, tuple[float, Any]] = {}
    for mode in modes:
        t0 = time.perf_counter()
        s = real(d, c, sim, **kw)
        s._skip_ahead = mode == "now"
        r = s.run()
        out[mode] = (time.perf_counter() - t0, (r, pool_stats(s), s._prefill_log, s._decode_log, _digest(s._requests)))
    return out


class _Captured(Exception):
    pass


def _rel(a: SimResult, b: SimResult) -> float:
    worst = 0.0
    for x, y in ((a.ttft_s, b.ttft_s), (a.itl_s, b.itl_s), (a.latency_s, b.latency_s)):
        for p in x:
            worst = max(worst, abs(x[p] - y[p]) / max(abs(x[p]), 1e-300))
    for f in ("mean_ttft_s", "mean_itl_s", "mean_latency_s", "requests_per_s", "completion_rate_per_s"):
        u, v = getattr(a, f), getattr(b, f)
        worst = max(worst, abs(u - v) / max(abs(u), 1e-300))
    return worst


def _seeds(cat: Any, n: int) -> None:
    """Identity over seeds: 8B TP 1, 16,000/128 tokens in 256-token chunks, spread lengths, at 85 % busy."""
    cfg = ServeConfig(tp=1, input_len=16_000, output_len=128, max_num_tokens=256)
    d = deployment(cat.model("llama3.1-8b"), build_cluster(cat, "p5.48xlarge", 1), cfg)
    rate = 0.85 * capacity_rps(d, cfg)
    worst, t_step, t_now, iters = 0.0, 0.0, 0.0, 0
    for seed in range(n):
        sim = SimConfig(request_rate_per_s=rate, num_requests=200, warmup_requests=40, length_spread=0.5, seed=seed)
        t0 = time.perf_counter()
        slow = BatchingSim(d, cfg, sim, skip_ahead=False)
        a = slow.run()
        t1 = time.perf_counter()
        b = BatchingSim(d, cfg, sim).run()
        t_step, t_now = t_step + t1 - t0, t_now + time.perf_counter() - t1
        worst, iters = max(worst, _rel(a, b)), iters + slow.iterations
        if a != b:
            raise SystemExit(f"seed {seed}: the results differ (largest relative difference {worst:.3g})")
    print(f"{n} seeds of 8B 16,000/128 in 256-token chunks at 85 % busy ({iters:,} iterations): largest relative "
          f"difference {worst:.3g} (equal float for float); step {t_step:.2f} s -> now {t_now:.2f} s "
          f"({t_step / t_now:.1f}x)")  # fmt: skip


@contextlib.contextmanager
def _session14() -> Iterator[None]:
    """`plan serve` with its simulations as until session 14 (decode stretches only; a split's prefill iterations
    priced one by one) and each split's decode curve computed for that split."""
    ol: Any = open_loop_mod  # their imports ``simulate``, ``_make`` and ``DecodePools`` are patched here
    dm: Any = disagg_mod
    pm: Any = plan_mod
    real_sim, real_make, real_pools = ol.simulate, dm._make, pm.DecodePools

    def sim14(d: Deployment, cfg: ServeConfig, sim: SimConfig) -> SimResult:
        return BatchingSim(d, cfg, sim, chunk_stretches=False).run()

    def make14(*args: Any, **kw: Any) -> DisaggSim:
        s: DisaggSim = real_make(*args, **kw)
        s._skip_ahead = False
        return s

    ol.simulate, dm._make, pm.DecodePools = sim14, make14, lambda: None
    try:
        yield
    finally:
        ol.simulate, dm._make, pm.DecodePools = real_sim, real_make, real_pools


PLANS: dict[str, dict[str, Any]] = {
    "16/4 tokens, 5 req/s, TTFT 0.5 s, ITL 0.05 s": dict(qps=5.0, input_len=16, output_len=4,
                                                         slo=SLO(ttft_s=0.5, itl_s=0.05)),
    "32,000/1 tokens, 5 req/s, TTFT 10 s, ITL 0.1 s": dict(qps=5.0, input_len=32_000, output_len=1,
                                                           slo=SLO(ttft_s=10.0, itl_s=0.1)),
    "100,000/512 tokens, 5 req/s, TTFT 30 s, ITL 0.1 s": dict(qps=5.0, input_len=100_000, output_len=512,
                                                              slo=SLO(ttft_s=30.0, itl_s=0.1)),
    "100,000/512 tokens, 5 req/s, TTFT 120 s, ITL 0.05 s": dict(qps=5.0, input_len=100_000, output_len=512,
                                                                slo=SLO(ttft_s=120.0, itl_s=0.05)),
}  # fmt: skip


def _plans(cat: Any) -> None:
    model = cat.model("llama3.1-8b")
    for name, case in PLANS.items():
        times: dict[str, float] = {}
        full: dict[str, str] = {}
        best = ""
        for mode in ("session 14", "now"):
            with _session14() if mode == "session 14" else contextlib.nullcontext():
                t0 = time.perf_counter()
                plan = plan_serve(cat, model, **case)
                times[mode] = time.perf_counter() - t0
            full[mode] = repr(plan)
            b = plan.best
            split = (
                f" {b.prefill_replicas}P:{b.decode_replicas}D(tp {b.decode_tp})" if b.mode == "disaggregated" else ""
            )
            best = f"{b.replicas} x {b.instance} tp {b.tp} {b.precision} {b.max_num_tokens}{split}, ${b.cost_per_hour_usd:,.2f}/h"
        if full["session 14"] != full["now"]:
            raise SystemExit(f"{name}: the plans differ")
        old, now = times["session 14"], times["now"]
        print(f"plan serve llama3.1-8b {name}: session 14 {old:.2f} s -> now {now:.2f} s ({old / now:.1f}x); the "
              f"same plan: {best}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="Fewer requests in the two 100,000-token cases.")
    ap.add_argument("--no-step", action="store_true", help="Leave out the one-iteration-at-a-time runs.")
    ap.add_argument("--plan", action="store_true", help="Also time plan serve on the slow cases.")
    ap.add_argument("--seeds", type=int, default=0, help="Identity over this many seeds.")
    a = ap.parse_args()
    cat = load_catalog()
    modes = ["session 14", "now"] if a.no_step else list(MODES)
    d, cfg, sim, util = _long_prompt(cat, a.quick)
    _report(f"8B tp 2 fp8 100,000/512 in 512-token chunks, {100 * util:.0f} % busy, {sim.num_requests:,} requests",
            _colocated(d, cfg, sim, modes))  # fmt: skip
    cfg = ServeConfig(tp=2, precision="fp8", input_len=32_000, output_len=1, max_num_tokens=2048)
    d = deployment(cat.model("llama3.1-8b"), build_cluster(cat, "p5.48xlarge", 1), cfg)
    run = open_loop_run(d, cfg, 1.25)
    assert run.sim is not None
    _report(f"8B tp 2 fp8 32,000/1 in 2,048-token chunks, 1.25 req/s ({100 * run.utilization:.0f} % busy), "
            f"{run.sim.num_requests:,} requests", _colocated(d, cfg, run.sim, modes))  # fmt: skip
    split = _split(cat, a.quick, [m for m in modes if m != "session 14"])
    _report("split 20P(tp 1):1D(tp 4) fp8 p6-b200, 100,000/512 at 5 req/s (prefill replicas: step = session 14)",
            split)  # fmt: skip
    if a.seeds:
        _seeds(cat, a.seeds)
    if a.plan:
        _plans(cat)


if __name__ == "__main__":
    main()
