"""`fmstack estimate serve`, `fmstack estimate rl` and `fmstack plan serve`: serving and RL post-training."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from fmstack.catalog import load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.cli.common import catalog_option, console, json_option, no_wrap, number_text, parts_table, print_json
from fmstack.errors import InputError
from fmstack.perfmodel.config import SHARDING_CHOICES
from fmstack.perfmodel.inference import ServeConfig, ServeEstimate, deployment, estimate_serve
from fmstack.perfmodel.inference_kv import KV_DTYPES, PRECISIONS

SERVE_EXAMPLE = """Example:

\b
  fmstack estimate serve --model llama3.1-70b --instance p5.48xlarge --tp 8 --input-len 2048 --output-len 256 \\
      --concurrency 64 --json

\b
  fmstack estimate serve --model llama3.1-70b --instance p5.48xlarge --nodes 2 --tp 4 --precision fp8 \\
      --input-len 3000 --output-len 150 --disagg --ttft-slo 1 --itl-slo 0.02
"""
RL_EXAMPLE = """Example:

\b
  fmstack estimate rl --model llama3.1-8b --instance p5.48xlarge --nodes 2 --algorithm grpo --prompts 256 \\
      --samples 8 --prompt-len 1024 --response-len 1024 --rollout-tp 1 --train-tp 1 --placement colocated
"""
PLAN_SERVE_EXAMPLE = """Example:

\b
  fmstack plan serve --model llama3.1-70b --qps 20 --input-len 2048 --output-len 256 --ttft-p99 0.5 \\
      --itl-p99 0.05 --html serve-plan.html

\b
  fmstack plan serve --model deepseek-v3 --qps 2 --input-len 2048 --output-len 256 --ttft-p99 2 --itl-p99 0.1 \\
      --instance p5.48xlarge --max-nodes-per-replica 4
