"""`fmstack validate`: the model against every published measurement, with the errors."""

from __future__ import annotations

import importlib
import statistics
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from fmstack.catalog import load_catalog
from fmstack.cli.common import (
    catalog_option,
    console,
    json_option,
    no_wrap,
    number_text,
    print_json,
    published_text,
)
from fmstack.perfmodel.validation import TrainingCheck, summary, validate_training
from fmstack.perfmodel.validation_llmfoundry import SOURCE, TABLES, SideCheck, check_llmfoundry, summarize
from fmstack.perfmodel.validation_rl import RLCheck


def _collective_checks(cat: Any) -> list[Any]:
    module = importlib.import_module("fmstack.perfmodel.collectives_validation")
    return list(module.validate_collectives(cat))


@click.command(
    epilog="Example:\n\n  fmstack validate\n\n  fmstack validate --only training --json\n\n"
    "  fmstack validate --only sidecheck\n\n  fmstack validate --only rlcheck\n\n  fmstack validate --only disaggcheck\n\n"
    "  fmstack validate --only memcheck"
)
@click.option(
    "--only",
    type=click.Choice(["training", "collectives", "inference", "sidecheck", "rlcheck", "disaggcheck", "memcheck"]),
    default=None,
    help="One set only (sidecheck: PyTorch FSDP BF16 runs of llm-foundry; rlcheck: NeMo RL GRPO step times; "
    "disaggcheck: NVIDIA Dynamo's disaggregation claims; memcheck: the memory model against torchtitan's published "
    "peak memory; none is calibration data).",
)
@catalog_option
@json_option
def validate(only: str | None, catalog_dir: Path | None, as_json: bool) -> None:
    """Run the model on every published case (training runs, nccl-tests, inference) and print predicted vs measured;
    then a side check against PyTorch FSDP BF16 runs (MosaicML llm-foundry), reported apart."""
    cat = load_catalog(catalog_dir)
    result: dict[str, Any] = {}
    training: list[TrainingCheck] = []
    collectives: list[Any] = []
    if only in (None, "training"):
        training = validate_training(cat)
        dense = summary(training, "dense")
        moe = summary(training, "moe")
        result["training"] = {
            "cases": [asdict(c) for c in training],
            "dense": {"median_abs_error_pct": dense[0], "worst_abs_error_pct": dense[1], "compared": dense[2]},
            "moe": {"median_abs_error_pct": moe[0], "worst_abs_error_pct": moe[1], "compared": moe[2]},
            "not_expressible": sum(1 for c in training if c.not_expressible),
        }
        kept = summary(training, without_misses=True)
        result["training"]["without_known_misses"] = {
            "median_abs_error_pct": kept[0], "worst_abs_error_pct": kept[1], "compared": kept[2],
            "known_misses": [c.id for c in training if c.miss_reason],
        }  # fmt: skip
    if only in (None, "collectives"):
        collectives = _collective_checks(cat)
        result["collectives"] = {"cases": [asdict(c) for c in collectives]}
    inference: list[Any] = []
    if only in (None, "inference"):
        from fmstack.cli.validate_inference import inference_validation

        inference, result["inference"] = inference_validation(cat)
    side: list[SideCheck] = []
    if only in (None, "sidecheck"):
        side = check_llmfoundry(cat)
        result["side_check_llmfoundry"] = {
            "source": SOURCE,
            "tables": {k: {"heading": TABLES[k], **asdict(summarize(side, k))} for k in TABLES},
            "cases": [{**asdict(c), "params_error_pct": c.params_error_pct} for c in side],
        }
    rl: list[RLCheck] = []
    if only == "rlcheck":
        from fmstack.perfmodel import validation_rl

        rl = validation_rl.check_nemorl(cat)
        result["rl_check_nemorl"] = {
            "source": validation_rl.SOURCE,
            "url": validation_rl.URL,
            "summary": {s: asdict(validation_rl.summarize(rl, s)) for s in validation_rl.SCOPES},
            "cases": [c.to_json() for c in rl],
        }
        from fmstack.perfmodel import rl_stagecheck

        stages = rl_stagecheck.check_stages(cat)
        result["rl_stage_check"] = {
            "source": "data/nemorl/stages.csv (NeMo RL v0.3 blog via issue #959, its reruns; PR #3461)",
            "summary": rl_stagecheck.stage_summary(stages),
            "cases": [c.to_json() for c in stages],
        }
    disagg_lines: list[str] = []
    if only == "disaggcheck":
        from fmstack.perfmodel import validation_disagg

        checks = validation_disagg.check_disagg(cat)
        result["disagg_check_dynamo"] = {
            "source": validation_disagg.SOURCE,
            "nodes": [c.to_json() for c in checks],
        }
        disagg_lines = validation_disagg.report_lines(checks)
    mem_lines: list[str] = []
    if only == "memcheck":
        from fmstack.cli.validate_memory import memory_check

        result["memory_check_peak"], mem_lines = memory_check(cat)
    if as_json:
        print_json(result)
        return
    out = console()
    for line in disagg_lines + mem_lines:
        out.print(line, markup=False, highlight=False, soft_wrap=True)
    if training:
        _render_training(training)
    if collectives:
        _render_collectives(collectives)
    if inference:
        from fmstack.cli.validate_inference import render_inference_validation

        render_inference_validation(inference)
    if side:
        _render_side_check(side)
    if rl:
        _render_rl_check(rl)
        _render_rl_stages(result["rl_stage_check"])


