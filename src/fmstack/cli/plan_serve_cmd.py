"""`fmstack plan serve`: the cheapest deployment serving a request rate within p99 targets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from fmstack.catalog import load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.cli.common import (
    calibration_argv,
    calibration_for,
    calibration_options,
    catalog_option,
    choice,
    console,
    json_option,
    print_json,
)
from fmstack.cli.plan_serve_render import simulation_status
from fmstack.cli.serve_router import (
    ROUTER_HELP,
    kv_router_config,
    kv_router_options,
    prefix_options,
    prefix_workload,
)
from fmstack.cli.serve_session import SESSION_ROUTER_HELP, session_options, session_workload
from fmstack.cli.serve_spec import resolve_plan_spec, spec_options
from fmstack.errors import InputError
from fmstack.fileio import check_output_path
from fmstack.perfmodel.efficiency import EfficiencyFor
from fmstack.perfmodel.inference import ServeConfig, check_rate
from fmstack.perfmodel.inference_kv import PRECISIONS
from fmstack.perfmodel.inference_sim_io import ROUTERS_SESSION

PLAN_SERVE_EXAMPLE = """Example:

\b
  fmstack plan serve --model llama3.1-70b --qps 20 --input-len 2048 --output-len 256 --ttft-p99 0.5 \\
      --itl-p99 0.05 --html serve-plan.html

\b
  fmstack plan serve --model deepseek-v3 --qps 2 --input-len 2048 --output-len 256 --ttft-p99 2 --itl-p99 0.1 \\
      --instance p5.48xlarge --max-nodes-per-replica 4

\b
  fmstack plan serve --model llama3.1-70b --qps 4 --input-len 512 --output-len 256 --turns 4 --think-time-s 10 \\
      --router session --ttft-p99 1 --itl-p99 0.05 --instance p5.48xlarge
