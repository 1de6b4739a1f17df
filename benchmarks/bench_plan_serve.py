"""`plan serve` search time, same process, alternating, best of ``--repeat`` runs each: ``--axis nodes`` (default)
one node per replica (the search before multi-node replicas) against the default bound (``MAX_NODES_PER_REPLICA``);
``--axis adp`` the search without attention data parallelism (the search before it) against the default search;
``--axis skip`` the default search with its attention-DP simulations one iteration at a time (``BatchingSim(...,
skip_ahead=False)`` for attention-DP deployments only: the simulation before its attention-DP decode stretch; the
others keep theirs) against the default; the plans must be equal, every candidate's every field. ``--axis disagg``
the search without disaggregated splits (``search_disagg=False``) against the default, on the README example and
the two cases of docs/inference.md (long prompts, where a split wins; short, where colocated wins), with the
simulations each ran (colocated replicas, splits).

Cases: the README / ``--help`` examples (single-node models, where the multi-node search must cost little), an MoE
model, and models that do not fit one p5.48xlarge in bf16 (Llama 3.1 405B, DeepSeek-V3: one node finds nothing).
Usage: PYTHONPATH=src python benchmarks/bench_plan_serve.py [--repeat 3] [--axis nodes|adp|skip|disagg]
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Iterator
from typing import Any

import fmstack.perfmodel.inference_open_loop as open_loop_mod
import fmstack.perfmodel.inference_plan_verify as verify_mod
from fmstack.catalog import load_catalog
from fmstack.errors import InputError
from fmstack.perfmodel.inference import ServeConfig
from fmstack.perfmodel.inference_disagg import SLO
from fmstack.perfmodel.inference_plan import MAX_NODES_PER_REPLICA, plan_serve
from fmstack.perfmodel.inference_plan_candidate import split_label
from fmstack.perfmodel.inference_sim import BatchingSim, SimConfig, SimResult
from fmstack.perfmodel.inference_step import Deployment

CASES: dict[str, dict[str, Any]] = {
    "README: llama3.1-70b 20 QPS 2048/256, every instance": dict(
        model="llama3.1-70b", qps=20.0, input_len=2048, output_len=256, slo=SLO(ttft_s=0.5, itl_s=0.05)),
    "bench_serve_sim: llama3.1-8b 5 QPS 512/128, p5": dict(
        model="llama3.1-8b", qps=5.0, input_len=512, output_len=128, slo=SLO(ttft_s=0.5, itl_s=0.05),
        instances=("p5.48xlarge",)),
    "qwen3-235b-a22b 5 QPS 2048/256, every instance": dict(
        model="qwen3-235b-a22b", qps=5.0, input_len=2048, output_len=256, slo=SLO(ttft_s=1.0, itl_s=0.05)),
    "llama3.1-405b bf16 2 QPS 2048/256, p5": dict(
        model="llama3.1-405b", qps=2.0, input_len=2048, output_len=256, slo=SLO(ttft_s=2.0, itl_s=0.1),
        instances=("p5.48xlarge",), precisions=("bf16",)),
    "deepseek-v3 2 QPS 2048/256, p5": dict(
        model="deepseek-v3", qps=2.0, input_len=2048, output_len=256, slo=SLO(ttft_s=2.0, itl_s=0.1),
        instances=("p5.48xlarge",)),
    "deepseek-v3 fp8 15 QPS 2048/256, p5en (attention DP wins)": dict(
        model="deepseek-v3", qps=15.0, input_len=2048, output_len=256, slo=SLO(ttft_s=2.0, itl_s=0.1),
        instances=("p5en.48xlarge",), precisions=("fp8",)),
}  # fmt: skip
DISAGG_CASES: dict[str, dict[str, Any]] = {
    "README: llama3.1-70b 20 QPS 2048/256, every instance": CASES["README: llama3.1-70b 20 QPS 2048/256, every instance"],
    "long prompts: llama3.1-70b 5 QPS 8192/256, TTFT 2 s, ITL 0.03 s, p5": dict(
        model="llama3.1-70b", qps=5.0, input_len=8192, output_len=256, slo=SLO(ttft_s=2.0, itl_s=0.03),
        instances=("p5.48xlarge",)),
    "short prompts: llama3.1-70b 20 QPS 256/256, p5": dict(
        model="llama3.1-70b", qps=20.0, input_len=256, output_len=256, slo=SLO(ttft_s=0.5, itl_s=0.05),
        instances=("p5.48xlarge",)),
}  # fmt: skip


def _run(
    cat: Any, case: dict[str, Any], max_nodes: int, adp: bool = True, disagg: bool = True
) -> tuple[float, str, str]:
    """Seconds, the best plan in words, and the whole result (every candidate, simulated percentiles) as text."""
    args = dict(case)
    model = cat.model(args.pop("model"))
    t0 = time.perf_counter()
    full = ""
    try:
        result = plan_serve(cat, model, max_nodes_per_replica=max_nodes, search_attention_dp=adp,
                            search_disagg=disagg, **args)  # fmt: skip
        b, full = result.best, repr(result)
        split = f" {split_label(b)}" if b.mode == "disaggregated" else ""
        what = (f"{b.replicas} x ({b.nodes_per_replica} x {b.instance} tp {b.tp} pp {b.pp} ep {b.ep}"
                f"{' attention-dp' if b.attention_dp else ''} {b.precision}){split} on {b.nodes} nodes, "
                f"${b.cost_per_hour_usd:,.2f}/h")  # fmt: skip
    except InputError as exc:
        what = full = f"no plan ({exc.field})"
    return time.perf_counter() - t0, what, full


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3, help="Best of this many runs per bound.")
    ap.add_argument(
        "--axis", choices=("nodes", "adp", "skip", "disagg"), default="nodes", help="What the two searches differ in."
    )
    a = ap.parse_args()
    cat = load_catalog()
    _run(cat, CASES["bench_serve_sim: llama3.1-8b 5 QPS 512/128, p5"], 1)  # warm imports and caches
    if a.axis == "adp":
        _adp(cat, a.repeat)
        return
    if a.axis == "skip":
        _skip(cat, a.repeat)
        return
    if a.axis == "disagg":
        _disagg(cat, a.repeat)
        return
    for name, case in CASES.items():
        times: dict[int, float] = {1: float("inf"), MAX_NODES_PER_REPLICA: float("inf")}
        plans: dict[int, str] = {}
        for _ in range(a.repeat):
            for bound in times:
                t, plans[bound], _ = _run(cat, case, bound)
                times[bound] = min(times[bound], t)
        one, multi = times[1], times[MAX_NODES_PER_REPLICA]
        print(f"{name}: one node {one:.2f} s -> up to {MAX_NODES_PER_REPLICA} nodes {multi:.2f} s "
              f"(ratio {multi / one:.2f}x)\n    one node: {plans[1]}\n    multi:    {plans[MAX_NODES_PER_REPLICA]}")  # fmt: skip


def _adp(cat: Any, repeat: int) -> None:
    for name, case in CASES.items():
        times = {False: float("inf"), True: float("inf")}
        plans: dict[bool, str] = {}
        for _ in range(repeat):
            for adp in times:
                t, plans[adp], _ = _run(cat, case, MAX_NODES_PER_REPLICA, adp)
                times[adp] = min(times[adp], t)
        off, on = times[False], times[True]
        print(f"{name}: without attention DP {off:.2f} s -> with {on:.2f} s (ratio {on / off:.2f}x)\n"
              f"    without: {plans[False]}\n    with:    {plans[True]}")  # fmt: skip


@contextlib.contextmanager
def _one_at_a_time() -> Iterator[None]:
    """``plan_serve``'s attention-DP simulations without the decode-stretch skip-ahead."""
    module: Any = open_loop_mod  # its ``simulate`` (a colocated check's run) is an import, patched here
    real = module.simulate

    def slow(d: Deployment, cfg: ServeConfig, sim: SimConfig) -> SimResult:
        return BatchingSim(d, cfg, sim, skip_ahead=not d.attention_dp).run()

    module.simulate = slow
    try:
        yield
    finally:
        module.simulate = real