METRIC_LABELS = {"achieved_tflops_per_gpu": "TFLOP/s/GPU", "iteration_time": "s/step", "mfu": "MFU %",
                 "tokens_per_sec_per_gpu": "tokens/s/GPU"}  # fmt: skip
"""The published metric as docs/perfmodel.md's table names it, with its unit (the CSV's snake_case name said
neither: "iteration_time" in what unit, "mfu" as a fraction or a percentage)."""


def _metric_label(c: TrainingCheck) -> str:
    return METRIC_LABELS.get(c.metric, f"{c.metric} ({c.unit})" if c.unit else c.metric)


def _gpus_label(c: TrainingCheck) -> str:
    """ "32 A100": how many GPUs of which kind (the table said "32" and the system only in --json)."""
    kind = c.system.split()[0].split("-")[0] if c.system else ""
    return f"{c.num_gpus} {kind}".strip()


def _assumption_note(text: str) -> str:
    """A row's assumption as a note; the memory verdict is the model's, not an assumption about the source."""
    if text.startswith("does not fit: "):
        return f"model memory: the configuration does not fit ({text.removeprefix('does not fit: ')} per GPU predicted)"
    return f"assumed: {text}"


def _render_training(training: list[TrainingCheck]) -> None:
    """The compared rows (what was measured where, by whom, with what the source left out), the rows the model
    cannot express with their reason, and the summary lines. A row's source, its assumptions and a known miss's
    reason are numbered notes under the table, each text once (a miss's reason filled 40 wrapped lines of a cell;
    sources and assumptions, "does not fit" among them, were in --json only)."""
    out = console()
    table = Table("id", "model", "GPUs", "metric", "measured", "predicted", "error", "config", "notes",
                  title="training: predicted vs published (error = predicted / measured - 1)",
                  title_justify="left")  # fmt: skip
    no_wrap(table, "id", "GPUs", "measured", "predicted", "error")
    table.columns[7].min_width = len("selective(layernorm,moe_act)")  # a recompute's modules cut to "selective(layern…"
    table.columns[1].max_width = table.columns[8].max_width = 16  # wrapped, so that the table fits 140 columns
    notes: dict[str, int] = {}
    for c in training:
        if c.predicted is None:
            continue  # listed in the next table, with the reason
        refs = [notes.setdefault(f"source: {c.source}", len(notes) + 1)]
        refs += [notes.setdefault(_assumption_note(a), len(notes) + 1) for a in c.assumptions]
        cell = " ".join(f"[{n}]" for n in refs)
        error = f"{c.error_pct:+.1f} %"
        if c.miss_reason:
            n = notes.setdefault(f"{c.id} known miss, left out of the asserted set: {c.miss_reason}", len(notes) + 1)
            cell += f" [yellow]miss [{n}][/]"
            error = f"[yellow]{error}[/]"
        table.add_row(c.id, c.model, _gpus_label(c), _metric_label(c), f"{c.measured:,g}", number_text(c.predicted),
                      error, c.config, cell)  # fmt: skip
    out.print(table)
    for text, n in notes.items():
        out.print(f"[{n}] {text}", markup=False, highlight=False)
    apart = [c for c in training if c.predicted is None]
    if apart:
        why_not = Table("id", "model", "GPUs", "metric", "measured", "why not", "source",
                        title="training: not expressible (not compared)", title_justify="left")  # fmt: skip
        no_wrap(why_not, "id", "GPUs", "measured")
        reasons: dict[str, int] = {}  # each reason once under the table (one repeated on ten rows, four lines each)
        for c in apart:
            n = reasons.setdefault(c.not_expressible, len(reasons) + 1)
            why_not.add_row(c.id, c.model, _gpus_label(c), _metric_label(c), f"{c.measured:,g}", f"[yellow]({n})[/]",
                            c.source)  # fmt: skip
        out.print(why_not)
        for text, n in reasons.items():
            out.print(f"({n}) {text}", markup=False, highlight=False)
    for scope in ("dense", "moe"):
        med, worst, n = summary(training, scope)
        out.print(f"training {scope}: {n} cases, median |error| {med:.1f} %, worst {worst:.1f} %")
    med, worst, n = summary(training, without_misses=True)
    misses = sum(1 for c in training if c.miss_reason)
    out.print(f"training without the {misses} known misses: {n} cases, median |error| {med:.1f} %, worst {worst:.1f} %")


