"""How `fmstack plan train` prints: the ranked table, the lines under it, the notes on its best row, and the search's
progress bar."""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from fmstack.catalog.topology import Cluster
from fmstack.cli.common import console
from fmstack.perfmodel.config import RECOMPUTE_CHOICES, describe_config
from fmstack.perfmodel.planner import PlanResult
from fmstack.perfmodel.pricing import priced_name
from fmstack.reports.plan_report import RANKED_HEADER, ranked_rows

BUBBLE_NOTE_SHARE = 0.25
"""Above this share of the best row's step in pipeline bubble, with the default batch, the plan says so."""


def batch_notes(result: PlanResult, *, batch_given: bool) -> list[str]:
    """A hint when the default global batch (about 4M tokens) is what holds the best row back: so many GPUs that
    each pipeline gets few micro-batches, and the bubble (p - 1) / (v m) takes a large share of the step."""
    best = result.best
    cfg = best.config
    share = best.parts_s.get("bubble", 0.0) / best.step_time_s
    if batch_given or share < BUBBLE_NOTE_SHARE:
        return []
    m = cfg.num_micro_batches
    return [
        f"the default global batch ({cfg.global_batch} sequences, {cfg.global_batch * cfg.seq_len / 1e6:.1f}M tokens) "
        f"leaves {m} micro-batch"
        f"{'es' if m != 1 else ''} per pipeline of {cfg.pp} stages on {best.num_gpus} GPUs: the bubble is "
        f"{share * 100:.0f} % of the step; a larger --global-batch shrinks it"
    ]


def stack_notes(result: PlanResult) -> list[str]:
    """When the best row shards the weights (ZeRO-3 / FSDP / HSDP), which stack its numbers describe: the defaults
    are fused-kernel Megatron-Core / Transformer Engine efficiencies, and eager PyTorch FSDP ran slower than predicted
    in the llm-foundry side check (README, docs/perfmodel.md)."""
    if result.best.config.sharding not in ("zero3", "fsdp", "hsdp"):
        return []
    return [
        f"the best row shards its weights ({result.best.config.sharding}); its numbers assume fused kernels "
        "(Megatron-Core / Transformer Engine, Megatron-FSDP included): eager PyTorch FSDP ran 35-57 % slower than "
        "this model predicts in the llm-foundry side check (fmstack validate --only sidecheck)"
    ]


def vpp_notes(result: PlanResult) -> list[str]:
    """That rows differing only in virtual pipeline stages were folded into one per layout (plan_fold.py), and how
    many: the ``v`` a row shows is its layout's fastest virtual-stage count."""
    folded = sum(result.vpp_variants) - len(result.vpp_variants)
    if folded <= 0:
        return []
    layouts = sum(1 for v in result.vpp_variants if v > 1)
    return [
        f"each layout is ranked once, with its fastest virtual-stage count (v in the configuration; no v: not "
        f"interleaved): {folded} row{'s' if folded != 1 else ''} that differed only in v folded into "
        f"{layouts} of the {len(result.ranked)} shown"
    ]


def price_notes(result: PlanResult, clusters: Sequence[Cluster]) -> list[str]:
    """Why a row's cost is "-": its instance has no price in the catalog (said once per instance shown)."""
    shown = {est.instance for est, cost in zip(result.ranked, result.cost_usd, strict=True) if cost is None}
    names = dict.fromkeys(priced_name(c) for c in clusters if c.name in shown and c.instance.price_per_hour_usd is None)
    return [f"cost '-': the catalog has no price for {name} in a --catalog file" for name in names]


def price_line(result: PlanResult) -> str | None:
    """The best row's price, so that its cost can be checked by hand: hours x nodes x price per node-hour."""
    if not result.cost_per_hour_usd or result.cost_per_hour_usd[0] is None or result.time_to_train_s[0] is None:
        return None
    hourly, nodes, hours = result.cost_per_hour_usd[0], result.num_nodes[0], result.time_to_train_s[0] / 3600
    return (
        f"best row's cost: {hours:,.1f} h x {nodes} nodes x ${hourly / nodes:,.2f}/h (on-demand list price in the "
        f"catalog) = ${hours * hourly:,.0f}"
    )


_DEGREE = re.compile(r"^(tp|pp|dp|cp|ep|v|mb)\d+$")
"""Words of a configuration that give its parallel layout (kept in the rows when moving every shared word would
leave a row empty)."""


IMPLIED_CAPTION = "every tp > 1 row: sequence parallel (sp) and TP communication overlapped with compute (tp-overlap)"


def _is_recompute(word: str) -> bool:
    return re.split(r"[(+]", word)[0] in RECOMPUTE_CHOICES


def spell_recompute(config: str) -> str:
    """A configuration text with its recompute word said as such: "bf16 recompute none fsdp" for "bf16 none fsdp"."""
    return " ".join(f"recompute {w}" if _is_recompute(w) else w for w in config.split(" ") if w)


