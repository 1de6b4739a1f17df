"""`fmstack estimate rl`: one PPO / GRPO step (rollout, forward passes, training, weight sync) and its bottleneck."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from fmstack.catalog import load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.cli.common import (
    calibrated,
    calibration_options,
    catalog_option,
    choice,
    console,
    json_option,
    parts_table,
    print_json,
)
from fmstack.cli.estimate_options import layout_options, layout_values
from fmstack.perfmodel.config import SHARDING_CHOICES
from fmstack.perfmodel.inference_kv import PRECISIONS

RL_EXAMPLE = """Example:

\b
  fmstack estimate rl --model llama3.1-8b --instance p5.48xlarge --nodes 2 --algorithm grpo --prompts 256 \\
      --samples 8 --prompt-len 1024 --response-len 1024 --rollout-tp 1 --train-tp 1 --placement colocated
"""


TRAIN_SYNC_CAPTION = "train: forward passes and training; sync: weight sync + colocated switch"
"""What the ``train (s)`` and ``sync (s)`` columns of `estimate rl --compare` and `plan rl` hold
(:meth:`fmstack.perfmodel.rl.RLEstimate.phases_s`)."""


def _apply(func: Any, options: list[Any]) -> Any:
    for option in reversed(options):
        func = option(func)
    return func


def batch_options(func: Any) -> Any:
    """The step's batch: algorithm, prompts x samples, mean lengths (shared with plan rl)."""
    return _apply(func, [
        click.option("--algorithm", type=choice(("grpo", "ppo")), default="grpo", show_default=True),
        click.option("--prompts", "prompts_per_step", type=int, default=256, show_default=True, help="Prompts per step."),
        click.option("--samples", "samples_per_prompt", type=int, default=8, show_default=True, help="Responses/prompt."),
        click.option("--prompt-len", type=int, default=1024, show_default=True, help="Prompt tokens (mean)."),
        click.option("--response-len", type=int, default=1024, show_default=True, help="Response tokens (mean)."),
    ])  # fmt: skip


def step_options(func: Any) -> Any:
    """Updates, the other models' passes, the engine's memory and the response lengths (shared with plan rl)."""
    return _apply(func, [
        click.option("--epochs", type=int, default=1, show_default=True, help="PPO epochs over the batch."),
        click.option("--minibatches", type=int, default=1, show_default=True, help="Optimizer steps per epoch."),
        click.option("--reward-model/--rule-reward", default=False, show_default=True, help="Learned reward model."),
        click.option("--reference/--no-reference", default=True, show_default=True, help="KL reference policy."),
        click.option("--old-logprob/--no-old-logprob", default=True, show_default=True,
                     help="Recompute the rollout policy's log-probs with the trainer (veRL, NeMo RL do)."),
        click.option("--rollout-memory-fraction", type=float, default=None,
                     help="Engine weights + KV pool as a share of each rollout GPU's memory (vLLM "
                     "gpu_memory_utilization) [0.5 colocated; split: 0.9 of what the weights leave]."),
        click.option("--length-spread", type=float, default=0.0, show_default=True,
                     help="Prompt and response lengths uniform in mean x [1 - s, 1 + s]; > 0 simulates the "
                     "rollout's long tail."),
        click.option("--seed", type=int, default=0, show_default=True, help="Rollout simulation seed."),
        click.option("--response-cap", type=int, default=None,
                     help="Token limit per response (NeMo RL: max_total_sequence_length - prompt): one response per "
                     "replica runs to it after the others end [no cap tail]; with lognormal lengths, their cap."),
        click.option("--length-dist", type=choice(("uniform", "lognormal")), default="uniform", show_default=True,
                     help="Response lengths: uniform (--length-spread) or lognormal, set by --response-len (the "
                     "mean, as veRL's response_length/mean) and --clip-ratio or --length-cv; simulated."),
        click.option("--clip-ratio", type=float, default=None,
                     help="Lognormal: share of responses reaching --response-cap (veRL response_length/clip_ratio)."),
        click.option("--length-cv", type=float, default=None,
                     help="Lognormal: coefficient of variation of the response lengths (before the cap, if any)."),
    ])  # fmt: skip


