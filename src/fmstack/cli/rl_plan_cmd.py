"""`fmstack plan rl`: the best placement, rollout TP and training layout for one PPO / GRPO step."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from fmstack.catalog import load_catalog
from fmstack.catalog.topology import Cluster, build_cluster
from fmstack.cli.common import (
    calibration_argv,
    calibration_for,
    calibration_options,
    catalog_option,
    choice,
    console,
    json_option,
    no_wrap,
    print_json,
)
from fmstack.cli.estimate_options import layout_argv, layout_options, layout_values
from fmstack.cli.rl_cmd import TRAIN_SYNC_CAPTION, batch_options, step_options
from fmstack.errors import InputError
from fmstack.fileio import check_output_path
from fmstack.perfmodel.inference_kv import PRECISIONS

PLAN_RL_EXAMPLE = """Examples:

\b
  fmstack plan rl --model llama3.1-8b --instance p5.48xlarge --nodes 2 --prompts 256 --samples 8 \\
      --prompt-len 1024 --response-len 1024

\b
  fmstack plan rl --model llama3.1-70b --instance p5.48xlarge,p5en.48xlarge --nodes 4,8 --algorithm ppo \\
      --samples 1 --max-trajectory-age 2 --objective cost --top 5

\b
  fmstack plan rl --model llama3.1-8b --instance p5.48xlarge,p5en.48xlarge --nodes 1,2 --html rl-plan.html