"""


@click.command(epilog=PLAN_SERVE_EXAMPLE)
@click.option("--model", required=True, help="Zoo model name or a model YAML file.")
@click.option("--qps", type=float, required=True, help="Requests per second to serve.")
@click.option("--input-len", type=int, required=True, help="Prompt tokens per request.")
@click.option("--output-len", type=int, required=True, help="Generated tokens per request.")
@click.option("--ttft-p99", type=float, required=True, help="TTFT target at p99 (s).")
@click.option("--itl-p99", type=float, required=True, help="Inter-token latency target at p99 (s).")
@click.option("--instance", "instances", multiple=True,
              help="Instances to consider, comma-separated (as plan train) or repeated [every priced one].")  # fmt: skip
@click.option("--precision", "precisions", multiple=True, type=choice(PRECISIONS), help="[bf16 and fp8].")
@click.option("--seed", type=int, default=0, show_default=True, help="Simulation seed.")
@click.option("--max-nodes-per-replica", type=int, default=4, show_default=True,
              help="Largest replica searched, in whole nodes (TP or PP across them); 1 = one node.")  # fmt: skip
@click.option("--attention-dp/--no-attention-dp", "search_attention_dp", default=True, show_default=True,
              help="Search attention data parallelism for MoE models (ep = tp; estimate serve --attention-dp).")  # fmt: skip
@click.option("--disagg/--no-disagg", "search_disagg", default=True, show_default=True,
              help="Search disaggregated prefill/decode splits (P prefill + D decode replicas, the same layout or a decode pool in another TP / PP / EP).")  # fmt: skip
@click.option("--router", type=choice(ROUTERS_SESSION), default="round-robin", show_default=True,
              help="How requests reach colocated replicas in their p99 check at --qps in all: " + ROUTER_HELP
              + " A split's prefill pool is one shared queue either way." + SESSION_ROUTER_HELP)  # fmt: skip
@kv_router_options
@prefix_options
@session_options
@spec_options(auto=True)
@click.option("--top", type=int, default=8, show_default=True, help="Candidates to show.")
@click.option("--html", "html_path", type=click.Path(path_type=Path), default=None, help="Write an HTML report.")
@calibration_options
@catalog_option
@json_option
def plan_serve_cmd(
    model: str, qps: float, input_len: int, output_len: int, ttft_p99: float, itl_p99: float,
    instances: tuple[str, ...], precisions: tuple[str, ...], seed: int, max_nodes_per_replica: int,
    search_attention_dp: bool, search_disagg: bool, router: str, prefix_groups: int | None, prefix_len: int | None,
    prefix_zipf: float, kv_overlap_weight: float | None, router_temperature: float | None, kv_block_size: int | None,
    turns: int, think_time_s: float | None, top: int, html_path: Path | None, calibration: Path | None, calibration_force: bool, catalog_dir: Path | None,
    as_json: bool, speculative: str, spec_tokens: int | None, spec_acceptance: str | None, draft_model: str | None,
) -> None:  # fmt: skip
    """The cheapest deployment (instance, precision, TP / PP / EP, nodes per replica, replicas) serving a request rate
    within p99 targets; with --calibration, priced with a profile measured on the instances' GPU."""
    from fmstack.perfmodel.inference_disagg import SLO
    from fmstack.perfmodel.inference_plan import plan_serve

    for name, value in (("input-len", input_len), ("output-len", output_len), ("top", top)):
        if value < 1:
            raise InputError(name, f"must be >= 1, got {value}")
    for name, x in (("qps", qps), ("ttft-p99", ttft_p99), ("itl-p99", itl_p99)):
        check_rate(x, name)  # a rate, or a target in seconds: a finite number > 0
    if seed < 0:
        raise InputError("seed", f"must be >= 0, got {seed}")
    prefix = prefix_workload(prefix_groups, prefix_len, prefix_zipf, input_len=input_len, hit_rate=0.0,
                             open_loop=True)  # fmt: skip
    kv = kv_router_config(router.lower(), kv_overlap_weight, router_temperature, kv_block_size)
    if html_path is not None:
        check_output_path(html_path, field="html", example="serve-plan.html")  # before the search, not after it
    cat = load_catalog(catalog_dir)
    arch = cat.model(model)
    sessions = session_workload(turns, think_time_s, cfg=ServeConfig(input_len=input_len, output_len=output_len),
                                max_seq_len=arch.max_seq_len, router=router.lower(), simulate=True, disagg=False,
                                split=None)  # fmt: skip
    spec, spec_auto = resolve_plan_spec(speculative, arch, spec_tokens, spec_acceptance, draft_model, cat)
    names = tuple(n.strip() for v in instances for n in v.split(",") if n.strip()) or None
    efficiency_for = _plan_calibration(cat, names, calibration, calibration_force)
    with simulation_status(as_json) as on_simulate:
        plan = plan_serve(
            cat, arch, qps=qps, input_len=input_len, output_len=output_len, slo=SLO(ttft_s=ttft_p99, itl_s=itl_p99),
            instances=names, precisions=tuple(p.lower() for p in precisions) or None, seed=seed,
            max_nodes_per_replica=max_nodes_per_replica, search_attention_dp=search_attention_dp,
            search_disagg=search_disagg, on_simulate=on_simulate, efficiency_for=efficiency_for,
            router=router.lower(), prefix=prefix, kv_router=kv, speculative=spec, speculative_auto=spec_auto,
            sessions=sessions,
        )  # fmt: skip
    source = (
        None
        if efficiency_for is None
        else efficiency_for(build_cluster(cat, plan.best.instance, 1, part_of_domain=True)).source
    )
    if html_path is not None:
        from fmstack.reports.serve_report import write_serve_plan

        write_serve_plan(plan, html_path, source)
    from fmstack.cli.plan_serve_render import plan_serve_json, render_plan_serve

    extra = calibration_argv(calibration, calibration_force)  # each row's estimate serve command reapplies it
    if as_json:
        data = plan_serve_json(plan, model, top, catalog_dir, seed, extra)
        if source is not None:
            data["efficiency_source"] = source
        print_json(data)
        return
    render_plan_serve(plan, model, top, catalog_dir, seed, extra)
    if source is not None:
        console().print(f"efficiency: {source}", markup=False)
    if html_path is not None:
        console().print(f"report: {html_path}")


def _plan_calibration(
    cat: Any, names: tuple[str, ...] | None, calibration: Path | None, force: bool
) -> EfficiencyFor | None:
    """The profile's efficiency for the searched instances (:func:`calibration_for`: refused before searching where
    one has another GPU, unless forced); without --instance the search covers every priced instance, so say that."""
    from fmstack.perfmodel.inference_plan import searched_instances

    clusters = (
        []
        if calibration is None
        else [build_cluster(cat, n, 1, part_of_domain=True) for n in searched_instances(cat, names)]
    )
    try:
        return calibration_for(calibration, clusters, force)
    except InputError as exc:
        # only the refusal of another catalog GPU's profile offers --calibration-force (not a CPU's, not a bad file)
        if names is not None or force or "--calibration-force" not in exc.message:
            raise
        gpus = ", ".join(sorted({c.gpu.name for c in clusters}))
        raise InputError(exc.field, f"{exc.message}; without --instance plan serve searches every priced instance "
                         f"({gpus} GPUs): name the instances of the profile's GPU with --instance") from None  # fmt: skip