@click.command(epilog=RL_EXAMPLE)
@click.option("--model", required=True, help="Actor (policy) model.")
@click.option(
    "--critic",
    default=None,
    help="Architecture of PPO's critic and of a --reward-model (not GRPO with a rule reward) [the actor's].",
)
@click.option("--instance", required=True, help="Instance name from the catalog.")
@click.option(
    "--nodes", type=int, default=1, show_default=True, help="Nodes for the whole step (rollout and training)."
)
@batch_options
@click.option("--placement", type=choice(("colocated", "split")), default="colocated", show_default=True)
@click.option("--rollout-nodes", type=int, default=None, help="Split: nodes that generate [half].")
@click.option("--async", "async_split", is_flag=True, help="Split: overlap rollout with training (one step stale).")
@click.option("--max-trajectory-age", type=int, default=1, show_default=True,
              help="With --async: training steps a trajectory may lag (NeMo RL max_trajectory_age_steps); >= 2 "
              "streams the rollout across steps (no batch tail, more in flight).")  # fmt: skip
@click.option("--rollout-tp", type=int, default=None,
              help="TP of each generation replica [8, or the GPUs of one node where fewer].")  # fmt: skip
@click.option("--rollout-precision", type=choice(PRECISIONS), default="bf16", show_default=True)
@click.option("--train-tp", type=int, default=None,
              help="TP of the trained models [8, or the GPUs of one node where fewer].")  # fmt: skip
@click.option("--train-pp", type=int, default=1, show_default=True)
@click.option("--train-cp", type=int, default=1, show_default=True, help="Context parallel degree of training.")
@click.option("--train-ep", type=int, default=1, show_default=True,
              help="Expert parallel degree of training (MoE; inside data parallelism).")  # fmt: skip
@click.option("--train-sharding", type=choice(SHARDING_CHOICES), default=None,
              help="ZeRO / FSDP stage of the trained models [fsdp at train tp = pp = 1, else zero1].")  # fmt: skip
@layout_options
@step_options
@click.option("--offload/--no-offload", default=None,
              help="Colocated: park the trained models' weights and optimizer state in host memory during "
              "generation (host copies each step, less GPU memory; NeMo RL always does) [off, as veRL's defaults].")  # fmt: skip