"""


def _choice(values: tuple[str, ...]) -> click.Choice[str]:
    return click.Choice(values, case_sensitive=False)


@click.command(epilog=SERVE_EXAMPLE)
@click.option("--model", required=True, help="Zoo model name or a model YAML file.")
@click.option("--instance", required=True, help="Instance or UltraServer name from the catalog.")
@click.option("--nodes", type=int, default=1, show_default=True, help="Nodes (for --disagg: the GPUs to split).")
@click.option("--tp", type=int, default=1, show_default=True, help="Tensor parallel degree of a replica.")
@click.option("--pp", type=int, default=1, show_default=True, help="Pipeline stages of a replica.")
@click.option("--ep", type=int, default=1, show_default=True, help="Expert parallel degree inside TP (MoE).")
@click.option("--precision", type=_choice(PRECISIONS), default="bf16", show_default=True, help="Weights/GEMMs.")
@click.option("--kv-dtype", type=_choice(KV_DTYPES), default=None, help="KV cache [fp8 with fp8/fp4 weights].")
@click.option("--attention-precision", type=_choice(PRECISIONS), default=None,
              help="Attention projections, when the checkpoint keeps them apart [--precision].")  # fmt: skip
@click.option("--attention-dp", is_flag=True, help="MoE: attention data-parallel over the tp GPUs, experts by ep = tp.")
@click.option("--input-len", type=int, required=True, help="Prompt tokens per request.")
@click.option("--output-len", type=int, required=True, help="Generated tokens per request.")
@click.option("--concurrency", type=int, default=None, help="Clients in a closed loop [as many as fit].")
@click.option("--qps", "request_rate_per_s", type=float, default=None, help="Or: Poisson requests/s (open loop).")
@click.option("--max-batch", type=int, default=None, help="Engine limit on running sequences [memory].")
@click.option("--prefix-hit-rate", type=float, default=0.0, show_default=True, help="Prompt share in the cache.")
@click.option("--scheduler", type=_choice(("continuous", "static")), default="continuous", show_default=True)
@click.option("--max-num-tokens", type=int, default=8192, show_default=True, help="Prompt tokens per iteration.")
@click.option("--simulate/--no-simulate", default=True, show_default=True, help="Percentiles by simulation.")
@click.option("--seed", type=int, default=0, show_default=True, help="Simulation seed.")
@click.option("--length-spread", type=float, default=0.0, show_default=True,
              help="Simulated lengths uniform in mean x [1 - s, 1 + s].")  # fmt: skip
@click.option("--disagg", is_flag=True, help="Compare colocated and disaggregated serving on all the nodes' GPUs.")
@click.option("--ttft-slo", type=float, default=1.0, show_default=True, help="TTFT target for --disagg (s).")
@click.option("--itl-slo", type=float, default=0.05, show_default=True, help="ITL target for --disagg (s).")
@catalog_option
@json_option
def serve_cmd(
    model: str, instance: str, nodes: int, catalog_dir: Path | None, simulate: bool, seed: int, length_spread: float,
    disagg: bool, ttft_slo: float, itl_slo: float, as_json: bool, **options: Any,
) -> None:  # fmt: skip
    """Predict TTFT, inter-token latency, throughput, KV cache and the bottleneck of one serving replica."""
    cat = load_catalog(catalog_dir)
    arch = cat.model(model)
    cluster = build_cluster(cat, instance, nodes)
    values: dict[str, Any] = {k: (v.lower() if isinstance(v, str) else v) for k, v in options.items()}
    cfg = ServeConfig(**values)
    est = estimate_serve(arch, cluster, cfg)
    if simulate:
        est = _with_percentiles(est, arch, cluster, cfg, seed, length_spread)
    data = est.to_json()
    if disagg:
        from fmstack.perfmodel.inference_disagg import SLO, compare_disaggregation

        data["disaggregation"] = asdict(compare_disaggregation(arch, cluster, cfg, SLO(ttft_s=ttft_slo, itl_s=itl_slo)))
    if as_json:
        print_json(data)
        return
    _render_serve(est, data)


def _with_percentiles(
    est: ServeEstimate, arch: Any, cluster: Any, cfg: ServeConfig, seed: int, spread: float
) -> ServeEstimate:
    from dataclasses import replace

    from fmstack.perfmodel.inference_closed_loop import simulate_closed_loop
    from fmstack.perfmodel.inference_sim import SimConfig, simulate

    d = deployment(arch, cluster, cfg)
    clients = max(1, round(est.concurrency))
    if cfg.request_rate_per_s is not None:
        # enough requests for stable percentiles, at most ~20k iterations (each ~0.5 ms of Python)
        n = max(10, min(1000, max(100, 3 * clients), 20_000 * clients // est.config.output_len))
        sim = SimConfig(request_rate_per_s=cfg.request_rate_per_s, num_requests=n, warmup_requests=n // 5,
                        length_spread=spread, seed=seed)  # fmt: skip
        result = simulate(d, cfg, sim)
    else:  # closed loop: warm-up, measured window, cool-down and the clients simulated as closed_loop_config says
        result = simulate_closed_loop(d, cfg, clients, est.latency_s, length_spread=spread, seed=seed)
    return replace(est, percentiles=result.percentiles(), simulated=result.means())


def _render_serve(est: ServeEstimate, data: dict[str, Any]) -> None:
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
        out.print(f"simulated: {sim['requests_measured_sim']:.0f} requests measured; analytic throughput and memory:")
    out.print(
        f"{est.output_tokens_per_s:,.0f} output tokens/s ({est.output_tokens_per_s_per_gpu:,.0f} per GPU), "
        f"{est.requests_per_s:.2f} requests/s; weights {est.weights_gib_per_gpu:.1f} GiB/GPU, KV cache "
        f"{est.kv_cache_gib:.1f} GiB of a {est.kv_pool_gib:.1f} GiB pool ({est.kv_bytes_per_token / 1024:.0f} KiB/token)"
    )
    parts = Table("part of an iteration", "ms", "share", title="mean iteration", title_justify="left")
    total = sum(est.iteration_parts_s.values())
    for name, value in est.iteration_parts_s.items():
        if value > 0:
            parts.add_row(name, f"{value * 1e3:.2f}", f"{100 * value / total:5.1f} %")
    out.print(parts)
    out.print(f"bottleneck: [bold]{est.bottleneck}[/]")
    if "disaggregation" in data:
        dz = data["disaggregation"]
        out.print(
            f"disaggregation on {dz['num_gpus']} GPUs: colocated {dz['colocated_rps']:.2f} req/s vs disaggregated "
            f"{dz['disagg_rps']:.2f} req/s (prefill:decode replicas {dz['prefill_to_decode']}, KV "
            f"{dz['kv_bytes_per_request'] / 1e6:.0f} MB in {dz['kv_transfer_s'] * 1e3:.2f} ms over {dz['kv_link']})"
        )
        out.print(dz["why"])


@click.command(epilog=RL_EXAMPLE)
@click.option("--model", required=True, help="Actor (policy) model.")
@click.option("--critic", default=None, help="Critic / reward model [the actor's architecture].")
@click.option("--instance", required=True, help="Instance name from the catalog.")
@click.option(
    "--nodes", type=int, default=1, show_default=True, help="Nodes for the whole step (rollout and training)."
)
@click.option("--algorithm", type=_choice(("grpo", "ppo")), default="grpo", show_default=True)
@click.option("--prompts", "prompts_per_step", type=int, default=256, show_default=True, help="Prompts per step.")
@click.option("--samples", "samples_per_prompt", type=int, default=8, show_default=True, help="Responses/prompt.")
@click.option("--prompt-len", type=int, default=1024, show_default=True, help="Prompt tokens (mean).")
@click.option("--response-len", type=int, default=1024, show_default=True, help="Response tokens (mean).")
@click.option("--placement", type=_choice(("colocated", "split")), default="colocated", show_default=True)
@click.option("--rollout-nodes", type=int, default=None, help="Split: nodes that generate [half].")
@click.option("--async", "async_split", is_flag=True, help="Split: overlap rollout with training (one step stale).")
@click.option("--max-trajectory-age", type=int, default=1, show_default=True,
              help="With --async: training steps a trajectory may lag (NeMo RL max_trajectory_age_steps); >= 2 "
              "streams the rollout across steps (no batch tail, more in flight).")  # fmt: skip
@click.option("--rollout-tp", type=int, default=8, show_default=True, help="TP of each generation replica.")
@click.option("--rollout-precision", type=_choice(PRECISIONS), default="bf16", show_default=True)
@click.option("--train-tp", type=int, default=8, show_default=True, help="TP of the trained models.")
@click.option("--train-pp", type=int, default=1, show_default=True)
@click.option("--train-cp", type=int, default=1, show_default=True, help="Context parallel degree of training.")
@click.option("--train-ep", type=int, default=1, show_default=True,
              help="Expert parallel degree of training (MoE; inside data parallelism).")  # fmt: skip
@click.option("--train-sharding", type=_choice(SHARDING_CHOICES), default=None,
              help="ZeRO / FSDP stage of the trained models [fsdp at train tp = pp = 1, else zero1].")  # fmt: skip
@click.option("--epochs", type=int, default=1, show_default=True, help="PPO epochs over the batch.")
@click.option("--minibatches", type=int, default=1, show_default=True, help="Optimizer steps per epoch.")
@click.option("--reward-model/--rule-reward", default=False, show_default=True, help="Learned reward model.")
@click.option("--reference/--no-reference", default=True, show_default=True, help="KL reference policy.")
@click.option("--old-logprob/--no-old-logprob", default=True, show_default=True,
              help="Recompute the rollout policy's log-probs with the trainer (veRL, NeMo RL do).")  # fmt: skip
@click.option("--rollout-memory-fraction", type=float, default=None,
              help="Engine weights + KV pool as a share of each rollout GPU's memory (vLLM gpu_memory_utilization) "
              "[0.5 colocated; split: 0.9 of what the weights leave].")  # fmt: skip
@click.option("--length-spread", type=float, default=0.0, show_default=True,
              help="Prompt and response lengths uniform in mean x [1 - s, 1 + s]; > 0 simulates the rollout's "
              "long tail.")  # fmt: skip
@click.option("--seed", type=int, default=0, show_default=True, help="Rollout simulation seed.")
@click.option("--response-cap", type=int, default=None,
              help="Token limit per response (NeMo RL: max_total_sequence_length - prompt): one response per replica "
              "runs to it after the others end [no cap tail].")  # fmt: skip
@click.option("--offload/--no-offload", default=None,
              help="Colocated: park the trained models' weights and optimizer state in host memory during "
              "generation (host copies each step, less GPU memory; NeMo RL always does) [off, as veRL's defaults].")  # fmt: skip
@click.option("--compare", is_flag=True, help="Also compare colocated, split and split --async on the same nodes.")
@catalog_option
@json_option
def rl_cmd(
    model: str, critic: str | None, instance: str, nodes: int, compare: bool, catalog_dir: Path | None,
    as_json: bool, **options: Any,
) -> None:  # fmt: skip
    """Predict one PPO / GRPO step: rollout, forward passes, training, weight sync, and the bottleneck."""
    from fmstack.perfmodel.rl import RLConfig, compare_placements, estimate_rl

    cat = load_catalog(catalog_dir)
    actor = cat.model(model)
    critic_arch = cat.model(critic) if critic else None
    cluster = build_cluster(cat, instance, nodes)
    values: dict[str, Any] = {k: (v.lower() if isinstance(v, str) else v) for k, v in options.items()}
    cfg = RLConfig(**values)
    # the long-tail simulation takes seconds for long responses: a spinner on terminals (not for --json)
    busy = cfg.length_spread > 0 and not as_json
    with console().status("simulating each rollout replica's batch") if busy else nullcontext():
        est = estimate_rl(actor, cluster, cfg, critic=critic_arch)
        others = compare_placements(actor, cluster, cfg, critic=critic_arch) if compare else {}
        hint = _offload_hint(actor, cluster, cfg, critic_arch, est)
    if as_json:
        data = est.to_json()
        if hint:
            data["hint"] = hint
        if others:
            data["placements"] = {k: {"step_time_s": v.step_time_s, "parts_s": v.parts_s, "bottleneck": v.bottleneck,
                                      "fits": v.fits, "memory": v.memory} for k, v in others.items()}  # fmt: skip
        print_json(data)
        return
    out = console()
    out.print(
        f"[bold]{est.model}[/] {cfg.algorithm.upper()} on {est.num_gpus} {est.instance} GPUs ({cfg.placement}"
        f"{', async' if cfg.async_split else ''}): {cfg.prompts_per_step} prompts x {cfg.samples_per_prompt} samples, "
        f"{cfg.prompt_len}+{cfg.response_len} tokens; rollout on {est.rollout_gpus} GPUs (tp {cfg.rollout_tp}, "
        f"{est.rollout_concurrency} sequences per replica), training on {est.train_gpus} GPUs (tp {cfg.train_tp})"
    )
    out.print(parts_table("RL step", "phase", est.parts_s, est.step_time_s, digits=2))
    _render_rl_memory(est.memory)
    b = est.rollout
    out.print(
        f"rollout {est.rollout_tokens_per_s:,.0f} tokens/s: each replica's {b['waves']:.2f} fills of the engine take "
        f"{b['time_s']:.2f} s, {b['drain_s']:.2f} s more than at the steady rate (the last wave"
        f"{' and the longest responses' if cfg.length_spread > 0 or cfg.response_cap else ''}); training step MFU "
        f"{est.train_step['mfu'] * 100:.1f} %"
    )
    if est.switch:
        sw = est.switch
        out.print(
            f"colocated switch: {sw['moved_gib']:.1f} GiB per GPU to the host and back (rollout weights "
            f"{sw['rollout_weights_gib']:.1f}, training state {sw['train_state_gib']:.1f} GiB each way) over a "
            f"{sw['host_link_gbps']:.0f} GB/s host link: {sw['time_s']:.2f} s"
        )
    out.print(f"memory: {est.memory['verdict'] if est.fits else '[red]' + est.memory['verdict'] + '[/]'}")
    if hint:
        out.print(hint, markup=False, soft_wrap=True)
    out.print(f"bottleneck: [bold]{est.bottleneck}[/]")
    if others:
        cmp = Table("placement", "step (s)", "rollout (s)", "train (s)", "sync (s)", "peak GiB/GPU", "bottleneck",
                    title="placements on the same nodes", title_justify="left")  # fmt: skip
        for name, e in others.items():
            p = e.parts_s
            peak = f"{max(e.memory['phases_gib'].values()):.1f}" + ("" if e.fits else " [red]over[/]")
            cmp.add_row(name, f"{e.step_time_s:.2f}", f"{p['rollout']:.2f}", f"{p['actor_train'] + p['critic_train']:.2f}",
                        f"{p['weight_sync']:.2f}", peak, e.bottleneck)  # fmt: skip
        out.print(cmp)


def _offload_hint(actor: Any, cluster: Any, cfg: Any, critic: Any, est: Any) -> str:
    """Colocated without offload and over memory: what --offload (NeMo RL's default) would give, or ''."""
    from fmstack.perfmodel.rl import estimate_rl

    if est.fits or cfg.placement != "colocated" or cfg.offload:
        return ""
    alt = estimate_rl(actor, cluster, replace(cfg, offload=True), critic=critic)
    peak = max(alt.memory["phases_gib"].values())
    verdict = "fits" if alt.fits else "still does not fit"
    return (
        f"with --offload (trained models parked in host memory during generation): peak {peak:.1f} GiB per GPU, "
        f"{verdict}; step {alt.step_time_s:.2f} s ({alt.step_time_s - est.step_time_s:+.2f} s)"
    )


def _render_rl_memory(mem: dict[str, Any]) -> None:
    from fmstack.perfmodel.rl_memory import PART_LABELS

    phases = list(mem["phases_gib"])
    table = Table("GiB per GPU", *phases, title="memory by phase (usable "
                  f"{mem['usable_gib']:.1f} GiB per GPU)", title_justify="left")  # fmt: skip
    for part, gib in mem["parts_gib"].items():
        if gib > 0:
            table.add_row(PART_LABELS[part], *(f"{gib:.1f}" if part in mem["phase_parts"][p] else "-" for p in phases))
    table.add_row("total", *(f"{mem['phases_gib'][p]:.1f}" for p in phases))
    console().print(table)


@click.command(epilog=PLAN_SERVE_EXAMPLE)
@click.option("--model", required=True, help="Zoo model name or a model YAML file.")
@click.option("--qps", type=float, required=True, help="Requests per second to serve.")
@click.option("--input-len", type=int, required=True, help="Prompt tokens per request.")
@click.option("--output-len", type=int, required=True, help="Generated tokens per request.")
@click.option("--ttft-p99", type=float, required=True, help="TTFT target at p99 (s).")
@click.option("--itl-p99", type=float, required=True, help="Inter-token latency target at p99 (s).")
@click.option("--instance", "instances", multiple=True,
              help="Instances to consider, comma-separated (as plan train) or repeated [every priced one].")  # fmt: skip
@click.option("--precision", "precisions", multiple=True, type=_choice(PRECISIONS), help="[bf16 and fp8].")
@click.option("--seed", type=int, default=0, show_default=True, help="Simulation seed.")
@click.option("--max-nodes-per-replica", type=int, default=4, show_default=True,
              help="Largest replica searched, in whole nodes (TP or PP across them); 1 = one node.")  # fmt: skip
@click.option("--attention-dp/--no-attention-dp", "search_attention_dp", default=True, show_default=True,
              help="Search attention data parallelism for MoE models (ep = tp; estimate serve --attention-dp).")  # fmt: skip
@click.option("--disagg/--no-disagg", "search_disagg", default=True, show_default=True,
              help="Search disaggregated prefill/decode splits (P prefill + D decode replicas of one layout).")  # fmt: skip
@click.option("--top", type=int, default=8, show_default=True, help="Candidates to show.")
@click.option("--html", "html_path", type=click.Path(path_type=Path), default=None, help="Write an HTML report.")
@catalog_option
@json_option
def plan_serve_cmd(
    model: str, qps: float, input_len: int, output_len: int, ttft_p99: float, itl_p99: float,
    instances: tuple[str, ...], precisions: tuple[str, ...], seed: int, max_nodes_per_replica: int,
    search_attention_dp: bool, search_disagg: bool, top: int, html_path: Path | None, catalog_dir: Path | None, as_json: bool,
) -> None:  # fmt: skip
    """The cheapest deployment (instance, precision, TP / PP / EP, nodes per replica, replicas) serving a request rate
    within p99 targets."""
    from fmstack.perfmodel.inference_disagg import SLO
    from fmstack.perfmodel.inference_plan import plan_serve

    for name, value in (("input-len", input_len), ("output-len", output_len), ("top", top)):
        if value < 1:
            raise InputError(name, f"must be >= 1, got {value}")
    if html_path is not None and not (html_path.parent if str(html_path.parent) else Path(".")).is_dir():
        raise InputError("html", f"folder {html_path.parent} does not exist")
    cat = load_catalog(catalog_dir)
    arch = cat.model(model)
    plan = plan_serve(
        cat, arch, qps=qps, input_len=input_len, output_len=output_len, slo=SLO(ttft_s=ttft_p99, itl_s=itl_p99),
        instances=tuple(n.strip() for v in instances for n in v.split(",") if n.strip()) or None,
        precisions=tuple(p.lower() for p in precisions) or None, seed=seed, max_nodes_per_replica=max_nodes_per_replica,
        search_attention_dp=search_attention_dp, search_disagg=search_disagg,
    )  # fmt: skip
    if html_path is not None:
        from fmstack.reports.serve_report import write_serve_plan

        write_serve_plan(plan, html_path)
    from fmstack.cli.plan_serve_render import plan_serve_json, render_plan_serve

    if as_json:
        print_json(plan_serve_json(plan, model, top, catalog_dir))
        return
    render_plan_serve(plan, model, top, catalog_dir)
    if html_path is not None:
        console().print(f"report: {html_path}")


def inference_validation(cat: Any) -> tuple[list[Any], dict[str, Any]]:
    """`fmstack validate` (inference): the checks and their JSON."""
    from fmstack.perfmodel.inference_validation import summary, validate_inference

    checks = validate_inference(cat)
    med, worst, n = summary(checks)
    data = {"cases": [asdict(c) for c in checks], "median_abs_error_pct": med, "worst_abs_error_pct": worst,
            "compared_in_scope": n, "compared": n, "not_expressible": sum(1 for c in checks if c.predicted is None)}  # fmt: skip
    return checks, data


def render_inference_validation(checks: list[Any]) -> None:
    from fmstack.perfmodel.inference_validation import summary

    out = console()
    table = Table("id", "model", "system", "metric", "measured", "predicted", "error", "config",
                  title="inference: predicted vs published (every row counts)", title_justify="left")  # fmt: skip
    no_wrap(table, "id", "measured", "predicted", "error")
    for c in (c for c in checks if c.in_scope):
        pred = "-" if c.predicted is None else number_text(c.predicted)
        err = "-" if c.error_pct is None else f"{c.error_pct:+.1f} %"
        table.add_row(c.id, c.model, c.system, c.metric, f"{c.measured:,g}", pred, err, c.config)
    out.print(table)
    apart = [c for c in checks if not c.in_scope]
    if apart:
        why = Table("id", "metric", "measured", "why not", title="inference: not expressible", title_justify="left")
        no_wrap(why, "id", "measured")
        for c in apart:
            why.add_row(c.id, c.metric, "-" if c.measured is None else f"{c.measured:,g}", f"[yellow]{c.reason}[/]")
        out.print(why)
    med, worst, n = summary(checks)
    n_out = sum(1 for c in checks if c.predicted is None)
    out.print(f"inference: {n} cases predicted, median |error| {med:.1f} %, worst {worst:.1f} % "
              f"(acceptance <= 15 % / <= 35 %); {n_out} not expressible")  # fmt: skip