def _render_collectives(collectives: list[Any]) -> None:
    """nccl-tests rows: the algorithm modelled (NVLS / ring / tree) and every row's note, in scope or not (an in-scope
    row's "no size stated: compared at 8 GiB (stated peak)" or "modelled as p5.48xlarge" was --json only, so COL-030
    and COL-031 read as one case at 480 and 370 GB/s: the model's NVLS vs ring)."""
    out = console()
    table = Table("id", "op", "system", "GPUs", "bytes", "measured busbw", "predicted", "error", "in scope",
                  "algorithm", "notes", title="collectives: busbw GB/s, predicted vs nccl-tests",
                  title_justify="left")  # fmt: skip
    no_wrap(table, "id", "measured busbw", "predicted", "error", "in scope", "notes")
    notes: dict[str, int] = {}  # a note once, numbered, under the table (it repeats per row)
    for c in collectives:
        pred = "-" if c.predicted_busbw_gbps is None else number_text(c.predicted_busbw_gbps)
        err = "-" if c.error_pct is None else f"{c.error_pct:+.1f} %"
        ref = f"[{notes.setdefault(c.note, len(notes) + 1)}]" if c.note else ""
        table.add_row(c.id, c.op, c.system, str(c.num_gpus), f"{c.size_bytes:,.0f}" if c.size_bytes else "-",
                      published_text(c.measured_busbw_gbps), pred, err, "yes" if c.in_scope else "no",
                      c.algorithm or "-", ref)  # fmt: skip
    out.print(table)
    for note, n in notes.items():
        out.print(f"[{n}] {note}", markup=False, highlight=False)
    errors = sorted(abs(c.error_pct) for c in collectives if c.in_scope and c.error_pct is not None)
    if errors:
        out.print(
            f"collectives in scope: {len(errors)} cases, median |error| {statistics.median(errors):.1f} %, "
            f"worst {errors[-1]:.1f} %"
        )


def _render_side_check(side: list[SideCheck]) -> None:
    out = console()
    table = Table("table", "model", "seq", "GPUs", "mb", "gb", "AC", "measured", "predicted", "error", "note",
                  title=f"side check (not calibration data): tokens/s/GPU, PyTorch FSDP BF16, {SOURCE}",
                  title_justify="left")  # fmt: skip
    notes: dict[str, int] = {}  # a note once, numbered, under the table (the system note repeats per multi-node row)
    for c in side:
        pred = "-" if c.predicted_tokens_per_s_per_gpu is None else f"{c.predicted_tokens_per_s_per_gpu:,.0f}"
        err = "-" if c.error_pct is None else f"{c.error_pct:+.1f} %"
        said = [c.not_expressible] if c.not_expressible else c.assumptions
        note = " ".join(f"[{notes.setdefault(n, len(notes) + 1)}]" for n in said)
        table.add_row(c.table, c.model, str(c.seq_len), str(c.num_gpus), str(c.micro_batch), str(c.global_batch),
                      "yes" if c.activation_checkpointing else "no", f"{c.measured_tokens_per_s_per_gpu:,.0f}", pred,
                      err, note)  # fmt: skip
    out.print(table)
    for text, n in notes.items():
        out.print(f"[{n}] {text}", markup=False, highlight=False)
    for key, heading in TABLES.items():
        s = summarize(side, key)
        out.print(
            f"side check {heading}: {s.compared} rows, median error {s.median_error_pct:+.1f} %, "
            f"median |error| {s.median_abs_error_pct:.1f} %, worst {s.worst_abs_error_pct:.1f} %"
        )