def _skip(cat: Any, repeat: int) -> None:
    for name, case in CASES.items():
        times = {False: float("inf"), True: float("inf")}
        plans: dict[bool, str] = {}
        full: dict[bool, str] = {}
        for _ in range(repeat):
            for skip in times:
                with contextlib.nullcontext() if skip else _one_at_a_time():
                    t, plans[skip], full[skip] = _run(cat, case, MAX_NODES_PER_REPLICA)
                times[skip] = min(times[skip], t)
        off, on = times[False], times[True]
        print(f"{name}: attention DP one iteration at a time {off:.2f} s -> stretches {on:.2f} s (ratio {off / on:.2f}x)\n"
              f"    plan: {plans[True]}")  # fmt: skip
        if full[False] != full[True]:  # every candidate's every field, simulated percentiles included
            raise SystemExit(f"{name}: the plans differ: {plans[False]} vs {plans[True]}")


@contextlib.contextmanager
def _counting(counts: dict[str, int]) -> Iterator[None]:
    """Count ``plan_serve``'s simulations: colocated replicas and splits."""
    module: Any = verify_mod  # both are imports there, wrapped here
    real = {"coloc": module._simulate, "split": module.simulate_split}

    def wrap(kind: str) -> Any:
        def counted(*args: Any) -> Any:  # a colocated check returns (result or None, note)
            counts[kind] += 1
            return real[kind](*args)

        return counted

    module._simulate, module.simulate_split = wrap("coloc"), wrap("split")
    try:
        yield
    finally:
        module._simulate, module.simulate_split = real["coloc"], real["split"]


def _disagg(cat: Any, repeat: int) -> None:
    for name, case in DISAGG_CASES.items():
        times = {False: float("inf"), True: float("inf")}
        plans: dict[bool, str] = {}
        sims: dict[bool, dict[str, int]] = {}
        for _ in range(repeat):
            for disagg in times:
                counts = {"coloc": 0, "split": 0}
                with _counting(counts):
                    t, plans[disagg], _ = _run(cat, case, MAX_NODES_PER_REPLICA, disagg=disagg)
                times[disagg], sims[disagg] = min(times[disagg], t), counts
        off, on = times[False], times[True]
        print(f"{name}: without splits {off:.2f} s -> with {on:.2f} s (ratio {on / off:.2f}x); simulations "
              f"{sims[False]['coloc']} -> {sims[True]['coloc']} colocated + {sims[True]['split']} splits\n"
              f"    without: {plans[False]}\n    with:    {plans[True]}")  # fmt: skip


if __name__ == "__main__":
    main()
