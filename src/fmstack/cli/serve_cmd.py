"""`fmstack estimate serve`: one serving replica, a disaggregated comparison or split (its text output is in
serve_render.py, `fmstack plan serve` in plan_serve_cmd.py, `estimate rl` in rl_cmd.py)."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import click

from fmstack.catalog import load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.cli.common import (
    calibration_for,
    calibration_options,
    catalog_option,
    choice,
    json_option,
    print_json,
)
from fmstack.cli.serve_checks import check_colocated_flags, check_replicas, check_split, decode_layout
from fmstack.cli.serve_offload import check_offload, kv_offload, offload_option
from fmstack.cli.serve_render import render_serve
from fmstack.cli.serve_router import (
    ROUTER_HELP,
    cached_estimate,
    kv_router_config,
    kv_router_json,
    kv_router_options,
    prefix_options,
    prefix_workload,
)
from fmstack.cli.serve_session import (
    SESSION_ROUTER_HELP,
    mean_turn,
    mean_turn_error,
    mean_turn_json,
    session_options,
    session_workload,
)
from fmstack.cli.serve_spec import resolve_spec, spec_options
from fmstack.errors import InputError
from fmstack.perfmodel.inference import (
    ServeConfig,
    ServeEstimate,
    check_rate,
    deployment,
    estimate_serve,
)
from fmstack.perfmodel.inference_disagg_spec import pools_text
from fmstack.perfmodel.inference_kv import KV_DTYPES, PRECISIONS
from fmstack.perfmodel.inference_plan_candidate import layout_text
from fmstack.perfmodel.inference_sim_io import ROUTERS_SESSION

SERVE_EXAMPLE = """Example:

\b
  fmstack estimate serve --model llama3.1-70b --instance p5.48xlarge --tp 8 --input-len 2048 --output-len 256 \\
      --concurrency 64 --json

\b
  fmstack estimate serve --model llama3.1-70b --instance p5.48xlarge --nodes 2 --tp 4 --precision fp8 \\
      --input-len 3000 --output-len 150 --disagg --ttft-slo 1 --itl-slo 0.02

\b
  fmstack estimate serve --model llama3.1-70b --instance p5.48xlarge --nodes 2 --tp 2 --precision fp8 \\
      --input-len 8192 --output-len 256 --max-num-tokens 2048 --qps 5 --prefill-replicas 6 --decode-replicas 1

\b
  fmstack estimate serve --model llama3.1-8b --instance p5.48xlarge --precision fp8 --input-len 4096 \\
      --output-len 256 --qps 16 --replicas 4 --router kv --prefix-groups 16 --prefix-len 3072

\b
  fmstack estimate serve --model deepseek-v3 --instance p5e.48xlarge --tp 8 --ep 4 --precision fp8 \\
      --input-len 1024 --output-len 2048 --concurrency 1 --speculative mtp --spec-tokens 3