def _render_rl_check(rl: list[RLCheck]) -> None:
    from fmstack.perfmodel import validation_rl

    out = console()
    table = Table("id", "model", "prompt+resp", "measured s", "predicted s", "error", "with cap tail", "stages s",
                  title=f"RL check (not calibration data): GRPO step time, {validation_rl.SOURCE}",
                  title_justify="left", caption=f"id: system-model-GPUs, -1off / -8off: that many steps off-policy (else on-policy); stages s: "
                  f"{' / '.join(validation_rl.STAGES)} (predicted)",
                  caption_justify="left")  # fmt: skip
    no_wrap(table, "id", "measured s", "predicted s", "error", "with cap tail", "stages s")
    notes: list[str] = []
    for c in rl:
        pred = "-" if c.predicted_step_s is None else f"{c.predicted_step_s:.1f}"
        err = "-" if c.step_error_pct is None else f"{c.step_error_pct:+.1f} %"
        capped = (
            "-" if c.step_error_cap_pct is None else f"{c.predicted_step_cap_s:.1f} ({c.step_error_cap_pct:+.0f} %)"
        )
        stages = (
            "/".join(f"{c.predicted_stages_s[k]:.1f}" for k in validation_rl.STAGES) if c.predicted_stages_s else "-"
        )
        note = c.not_expressible and f"not expressible: {c.not_expressible}"
        if not note:
            note = "; ".join(c.differences + ([] if c.fits else ["model memory: does not fit"]))
        if note:
            notes.append(f"{c.id}: {note}")
        table.add_row(c.id, c.model, f"{c.prompt_len}+{c.response_len}", f"{c.measured_step_s:g}", pred, err, capped,
                      stages)  # fmt: skip
    out.print(table)
    for line in notes:
        out.print(line, markup=False, highlight=False)
    for scope in validation_rl.SCOPES:
        s = validation_rl.summarize(rl, scope)
        out.print(
            f"RL check {scope}: {s.compared} rows, median error {s.median_error_pct:+.1f} %, "
            f"median |error| {s.median_abs_error_pct:.1f} %, worst {s.worst_abs_error_pct:.1f} %"
        )


def _render_rl_stages(stage_check: dict[str, Any]) -> None:
    from fmstack.perfmodel.rl_stagecheck import STAGE_COLUMNS

    out = console()
    keys = (*STAGE_COLUMNS, "rest", "step")
    table = Table("id", "GPUs", "prompt+resp", *keys,
                  title="RL stages (not calibration data): NeMo RL published stage times, measured / predicted s "
                  "(error); generation also with the tail to the cap", title_justify="left",
                  caption="refit: predicted weight sync + colocated switch; rest: step - the published stages",
                  caption_justify="left")  # fmt: skip
    no_wrap(table, "id")
    for c in stage_check["cases"]:
        cells = []
        for k in keys:
            if k not in c["measured_s"]:
                cells.append("-")
                continue
            cell = f"{c['measured_s'][k]:.1f} / {c['predicted_s'][k]:.1f}"
            if k in c["error_pct"]:
                cell += f"\n({c['error_pct'][k]:+.0f} %)"
            if k in ("generation", "step"):
                cell += f"\ncap {c['predicted_cap_s'][k]:.1f}\n({c['error_cap_pct'][k]:+.0f} %)"
            cells.append(cell)
        table.add_row(c["id"], str(c["num_gpus"]), f"{c['prompt_len']}+{c['response_len']}", *cells)
    out.print(table)
    for k, s in stage_check["summary"].items():
        out.print(
            f"RL stages {k}: {s['compared']:.0f} rows, median error {s['median_error_pct']:+.1f} % "
            f"(with the cap tail {s['median_error_cap_pct']:+.1f} %), worst |error| {s['worst_abs_error_pct']:.1f} %"
        )