@click.option("--compare", is_flag=True, help="Also compare colocated, split and split --async on the same nodes.")
@calibration_options
@catalog_option
@json_option
def rl_cmd(
    model: str, critic: str | None, instance: str, nodes: int, compare: bool, calibration: Path | None,
    calibration_force: bool, catalog_dir: Path | None, as_json: bool, **options: Any,
) -> None:  # fmt: skip
    """Predict one PPO / GRPO step: rollout, forward passes, training, weight sync, and the bottleneck. With
    --calibration, a profile measured on the cluster's GPU prices both the rollout engine and the training."""
    from fmstack.perfmodel.rl import RLConfig, compare_placements, estimate_rl

    cat = load_catalog(catalog_dir)
    actor = cat.model(model)
    critic_arch = cat.model(critic) if critic else None
    cluster = build_cluster(cat, instance, nodes)
    efficiency = calibrated(calibration, cluster, calibration_force)
    layout = layout_values(options)  # the trained models' storage layout; left out: RLConfig's defaults
    values: dict[str, Any] = {k: (v.lower() if isinstance(v, str) else v) for k, v in options.items()}
    values.update(layout)
    for key in ("rollout_tp", "train_tp"):  # TP stays inside a node: 4 on a GB200 node, 1 on a p5.4xlarge
        if values[key] is None:
            values[key] = min(8, cluster.gpus_per_node)
    cfg = RLConfig(**values)
    # the long-tail simulation takes seconds for long responses: a spinner on terminals (not for --json)
    busy = (cfg.length_spread > 0 or cfg.length_dist == "lognormal") and not as_json
    with console().status("simulating each rollout replica's batch") if busy else nullcontext():
        est = estimate_rl(actor, cluster, cfg, critic=critic_arch, efficiency=efficiency)
        others = compare_placements(actor, cluster, cfg, critic=critic_arch, efficiency=efficiency) if compare else {}
        hint = _offload_hint(actor, cluster, cfg, critic_arch, est, efficiency)
    if as_json:
        data = est.to_json()
        if efficiency is not None:
            data["efficiency_source"] = efficiency.source
        if hint:
            data["hint"] = hint
        if others:
            data["placements"] = {k: {"step_time_s": v.step_time_s, "parts_s": v.parts_s, "bottleneck": v.bottleneck,
                                      "fits": v.fits, "memory": v.memory, **v.phases_s()}
                                  for k, v in others.items()}  # fmt: skip
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
    if b["streamed_s"] > 0:  # trajectories may lag: the rollout streams, the batch's makespan does not apply
        longest = b["streamed_longest_s"]
        bound = longest / cfg.max_trajectory_age
        out.print(
            f"rollout {est.rollout_tokens_per_s:,.0f} tokens/s, streamed (max trajectory age "
            f"{cfg.max_trajectory_age}): a step's share at the engine's steady rate takes {b['streamed_s']:.2f} s; "
            f"the longest response ({longest:.1f} s) must finish within {cfg.max_trajectory_age} steps, "
            + (f"so a step takes at least {bound:.2f} s" if bound > b["streamed_s"] else "which it does")
            + f"; training step MFU {est.train_step['mfu'] * 100:.1f} %"
        )
    else:
        out.print(
            f"rollout {est.rollout_tokens_per_s:,.0f} tokens/s: each replica's {b['waves']:.2f} fills of the engine "
            f"take {b['time_s']:.2f} s, {b['drain_s']:.2f} s more than at the steady rate (the last wave"
            f"{' and the longest responses' if cfg.length_spread > 0 or cfg.response_cap or cfg.length_dist == 'lognormal' else ''}); "
            f"training step MFU {est.train_step['mfu'] * 100:.1f} %"
        )
    out.print(_lengths_line(cfg, b))
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
    if efficiency is not None:
        out.print(f"efficiency: {efficiency.source}", markup=False)
    if others:
        cmp = Table("placement", "step (s)", "rollout (s)", "train (s)", "sync (s)", "peak GiB/GPU", "bottleneck",
                    title="placements on the same nodes", title_justify="left",
                    caption=f"{TRAIN_SYNC_CAPTION}; split --async: step = max(rollout, train) + weight sync",
                    caption_justify="left")  # fmt: skip
        for name, e in others.items():
            ph = e.phases_s()
            peak = f"{max(e.memory['phases_gib'].values()):.1f}" + ("" if e.fits else " [red]over[/]")
            cmp.add_row(name, f"{e.step_time_s:.2f}", f"{ph['rollout_s']:.2f}", f"{ph['train_s']:.2f}",
                        f"{ph['sync_s'] + ph['switch_s']:.2f}", peak, e.bottleneck)  # fmt: skip
        out.print(cmp)


def _lengths_line(cfg: Any, b: dict[str, float]) -> str:
    """Which response-length distribution the rollout used, and its shape."""
    if cfg.length_dist == "lognormal":
        given = f"clip ratio {cfg.clip_ratio}" if cfg.clip_ratio is not None else f"cv {cfg.length_cv}"
        capped = (
            f"{100 * b['length_clip_share']:.1f} % of the drawn responses at the cap {cfg.response_cap}"
            if cfg.response_cap
            else "no cap"
        )
        return (
            f"response lengths: log-normal ({given}, mean {cfg.response_len}): sigma {b['length_sigma']:.3f}, "
            f"{capped}, p50 {b['length_p50']:.0f}, p99 {b['length_p99']:.0f} tokens"
        )
    spread = (
        f"uniform in mean x [1 - {cfg.length_spread:g}, 1 + {cfg.length_spread:g}]"
        if cfg.length_spread
        else "all at the mean"
    )
    bound = f"; one response per replica runs on to the cap {cfg.response_cap} (a bound)" if cfg.response_cap else ""
    return f"response lengths: {spread} ({cfg.response_len} tokens){bound}"


def _offload_hint(actor: Any, cluster: Any, cfg: Any, critic: Any, est: Any, efficiency: Any = None) -> str:
    """Colocated without offload and over memory: what --offload (NeMo RL's default) would give, or ''."""
    from fmstack.perfmodel.rl import estimate_rl

    if est.fits or cfg.placement != "colocated" or cfg.offload:
        return ""
    alt = estimate_rl(actor, cluster, replace(cfg, offload=True), critic=critic, efficiency=efficiency)
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
