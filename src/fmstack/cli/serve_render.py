"""The text output of `fmstack estimate serve` (serve_cmd.py builds the result and its JSON; a split's tables are in
serve_split.py)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from fmstack.cli.common import console
from fmstack.cli.serve_offload import offload_text
from fmstack.cli.serve_session import session_text
from fmstack.perfmodel.inference import ServeEstimate


def render_serve(est: ServeEstimate, data: dict[str, Any]) -> None:
    """Print ``estimate serve``'s result: ``est`` and the JSON ``data`` built from it (the keys beyond ``est``'s
    pick the lines shown)."""
    c = est.config
    out = console()
    out.print(
        f"[bold]{est.model}[/] on {est.num_gpus} {est.instance} GPUs: tp {c.tp} pp {c.pp} ep {c.ep}, {c.precision} "
        f"weights, {c.kv} KV, {c.input_len}/{c.output_len} tokens, {est.concurrency:.4g} clients ({est.running} running, "
        f"max {est.max_concurrency}), {c.scheduler} batching"
    )
    p, sim = est.percentiles or {}, est.simulated or {}
    title = "latency (s): simulation, and the analytic model's mean" if sim else "latency (s): analytic model"
    cols = ("metric", "mean (sim)", "p50 (sim)", "p90 (sim)", "p99 (sim)", "mean (analytic)") if sim else (
        "metric", "mean (analytic)")  # fmt: skip
    table = Table(*cols, title=title, title_justify="left")
    for name, mean in (("ttft", est.ttft_s), ("itl", est.itl_s), ("latency", est.latency_s)):
        cells = (
            [f"{sim[f'{name}_mean_s_sim']:.4f}", *(f"{p[f'{name}_p{q}_s']:.4f}" for q in (50, 90, 99))] if sim else []
        )
        if name == "itl" and c.output_len == 1:  # one output token: no gap (the JSON keeps its 0.0)
            cells, mean_text = ["-" for _ in cells], "- (1 output token: no gap)"
        else:
            mean_text = f"{mean:.4f}"
        table.add_row(name, *cells, mean_text)
    out.print(table)
    if sim:
        one = (f"one of {data['replicas']} replicas behind a {data['router']} router at "
               f"{data['deployment_rate_per_s']:g} req/s in all; " if data.get("replicas", 1) > 1 else "")  # fmt: skip
        if "replica_request_share" in data and "deployment_rate_per_s" in data:
            one = _fleet_text(data)
        if "sessions" in data:
            one += session_text(data) + "; "
        if "kv_offload" in data:
            one += offload_text(data) + "; "
        out.print(f"simulated: {one}{sim['requests_measured_sim']:.0f} requests measured; analytic throughput and "
                  "memory:")  # fmt: skip
    elif "mean_prompt_tokens" in data:  # sessions, --no-simulate: say what the analytic means priced
        behind = f" behind the {data['router']} router" if "router" in data else " (one replica)"
        out.print(f"sessions, analytic only: the means price the mean turn, a {data['mean_prompt_tokens']:,}-token "
                  f"prompt, {data['history_hit_share']:.1%} of it cached history{behind} (first / later turns and "
                  "percentiles need the simulation: drop --no-simulate)")  # fmt: skip
    out.print(
        f"{est.output_tokens_per_s:,.0f} output tokens/s ({est.output_tokens_per_s_per_gpu:,.0f} per GPU), "
        f"{est.requests_per_s:.2f} requests/s; weights {est.weights_gib_per_gpu:.1f} GiB/GPU, KV cache "
        f"{est.kv_cache_gib:.1f} GiB of a {est.kv_pool_gib:.1f} GiB pool ({est.kv_bytes_per_token / 1024:.0f} KiB/token)"
    )
    title = "mean iteration" + (" (static batching: a batch's prefill and its decode iterations, averaged)"
                                if c.scheduler == "static" else "")  # fmt: skip
    parts = Table("part of an iteration", "ms", "share", title=title, title_justify="left")
    total = sum(est.iteration_parts_s.values())
    for name, value in est.iteration_parts_s.items():
        if value > 0:
            parts.add_row(name, f"{value * 1e3:.2f}", f"{100 * value / total:5.1f} %")
    out.print(parts)
    out.print(f"bottleneck: [bold]{est.bottleneck}[/]")
    if est.speculative is not None:
        sp = est.speculative
        acc = ", ".join(f"{a:g}" for a in sorted(set(sp["acceptance"]), key=sp["acceptance"].index))
        out.print(
            f"speculative decoding: {sp['method']}, {sp['tokens']} draft tokens, acceptance {acc}: "
            f"{sp['mean_tokens_per_step']:.2f} tokens per iteration; speed-up vs without: x{sp['speedup_per_user']:.2f} "
            f"per user (ITL {sp['itl_s_without'] * 1e3:.2f} -> {est.itl_s * 1e3:.2f} ms), "
            f"x{sp['speedup_output_tokens_per_s']:.2f} output tokens/s",
            markup=False,
        )
    for key in ("analytic_note", "simulation_note"):
        if key in data:
            out.print(data[key], markup=False)
    if "efficiency_source" in data:
        out.print(f"efficiency: {data['efficiency_source']}", markup=False)
    if "disaggregation" in data:
        dz = data["disaggregation"]
        out.print(
            f"disaggregation (DistServe's mean field, both pools {dz['layout']}) on {dz['num_gpus']} GPUs: colocated "
            f"{dz['colocated_rps']:.2f} req/s vs disaggregated "
            f"{dz['disagg_rps']:.2f} req/s (prefill:decode replicas {dz['prefill_to_decode']}, KV "
            f"{dz['kv_bytes_per_request'] / 1e6:.0f} MB in {dz['kv_transfer_s'] * 1e3:.2f} ms over {dz['kv_link']})"
        )
        out.print(dz["why"])
        if dz.get("speculative_pools"):
            out.print(f"speculative decoding: {dz['speculative_pools']}", markup=False)
    if "disaggregated_simulation" in data:
        from fmstack.cli.serve_split import render_split

        if "colocated_note" in data:
            out.print(data["colocated_note"], markup=False)
        render_split(data["disaggregated_simulation"], one_token=est.config.output_len == 1)


def _fleet_text(data: dict[str, Any]) -> str:
    """The joint simulation's line: replicas, router, shares, each replica's mean running sequences over its most
    (``replica_utilization``, the share of time an iteration runs, reads ~100 % whenever a decode is in flight: in the
    JSON only) and the prefix cache's hit rate."""
    share = ", ".join(f"{x:.0%}" for x in data["replica_request_share"])
    running = ", ".join(f"{x:.1f}" for x in data["replica_mean_running_seqs"])
    most = data["replica_max_running_seqs"]
    fill = ", ".join(f"{x:.0%}" for x in data["replica_batch_occupancy"])
    hit = (f"; prefix cache hits {data['prefix_hit_rate_simulated']:.1%} of requests, "
           f"{data['prefix_token_hit_rate_simulated']:.1%} of prompt tokens" if "prefix_hit_rate_simulated" in data
           else "")  # fmt: skip
    return (f"{data['replicas']} replica(s) behind a {data['router']} router simulated together at "
            f"{data['deployment_rate_per_s']:g} req/s in all, percentiles over all of them (requests {share}; running "
            f"{running} of {most:g} sequences on average: {fill}{hit}); ")  # fmt: skip