def factor_configs(configs: list[str]) -> tuple[str, list[str], str | None]:
    """Rows' configuration texts with what they share said once: (the shared words for a title, recompute spelled
    out, "" if none; each row's own words; a caption when every tp > 1 row and no other has sp and tp-overlap, which
    the planner turns on with TP). Degrees (tp1, pp1) are shared too unless that would leave a row empty."""
    words = [c.split() for c in configs]
    common = [w for w in words[0] if all(w in ws for ws in words)] if words else []
    if any(set(ws) <= set(common) for ws in words):  # a row would be left empty: keep the layout in the rows
        common = [w for w in common if not _DEGREE.match(w)]
    # a recompute word is spelled out, in the title and in the rows: "recompute none", not "bf16 none" or a row's
    # bare "tp2 cp4 none" (none of what?)
    shared = spell_recompute(" ".join(common))
    words = [spell_recompute(" ".join(w for w in ws if w not in common)).split(" ") for ws in words]
    words = [[w for w in ws if w] for ws in words]
    implied = ("sp", "tp-overlap")
    tp1 = "tp1" in common
    with_tp = [not tp1 and "tp1" not in ws for ws in words]  # exactly tp1 ("tp16" is a TP row)
    caption = None
    if any(with_tp) and all(all(x in ws for x in implied) == tp for ws, tp in zip(words, with_tp, strict=True)):
        caption = IMPLIED_CAPTION
        words = [[w for w in ws if w not in implied] for ws in words]
    return shared, [" ".join(ws) for ws in words], caption


def ranked_table(result: PlanResult) -> Table:
    """The ranked rows as a terminal table: instance and GPU count move to the title when every row shares them,
    so does every word of the configuration that all rows share (batch, sequence, precision, recompute, sharding, a
    degree such as pp1), and the bottleneck drops its "of the step" (the columns that are left fit 120
    characters without wrapping in the common cases)."""
    rows = ranked_rows(result)
    header = list(RANKED_HEADER)
    title = f"best ways to train {result.model} (by {result.objective})"
    shared = [i for i in (1, 2) if len({row[i] for row in rows}) == 1]
    if len(shared) == 2:  # one instance and one GPU count: say them once
        title += f" on {rows[0][2]} {rows[0][1]} GPUs"  # "512 x p5.48xlarge" read as 512 instances
        header = [h for i, h in enumerate(header) if i not in shared]
        rows = [[c for i, c in enumerate(row) if i not in shared] for row in rows]
    config = header.index("configuration")
    shared_text, configs, caption = factor_configs([row[config] for row in rows])
    title += f", {shared_text}" if shared_text else ""
    for row, text in zip(rows, configs, strict=True):
        row[config] = text
    table = Table(*header, title=title, title_justify="left", caption=caption, caption_justify="left")
    for row in rows:
        table.add_row(*row[:-1], row[-1].removesuffix(" of the step"))
    return table


def render_plan(result: PlanResult, *, skipped: list[str] | None = None, command: str | None = None) -> None:
    out = console()
    out.print(ranked_table(result))
    out.print(
        f"{result.considered:,} configurations considered, {result.rejected_shape:,} rejected for shape, "
        f"{result.rejected_memory:,} rejected for memory"
    )
    if result.resilience:
        out.print("days and cost include the expected time lost to failures, restarts and checkpoints", markup=False)
    else:
        out.print("days and cost assume no failures; --objective time-with-failures adds failures, restarts and "
                  "checkpoints", markup=False)  # fmt: skip
    line = price_line(result)
    if line is not None:
        out.print(line, markup=False)
    best = result.best
    out.print(f"best: [bold]{spell_recompute(describe_config(best.config))}[/] on {best.num_gpus} {best.instance} GPUs")
    out.print(f"bottleneck: [bold]{best.bottleneck}[/]")
    if command is not None:
        out.print("reproduce the best with:", markup=False)
        out.print(command, markup=False, soft_wrap=True)
    for note in skipped or []:
        out.print(f"note: {note}", markup=False, soft_wrap=True)


class SearchProgress:
    """A progress bar over clusters when the search is long enough to need one (and not for --json)."""

    def __init__(self, quiet: bool, total: int) -> None:
        self.bar: Progress | None = None
        if not quiet and total > 1 and sys.stderr.isatty():  # on stderr: stdout stays the result alone
            self.bar = Progress(TextColumn("searching"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                                TimeElapsedColumn(), console=Console(stderr=True), transient=True)  # fmt: skip
            self.task = self.bar.add_task("search", total=total)

    def __enter__(self) -> Any:
        if self.bar is not None:
            self.bar.start()
            bar, task = self.bar, self.task
            return lambda done, _total: bar.update(task, completed=done)
        return None

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()
