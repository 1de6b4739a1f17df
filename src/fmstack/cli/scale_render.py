"""`fmstack scale`'s table, printed (rich) and in the HTML report: one view of a sweep, so the report says what the
terminal says (the report had only the chart: no configuration, batch, cost, note or skipped value)."""

from __future__ import annotations

from dataclasses import dataclass

from rich.table import Table

from fmstack.cli.common import console
from fmstack.cli.plan_render import factor_configs
from fmstack.perfmodel.scaling import SweepResult, comm_line

EFFICIENCY_HEADER = {"strong": "strong-scaling eff.", "weak": "weak-scaling eff.", "relative": "vs first"}
"""The efficiency column: tokens/s per GPU relative to the first point, named for what it measures."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ScaleView:
    """The sweep as a table: a title (what every point shares), headers (two-line ones with a newline), rows, a
    caption, and the lines under the table (batch-changed mark, per-point notes, skipped values)."""

    title: str
    headers: list[str]
    rows: list[list[str]]
    caption: str | None
    footer: list[str]
    efficiency_header: str


def scale_view(model: str, axis: str, weak: bool, result: SweepResult) -> ScaleView:
    points = result.points
    eff_header = EFFICIENCY_HEADER["relative" if axis != "nodes" else "weak" if weak else "strong"]
    title = f"{model}: scaling over {axis}"
    if result.objective != "time":
        title += f" by {result.objective}"
    if result.reference_global_batch is not None:
        held = "grown with the GPUs from" if weak else "held at"
        title += f" (global batch {held} {result.reference_global_batch} sequences)"
    # the configuration drops what other columns or the title say: its gb (the global batch column) and a
    # sequence length every point shares; the bottleneck drops "of the step" (as plan train's table does)
    words = [p.config.split() for p in points]
    seqs = {w for ws in words for w in ws if w.startswith("seq")}
    if len(seqs) == 1 and all(any(w.startswith("seq") for w in ws) for ws in words):
        title += f", {seqs.pop()}"
        words = [[w for w in ws if not w.startswith("seq")] for ws in words]
    configs = [" ".join(w for w in ws if w != f"gb{p.global_batch}") for ws, p in zip(words, points, strict=True)]
    shared, configs, caption = factor_configs(configs)  # what every point shares, once in the title
    title += f", {shared}" if shared else ""
    # the global batch column only where it varies: the title gives the one every point holds
    # long headers on two lines, so that the table fits 140 columns with whole names and numbers
    batch = ["global\nbatch"] if len({p.global_batch for p in points}) > 1 or not result.reference_global_batch else []
    extra = ["GB/s\nper node", "latency\nus"] if axis == "efa" else []
    days = "days with\nfailures" if result.objective == "time-with-failures" else "days"
    headers = [axis, "GPUs", *batch, *extra, "step s", "MFU %", "tokens/s", "tokens/s\nper GPU",
               eff_header.replace(" ", "\n", 1), days, "cost $", "configuration", "bottleneck"]  # fmt: skip
    rows = []
    for p, config in zip(points, configs, strict=True):
        mark = "*" if p.global_batch_changed else ""
        net = [f"{p.network_bw_gbps_per_node:,g}", f"{p.network_latency_us:g}"] if axis == "efa" else []
        gb = [f"{p.global_batch}{mark}"] if batch else []
        rows.append([p.value, str(p.num_gpus), *gb, *net, f"{p.step_time_s:.2f}",
                     f"{p.mfu * 100:.1f}", f"{p.tokens_per_s:,.0f}", f"{p.tokens_per_s_per_gpu:,.0f}",
                     f"{p.scaling_efficiency:.2f}{mark}", f"{p.time_to_train_s / 86400:,.1f}",
                     "-" if p.cost_usd is None else f"{p.cost_usd:,.0f}", config,
                     p.bottleneck.removesuffix(" of the step")])  # fmt: skip
    footer = []
    if any(p.global_batch_changed for p in points):
        footer.append("* global batch changed at this point: its ratio is tokens/s per GPU against the first point at "
                      f"another batch, not a {eff_header.removesuffix(' eff.')} efficiency")  # fmt: skip
    footer += [f"{p.value}: {p.note}" for p in points if p.note]
    # why a point scales as it does when the bottleneck column names compute: what communication takes
    footer += [line for line in (comm_line(p) for p in points) if line]
    footer += result.skipped
    return ScaleView(title=title, headers=headers, rows=rows, caption=caption, footer=footer,
                     efficiency_header=eff_header)  # fmt: skip


def render_scale(model: str, axis: str, weak: bool, result: SweepResult) -> None:
    view = scale_view(model, axis, weak, result)
    table = Table(*view.headers, title=view.title, title_justify="left", caption=view.caption, caption_justify="left")
    for column in table.columns[:-2]:  # names and numbers whole ("p5en.48xlar…" names nothing); the text wraps
        column.no_wrap = True
    table.columns[-2].min_width, table.columns[-1].min_width = len("configuration"), len("bottleneck")
    for row in view.rows:
        table.add_row(*row)
    out = console()
    out.print(table)
    for line in view.footer:
        out.print(line, highlight=False)