"""
MAX_NODE_COUNTS = 16
"""Node counts one search takes (each multiplies the space)."""


def parse_nodes(text: str) -> list[int]:
    """'4', '2,4,8' or '2-16' (doubling)."""
    out: list[int] = []
    try:
        for part in (p.strip() for p in text.split(",")):
            if "-" in part:
                lo, hi = (int(v) for v in part.split("-", 1))
                if lo < 1 or hi < lo:
                    raise InputError("nodes", f"range {part!r} must start at 1 or more and end at or after its start")
                out += [lo << i for i in range((hi // lo).bit_length())]
            else:
                out.append(int(part))
    except InputError:
        raise
    except ValueError:
        raise InputError("nodes", f"{text!r} is not a count, a list (2,4,8) or a doubling range (2-16)") from None
    if not out or any(n < 1 for n in out):
        raise InputError("nodes", f"must be node counts >= 1, got {text!r}")
    out = list(dict.fromkeys(out))
    if len(out) > MAX_NODE_COUNTS:
        raise InputError("nodes", f"{text!r} gives {len(out)} node counts; at most {MAX_NODE_COUNTS} per search")
    return out


def rl_argv(
    model: str, critic: str | None, instance: str, nodes: int, cfg: Any, catalog_dir: Path | None,
    extra: Sequence[str] = (),
) -> list[str]:  # fmt: skip
    """The ``fmstack estimate rl`` command line that prices ``cfg`` (an RLConfig) exactly (``extra``: arguments
    appended as they are, the plan's ``--calibration``)."""
    argv = ["fmstack", "estimate", "rl", "--model", model]
    argv += ["--critic", critic] if critic else []
    argv += ["--instance", instance, "--nodes", str(nodes), "--algorithm", cfg.algorithm,
             "--prompts", str(cfg.prompts_per_step), "--samples", str(cfg.samples_per_prompt),
             "--prompt-len", str(cfg.prompt_len), "--response-len", str(cfg.response_len),
             "--placement", cfg.placement]  # fmt: skip
    if cfg.placement == "split":
        argv += ["--rollout-nodes", str(cfg.rollout_nodes)]
        argv += ["--async"] if cfg.async_split else []
        argv += ["--max-trajectory-age", str(cfg.max_trajectory_age)] if cfg.max_trajectory_age > 1 else []
    else:
        argv += ["--offload" if cfg.offload else "--no-offload"]
    argv += ["--rollout-tp", str(cfg.rollout_tp), "--rollout-precision", cfg.rollout_precision,
             "--train-tp", str(cfg.train_tp), "--train-pp", str(cfg.train_pp)]  # fmt: skip
    argv += ["--train-cp", str(cfg.train_cp)] if cfg.train_cp > 1 else []
    argv += ["--train-ep", str(cfg.train_ep)] if cfg.train_ep > 1 else []
    argv += layout_argv(cfg)
    argv += ["--epochs", str(cfg.epochs)] if cfg.epochs != 1 else []
    argv += ["--minibatches", str(cfg.minibatches)] if cfg.minibatches != 1 else []
    argv += ["--reward-model"] if cfg.reward_model else []
    argv += [] if cfg.reference else ["--no-reference"]
    argv += [] if cfg.old_logprob else ["--no-old-logprob"]
    if cfg.rollout_memory_fraction is not None:
        argv += ["--rollout-memory-fraction", repr(cfg.rollout_memory_fraction)]
    argv += ["--length-spread", repr(cfg.length_spread)] if cfg.length_spread > 0 else []
    argv += ["--response-cap", str(cfg.response_cap)] if cfg.response_cap is not None else []
    if cfg.length_dist == "lognormal":
        argv += ["--length-dist", "lognormal"]
        argv += ["--clip-ratio", repr(cfg.clip_ratio)] if cfg.clip_ratio is not None else []
        argv += ["--length-cv", repr(cfg.length_cv)] if cfg.length_cv is not None else []
    argv += ["--seed", str(cfg.seed)] if cfg.length_spread > 0 or cfg.length_dist == "lognormal" else []
    argv += ["--catalog", str(catalog_dir)] if catalog_dir is not None else []
    return argv + list(extra)


@contextmanager
def _status(quiet: bool) -> Iterator[Callable[[str], None] | None]:
    """A status line on stderr while searching, on terminals and not for --json (stdout stays the result)."""
    if quiet or not sys.stderr.isatty():
        yield None
        return
    with Console(stderr=True).status("plan rl: pricing each side's rollout and training") as status:
        yield status.update


@click.command(epilog=PLAN_RL_EXAMPLE)
@click.option("--model", required=True, help="Actor (policy) model.")
@click.option(
    "--critic",
    default=None,
    help="Architecture of PPO's critic and of a --reward-model (not GRPO with a rule reward) [the actor's].",
)
@click.option("--instance", required=True, help="Instance name(s), comma-separated, from the catalog.")
@click.option("--nodes", "nodes_text", required=True, help="Nodes for the whole step: 4, a list (2,4,8) or 2-16.")
@batch_options
@click.option("--placement", "kinds", default="colocated,split,async", show_default=True,
              help="Placements searched, comma-separated: colocated (host offload off and on), split (on-policy), "
              "async (split, overlapped one step apart).")  # fmt: skip
@click.option("--max-trajectory-age", type=int, default=1, show_default=True,
              help="Async rows may also let trajectories lag up to this many steps (estimate rl "
              "--max-trajectory-age); 1 = one step apart only.")  # fmt: skip
@click.option("--rollout-precision", type=choice(PRECISIONS), default="bf16", show_default=True)
@layout_options
@step_options
@click.option("--objective", type=click.Choice(("time", "throughput", "cost")), default="time", show_default=True,
              help="Rank by step time, samples/s per GPU, or USD per step (needs the instance's price).")  # fmt: skip
@click.option("--top", type=int, default=10, show_default=True, help="Configurations to show.")
@click.option("--html", "html_path", type=click.Path(path_type=Path), default=None,
              help="Write an HTML report (several instances / node counts: also each one's best).")  # fmt: skip
@calibration_options
@catalog_option
@json_option
def plan_rl_cmd(
    model: str, critic: str | None, instance: str, nodes_text: str, kinds: str, max_trajectory_age: int,
    objective: str, top: int, html_path: Path | None, calibration: Path | None, calibration_force: bool,
    catalog_dir: Path | None, as_json: bool, **options: Any,
) -> None:  # fmt: skip
    """Search placement (colocated, split, async), rollout TP and training layout of one PPO / GRPO step: the
    fastest or cheapest that fits, with its bottleneck. With --calibration, priced with a profile measured on the
    instances' GPU (rollout and training)."""
    from fmstack.perfmodel.rl import RLConfig
    from fmstack.perfmodel.rl_config import check_rl_config
    from fmstack.perfmodel.rl_plan import checked_base, plan_rl

    if html_path is not None:
        check_output_path(html_path, field="html", example="rl-plan.html")  # before the search, not after it
    cat = load_catalog(catalog_dir)
    actor = cat.model(model)
    critic_arch = cat.model(critic) if critic else None
    names = list(dict.fromkeys(n.strip() for n in instance.split(",") if n.strip()))
    if not names:
        raise InputError("instance", f"give at least one instance name, got {instance!r}")
    where: list[tuple[str, int]] = [(n, k) for n in names for k in parse_nodes(nodes_text)]
    clusters: list[Cluster] = [build_cluster(cat, n, k) for n, k in where]
    efficiency_for = calibration_for(calibration, clusters, calibration_force)
    layout = layout_values(options)  # the trained models' storage layout; left out: RLConfig's defaults
    values: dict[str, Any] = {k: (v.lower() if isinstance(v, str) else v) for k, v in options.items()}
    base = RLConfig(**values, **layout)
    check_rl_config(checked_base(base), clusters[0])  # batch, lengths and flags before searching
    plan_kinds = tuple(k.strip().lower() for k in kinds.split(",") if k.strip())
    with _status(as_json) as progress:
        plan = plan_rl(actor, clusters, base, critic=critic_arch, objective=objective, top=top,
                       max_trajectory_age=max_trajectory_age, progress=progress, kinds=plan_kinds,
                       efficiency_for=efficiency_for)  # fmt: skip
    if objective == "cost":
        priced = [c for c in clusters if c.instance.price_per_hour_usd is not None]
        where = [w for w, c in zip(where, clusters, strict=True) if c.instance.price_per_hour_usd is not None]
        clusters = priced
    extra = calibration_argv(calibration, calibration_force)  # each row's estimate rl command reapplies it
    rows = [_row_json(r, where[r.point.cluster], model, critic, catalog_dir, extra) for r in plan.ranked]
    data = {"model": plan.model, "objective": plan.objective, "considered": plan.considered,
            "evaluated": plan.evaluated, "pruned": plan.pruned, "rejected_shape": plan.rejected_shape,
            "rejected_memory": plan.rejected_memory, "estimate_command": rows[0]["estimate_command"],
            "notes": plan.notes, "ranked": rows}  # fmt: skip
    if efficiency_for is not None:
        data["efficiency_source"] = efficiency_for(clusters[0]).source
    if html_path is not None:
        from fmstack.reports.html import write_html
        from fmstack.reports.rl_report import best_by_cluster, rl_plan_html

        per_cluster = best_by_cluster(actor, clusters, where, base, critic=critic_arch, kinds=plan_kinds,
                                      max_trajectory_age=max_trajectory_age,
                                      efficiency_for=efficiency_for) if len(clusters) > 1 else []  # fmt: skip
        write_html(html_path, rl_plan_html(data, several=len(clusters) > 1, per_cluster=per_cluster))
    if as_json:
        print_json(data)
        return
    _render(data, several=len(clusters) > 1)
    if html_path is not None:
        console().print(f"report written to {html_path}", markup=False)


def _row_json(
    row: Any, where: tuple[str, int], model: str, critic: str | None, catalog_dir: Path | None,
    extra: Sequence[str] = (),
) -> dict[str, Any]:  # fmt: skip
    est, p = row.estimate, row.point
    cfg, parts = est.config, est.parts_s
    mem = est.memory
    return {
        "instance": where[0], "nodes": where[1], "num_gpus": est.num_gpus, "placement": p.placement.label,
        "placement_kind": p.placement.kind, "offload": bool(cfg.offload), "rollout_nodes": cfg.rollout_nodes,
        "async": cfg.async_split, "max_trajectory_age": cfg.max_trajectory_age, "rollout_tp": cfg.rollout_tp,
        "train_tp": cfg.train_tp, "train_pp": cfg.train_pp, "train_cp": cfg.train_cp, "train_ep": cfg.train_ep,
        "train_sharding": est.train_step["config"]["sharding"], "train_layout": p.layout.label,
        "step_time_s": est.step_time_s, "samples_per_s": row.samples_per_s,
        "samples_per_s_per_gpu": row.samples_per_s / est.num_gpus, "cost_per_step_usd": row.cost_per_step_usd,
        **est.phases_s(), "parts_s": parts,
        "peak_gib_per_gpu": max(mem["phases_gib"].values()), "usable_gib": mem["usable_gib"],
        "bottleneck": est.bottleneck,
        "estimate_command": shlex.join(rl_argv(model, critic, where[0], where[1], cfg, catalog_dir, extra)),
    }  # fmt: skip


def _render(data: dict[str, Any], *, several: bool) -> None:
    out = console()
    obj = data["objective"]
    extra = {"throughput": "samples/s/GPU", "cost": "$/step"}.get(obj)
    head = ["#", *(["instance", "nodes"] if several else []), "placement", "rollout tp", "train", "step (s)",
            "rollout (s)", "train (s)", "sync (s)", "peak GiB/GPU", *([extra] if extra else []), "bottleneck"]  # fmt: skip
    first = data["ranked"][0]
    title = f"best ways to run one RL step of {data['model']} (by {obj})"
    if not several:
        title += f" on {first['nodes']} x {first['instance']}"
    table = Table(*head, title=title, title_justify="left",
                  caption=f"{TRAIN_SYNC_CAPTION}; placement Nr: N rollout nodes", caption_justify="left")  # fmt: skip
    no_wrap(table, "instance", "bottleneck")  # "p5en.48xl…" names no instance; "rollout: 46 %" reads as one value
    for i, r in enumerate(data["ranked"], 1):
        value = {"throughput": f"{r['samples_per_s_per_gpu']:.2f}",
                 "cost": f"{r['cost_per_step_usd'] or 0:.2f}"}.get(obj)  # fmt: skip
        table.add_row(str(i), *([r["instance"], str(r["nodes"])] if several else []), r["placement"],
                      str(r["rollout_tp"]), f"{r['train_layout']} {r['train_sharding']}", f"{r['step_time_s']:.2f}",
                      f"{r['rollout_s']:.2f}", f"{r['train_s']:.2f}", f"{r['sync_s'] + r['switch_s']:.2f}",
                      f"{r['peak_gib_per_gpu']:.1f}", *([value] if value else []),
                      r["bottleneck"].split(" (")[0].removesuffix(" of the step"))  # fmt: skip
    out.print(table)
    out.print(f"{data['considered']:,} configurations considered: {data['rejected_shape']:,} rejected for shape, "
              f"{data['pruned']:,} pruned by the bound, {data['evaluated']:,} estimated ({data['rejected_memory']:,} "
              "of them over memory)")  # fmt: skip
    out.print(f"best: [bold]{first['placement']}[/], rollout tp {first['rollout_tp']}, train {first['train_layout']} "
              f"{first['train_sharding']}: {first['step_time_s']:.2f} s per step, {first['samples_per_s']:.1f} samples/s")  # fmt: skip
    out.print(f"bottleneck: {first['bottleneck']}", markup=False)
    for note in data["notes"]:
        out.print(f"note: {note}", markup=False, soft_wrap=True)
    out.print("estimate it: " + data["estimate_command"], markup=False, soft_wrap=True)
    if "efficiency_source" in data:
        out.print(f"efficiency: {data['efficiency_source']}", markup=False)