"""


@click.command(epilog=SERVE_EXAMPLE)
@click.option("--model", required=True, help="Zoo model name or a model YAML file.")
@click.option("--instance", required=True, help="Instance or UltraServer name from the catalog.")
@click.option("--nodes", type=int, default=1, show_default=True,
              help="Nodes: one replica's (TP across nodes), or the GPUs to split for --disagg / a split.")  # fmt: skip
@click.option("--tp", type=int, default=1, show_default=True, help="Tensor parallel degree of a replica.")
@click.option("--pp", type=int, default=1, show_default=True, help="Pipeline stages of a replica.")
@click.option("--ep", type=int, default=1, show_default=True, help="Expert parallel degree inside TP (MoE).")
@click.option("--precision", type=choice(PRECISIONS), default="bf16", show_default=True, help="Weights/GEMMs.")
@click.option("--kv-dtype", type=choice(KV_DTYPES), default=None, help="KV cache [fp8 with fp8/fp4 weights].")
@click.option("--attention-precision", type=choice(PRECISIONS), default=None,
              help="Attention projections, when the checkpoint keeps them apart [--precision].")  # fmt: skip
@click.option("--attention-dp", is_flag=True, help="MoE: attention data-parallel over the tp GPUs, experts by ep = tp.")
@click.option("--input-len", type=int, required=True, help="Prompt tokens per request.")
@click.option("--output-len", type=int, required=True, help="Generated tokens per request.")
@click.option("--concurrency", type=int, default=None, help="Clients in a closed loop [as many as fit].")
@click.option("--qps", "request_rate_per_s", type=float, default=None,
              help="Or: Poisson requests/s (open loop; with --replicas the deployment's total).")  # fmt: skip
@click.option("--replicas", type=int, default=1, show_default=True,
              help="With --qps: the deployment has this many colocated replicas behind --router and --qps is its "
              "total rate; the replica shown is one of them (plan serve's p99 check).")  # fmt: skip
@click.option("--router", type=choice(ROUTERS_SESSION), default="round-robin", show_default=True,
              help="With --replicas > 1: " + ROUTER_HELP + SESSION_ROUTER_HELP)  # fmt: skip
@kv_router_options
@prefix_options
@session_options
@click.option("--max-batch", type=int, default=None, help="Engine limit on running sequences [memory].")
@click.option("--prefix-hit-rate", type=float, default=0.0, show_default=True, help="Prompt share in the cache.")
@click.option("--scheduler", type=choice(("continuous", "static")), default="continuous", show_default=True)
@click.option("--max-num-tokens", type=int, default=8192, show_default=True, help="Prompt tokens per iteration.")
@click.option("--simulate/--no-simulate", default=True, show_default=True, help="Percentiles by simulation.")
@click.option("--seed", type=int, default=0, show_default=True, help="Simulation seed.")
@click.option("--length-spread", type=float, default=0.0, show_default=True,
              help="Simulated lengths uniform in mean x [1 - s, 1 + s].")  # fmt: skip
@click.option(
    "--disagg",
    is_flag=True,
    help="Compare colocated and disaggregated serving on all the nodes' GPUs (mean-field, the SLO on means).",
)
@click.option(
    "--prefill-replicas",
    type=int,
    default=None,
    help="With --decode-replicas and --qps: simulate this split (P prefill + D decode replicas of the "
    "layout on --nodes) at --qps requests/s for the whole deployment; the colocated rows then show one of "
    "P + D colocated replicas behind --router at --qps in all. With --prefix-groups each prefill replica caches "
    "prefixes in its KV pool, prompts routed by --router cache-aware|kv (else one global prefill queue); with "
    "--turns each caches its sessions' prompts and every --router picks the prefill replica per turn.",
)
@click.option("--decode-replicas", type=int, default=None, help="Decode replicas of the split (--prefill-replicas).")
@click.option("--decode-tp", type=int, default=None, help="TP of a decode replica of the split [--tp].")
@click.option("--decode-pp", type=int, default=None, help="Pipeline stages of a decode replica of the split [--pp].")
@click.option("--decode-ep", type=int, default=None, help="EP of a decode replica of the split [--ep].")
@click.option("--decode-attention-dp/--no-decode-attention-dp", default=None,
              help="Attention DP in the split's decode pool [--attention-dp].")  # fmt: skip
@click.option("--ttft-slo", type=float, default=1.0, show_default=True, help="TTFT target for --disagg (s).")
@click.option("--itl-slo", type=float, default=0.05, show_default=True, help="ITL target for --disagg (s).")
@spec_options()
@offload_option
@calibration_options
@catalog_option
@json_option
def serve_cmd(
    model: str, instance: str, nodes: int, catalog_dir: Path | None, simulate: bool, seed: int, length_spread: float,
    disagg: bool, ttft_slo: float, itl_slo: float, prefill_replicas: int | None, decode_replicas: int | None,
    decode_tp: int | None, decode_pp: int | None, decode_ep: int | None, decode_attention_dp: bool | None,
    replicas: int, router: str, prefix_groups: int | None, prefix_len: int | None, prefix_zipf: float,
    kv_overlap_weight: float | None, router_temperature: float | None, kv_block_size: int | None,
    turns: int, think_time_s: float | None,
    calibration: Path | None, calibration_force: bool, as_json: bool, speculative: str, spec_tokens: int | None,
    spec_acceptance: str | None, draft_model: str | None, **options: Any,
) -> None:  # fmt: skip
    """Predict TTFT, inter-token latency, throughput, KV cache and the bottleneck of one serving replica; with
    --prefill-replicas P --decode-replicas D --qps R, simulate a disaggregated split of the nodes at R req/s (the
    decode pool in another layout with --decode-tp / --decode-pp / --decode-ep / --[no-]decode-attention-dp:
    heterogeneous pools; --attention-dp: attention DP in both pools unless --no-decode-attention-dp). With
    --replicas N --qps R, the replica is one of N behind --router at R req/s in all. With --calibration, a profile
    measured on the cluster's GPU (fmstack bench --out) replaces the default efficiencies."""
    if seed < 0:
        raise InputError("seed", f"must be >= 0, got {seed}")
    for flag, x in (("ttft-slo", ttft_slo), ("itl-slo", itl_slo)):
        check_rate(x, flag)  # a target in seconds: the same rule
    cat = load_catalog(catalog_dir)
    arch = cat.model(model)
    cluster = build_cluster(cat, instance, nodes, part_of_domain=True)
    efficiency_for = calibration_for(calibration, [cluster], calibration_force)  # a split's nodes: the same GPU
    efficiency = None if efficiency_for is None else efficiency_for(cluster)
    offload_gib = options.pop("kv_offload_gib")
    values: dict[str, Any] = {k: (v.lower() if isinstance(v, str) else v) for k, v in options.items()}
    spec = resolve_spec(speculative, arch, spec_tokens, spec_acceptance, draft_model, cat)
    cfg = ServeConfig(**values, speculative=spec)
    decode_cfg = decode_layout(cfg, arch, cluster, (decode_tp, decode_pp, decode_ep, decode_attention_dp),
                                prefill_replicas)  # fmt: skip
    split = check_split(prefill_replicas, decode_replicas, cfg, cluster, nodes, decode_cfg)
    if split is None:
        check_colocated_flags(cfg, arch, cluster, nodes, disagg)
    if cfg.scheduler == "static" and (split is not None or disagg):
        raise InputError("scheduler", "static batching is modelled for one colocated replica only: the "
                         "disaggregated pools (--disagg, --prefill-replicas / --decode-replicas) batch continuously; "
                         "drop --scheduler static")  # fmt: skip
    sim_note = None
    if simulate and cfg.scheduler == "static" and cfg.attention_dp:
        simulate = False
        sim_note = ("not simulated: static batching under attention DP is not modelled by the simulation (each rank "
                    "would form its own batch); the analytic means only")  # fmt: skip
    router = router.lower()
    kv = kv_router_config(router, kv_overlap_weight, router_temperature, kv_block_size)
    check_replicas(replicas, cfg, split, disagg)
    prefix = prefix_workload(prefix_groups, prefix_len, prefix_zipf, input_len=cfg.input_len,
                             hit_rate=cfg.prefix_hit_rate, open_loop=cfg.request_rate_per_s is not None)  # fmt: skip
    if prefix is not None and not simulate:
        raise InputError("prefix-groups", "a shared-prefix workload is simulated for colocated replicas: drop "
                         "--no-simulate")  # fmt: skip
    if prefix is not None and disagg:  # a split's prefill caches: --prefill-replicas / --decode-replicas simulate them
        raise InputError("prefix-groups", "--disagg's mean-field comparison prices whole prompts; drop --disagg "
                         "(--prefill-replicas P --decode-replicas D simulate the prefill pool's prefix caches)")  # fmt: skip
    sessions = session_workload(turns, think_time_s, cfg=cfg, max_seq_len=arch.max_seq_len, router=router,
                                simulate=simulate, disagg=disagg, split=split)  # fmt: skip
    offload_gib = check_offload(offload_gib, cfg=cfg, cluster=cluster, split=split, disagg=disagg,
                                simulate=simulate, prefix=prefix, sessions=sessions)  # fmt: skip
    behind = replicas if split is None else sum(split)  # the colocated replica is one of these behind the router
    replica_cfg = (
        cfg if behind == 1 else replace(cfg, request_rate_per_s=cfg.request_rate_per_s / behind)  # type: ignore[operator]
    )
    first_d = None if sessions is None or prefix is None else deployment(arch, cluster, replica_cfg)  # its KV pool
    priced, first_hit = mean_turn(replica_cfg, sessions, router, behind, prefix, first_d)  # what the means price
    note = analytic_note = None
    try:
        try:
            est = estimate_serve(arch, cluster, priced, efficiency=efficiency)
        except InputError as first:
            if sessions is not None and first.field == "qps":
                raise mean_turn_error(first, priced) from None
            if prefix is None or first.field != "qps":
                raise
            # prefix hits may take what full prompts cannot
            est, analytic_note = cached_estimate(arch, cluster, replica_cfg, prefix, behind, router, efficiency)
    except InputError as exc:  # a split can serve what one colocated replica at qps / (P + D) cannot
        if split is None or exc.field != "qps":
            if exc.field == "qps" and replicas > 1:
                raise InputError("qps", f"{exc.message} (one of --replicas {replicas}: --qps {cfg.request_rate_per_s:g} "
                                 "is the deployment's total rate)") from None  # fmt: skip
            raise
        else:
            replica_cfg = replace(cfg, request_rate_per_s=None)  # the mean turn under sessions, as the keys say
            est = estimate_serve(arch, cluster, replace(priced, request_rate_per_s=None), efficiency=efficiency)
            simulate = False
            note = f"colocated: {exc.message}; shown at the most clients a replica holds, not simulated"
    session_keys: dict[str, Any] = {}
    if sessions is not None:  # the config the user gave (a turn's new tokens); the priced mean turn in its own keys
        est, session_keys = (
            replace(est, config=replica_cfg),
            mean_turn_json(priced, sessions, router, behind, first_hit),
        )
    fleet: dict[str, Any] = {}
    if simulate:
        est, sim_note, fleet = _with_percentiles(est, arch, cluster, replica_cfg, seed, length_spread, efficiency,
                                                 (behind, router), prefix, kv, sessions, offload_gib)  # fmt: skip
    data = est.to_json() | session_keys | fleet
    if cfg.request_rate_per_s is not None:  # the open loop's arrivals: one of ``replicas`` behind ``router``
        data |= {"replicas": behind, "router": router, "deployment_rate_per_s": cfg.request_rate_per_s}
        data |= kv_router_json(kv)
    if efficiency is not None:
        data["efficiency_source"] = efficiency.source
    if note is not None:
        data["colocated_note"] = note
    if analytic_note is not None:
        data["analytic_note"] = analytic_note
    if sim_note is not None:
        data["simulation_note"] = sim_note
    if split is not None:
        from fmstack.cli.serve_split import split_json

        data["disaggregated_simulation"] = split_json(cat, arch, instance, cfg, split, seed, length_spread,
                                                      decode_cfg, efficiency_for, prefix, router, kv, sessions,
                                                      kv_offload(offload_gib, deployment(arch, cluster, cfg), cluster))  # fmt: skip
    if disagg:
        from fmstack.perfmodel.inference_disagg import SLO, compare_disaggregation

        slo = SLO(ttft_s=ttft_slo, itl_s=itl_slo)
        data["disaggregation"] = asdict(compare_disaggregation(arch, cluster, cfg, slo, efficiency=efficiency))
        data["disaggregation"]["layout"] = layout_text(cfg)  # both pools (DistServe's equal-layout comparison)
        data["disaggregation"]["speculative_pools"] = pools_text(spec)
    if as_json:
        print_json(data)
        return
    render_serve(est, data)


def _with_percentiles(
    est: ServeEstimate, arch: Any, cluster: Any, cfg: ServeConfig, seed: int, spread: float, efficiency: Any = None,
    behind: tuple[int, str] = (1, "round-robin"), prefix: Any = None, kv: Any = None, sessions: Any = None,
    offload_gib: float = 0.0,
) -> tuple[ServeEstimate, str | None, dict[str, Any]]:  # fmt: skip
    """``est`` with the simulation's percentiles and means, or unchanged and why it was not simulated (an open-loop
    rate too near the replica's capacity for a run to reach the steady state). ``behind``: the replica is one of
    this many behind this router (:attr:`fmstack.perfmodel.inference_sim.SimConfig.router`; ``cfg``'s rate is the
    replica's); a router that chooses from the replicas' state, or a shared-prefix workload ``prefix``, simulates
    them together, and the JSON keys of :meth:`fmstack.perfmodel.inference_sim_fleet.FleetResult.to_json` come
    back (else an empty dict); ``kv``: the ``kv`` router's settings; ``sessions``: a multi-turn workload
    (:mod:`fmstack.perfmodel.inference_session`), simulated with the replicas together (closed loop: one replica);
    ``offload_gib``: the host KV tier per replica (:mod:`fmstack.cli.serve_offload`; 0: none)."""
    from fmstack.perfmodel.inference_closed_loop import simulate_closed_loop
    from fmstack.perfmodel.inference_open_loop import needs_fleet, simulate_open_loop, simulate_open_loop_fleet

    d = deployment(arch, cluster, cfg, efficiency)
    if cfg.request_rate_per_s is None and sessions is not None:  # closed loop: one replica's clients
        from fmstack.cli.serve_session import closed_loop_sessions

        return closed_loop_sessions(est, d, cfg, sessions, seed=seed, spread=spread)
    if cfg.request_rate_per_s is not None and needs_fleet(behind[1], prefix, sessions):
        run, fleet = simulate_open_loop_fleet(d, cfg, cfg.request_rate_per_s, length_spread=spread, seed=seed,
                                              replicas=behind[0], router=behind[1], prefix=prefix,
                                              kv_router=kv, sessions=sessions,
                                              kv_offload=kv_offload(offload_gib, d, cluster))  # fmt: skip
        if fleet is None:
            return est, f"not simulated: {run.near_capacity_reason()}; the analytic means only", {}
        out = fleet.result
        extra: dict[str, Any] = fleet.to_json()
        if prefix is not None:
            extra |= {"prefix_groups": prefix.groups, "prefix_len": prefix.prefix_len, "prefix_zipf": prefix.zipf}
        return replace(est, percentiles=out.percentiles(), simulated=out.means()), None, extra
    if cfg.request_rate_per_s is not None:  # warm-up and measured requests by Little's law and the queue's relaxation
        run, open_result = simulate_open_loop(d, cfg, cfg.request_rate_per_s, length_spread=spread, seed=seed,
                                              replicas=behind[0], router=behind[1])  # fmt: skip
        if open_result is None:
            return est, f"not simulated: {run.near_capacity_reason()}; the analytic means only", {}
        result = open_result
    else:  # closed loop: warm-up, measured window, cool-down and the clients simulated as closed_loop_config says
        result = simulate_closed_loop(d, cfg, max(1, round(est.concurrency)), est.latency_s, length_spread=spread,
                                      seed=seed)  # fmt: skip
    return replace(est, percentiles=result.percentiles(), simulated=result.means()), None, {}
