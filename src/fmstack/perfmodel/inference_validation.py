"""`fmstack validate` (inference): the serving model against published measurements.

Every row of ``data/inference-calibration.csv`` (a copy of the project's published-measurements file) is kept.
A row the model can express becomes a model, a node, a :class:`ServeConfig` and a load, with the same defaults
for every case (no per-row constants); a row it cannot express carries the reason. Every predicted row counts
in the acceptance bounds (median |error| <= 15 %, worst <= 35 %); there is no scope chosen after the errors.
What a row states about its setup is used as stated: "attention DP" in the notes runs attention data-parallel
with ep = tp; a documented property of the row's engine version (``ENGINE_SETUPS``) changes what the hardware
does for every row of that engine. "Max load" rows run at the memory-limited concurrency (the data README:
infinite request rate, the batch is limited by memory).
"""

from __future__ import annotations

import csv
import re
import statistics
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING

from fmstack.catalog.topology import build_cluster
from fmstack.perfmodel.inference import ServeConfig, estimate_serve
from fmstack.perfmodel.inference_speculative import make_spec

if TYPE_CHECKING:
    from fmstack.catalog.loader import Catalog

ACCEPT_MEDIAN_PCT = 15.0
ACCEPT_WORST_PCT = 35.0

MODEL_NAMES = {
    "Llama 3.1 8B Instruct": "llama3.1-8b", "Llama 3.3 70B Instruct": "llama3.1-70b",
    "Llama 3.1 405B Instruct": "llama3.1-405b", "Qwen3-235B-A22B (MoE)": "qwen3-235b-a22b",
    "LLaMA 70B (Llama 2)": "llama2-70b", "LLaMA 7B (Llama 2)": "llama2-7b",
    "Llama 3 8B": "llama3-8b", "Llama 3 70B": "llama3-70b",
    "DeepSeek-R1 (MoE)": "deepseek-v3", "DeepSeek-R1-0528 (MoE)": "deepseek-v3",
}  # fmt: skip
"""Published names -> zoo names (Llama 3.3 70B has Llama 3.1 70B's architecture, DeepSeek-R1 DeepSeek-V3's)."""
METRICS = {"output_throughput_total", "output_throughput_per_gpu", "output_throughput_per_user", "ttft", "tpot"}


@dataclass(frozen=True, kw_only=True, slots=True)
class InferenceCheck:
    """One published serving measurement next to the model's prediction."""

    id: str
    model: str
    system: str
    metric: str
    unit: str
    measured: float | None
    predicted: float | None = None
    error_pct: float | None = None
    in_scope: bool = False
    """True when predicted: every predicted row counts in the acceptance bounds."""
    config: str = ""
    bottleneck: str = ""
    assumptions: list[str] = field(default_factory=list)
    reason: str = ""
    """Why the row is not expressible ('' when predicted)."""


def _rows() -> list[dict[str, str]]:
    text = (resources.files("fmstack.perfmodel") / "data" / "inference-calibration.csv").read_text(encoding="utf-8")
    return list(csv.DictReader(text.splitlines()))


def _system(gpu: str) -> str | None:
    g = gpu.lower()
    if "b200" in g:
        return "dgx-b200"
    if "h100" in g and "a100" not in g:
        return "dgx-h100"
    if "h200" in g:
        return "p5e.48xlarge"
    return None


def _not_expressible(row: dict[str, str]) -> str:
    """The reason a row cannot be expressed ('' when it can)."""
    metric, engine = row["metric_name"], row["engine"]
    if not row["metric_unit"].startswith(("tokens/s", "ms", "s")):
        return f"a relative or claimed number ({row['metric_unit']}), not a latency or throughput of one configuration"
    if row["model"] not in MODEL_NAMES:
        return f"model {row['model']!r} is not in the model zoo"
    if _system(row["gpu"]) is None:
        return f"GPU {row['gpu']!r} not mapped to a catalog node"
    if not row["tp"]:
        return "parallel layout not stated"
    if metric == "tpot" and not row["input_len"]:
        return (
            "approximate prose claim ('1 token every 13 ms under light load') without input length or precision, "
            f"for {engine} whose CPU overhead dominated (INF-052: GPU busy 38 % of the time)"
        )
    if not row["input_len"] or not row["output_len"]:
        return "input / output length not stated"
    if metric not in METRICS:
        return f"metric {metric!r} is not one the model predicts ({', '.join(sorted(METRICS))})"
    return ""


ENGINE_SETUPS: tuple[tuple[str, dict[str, bool], str], ...] = (
    (
        r"TensorRT-LLM v0\.(5|6)\b",
        {"gqa_kv_sharing": False},
        "TensorRT-LLM v0.5 / v0.6.1: decode attention is the masked MHA kernel, one CUDA thread block per query "
        "head (docs/source/gpt_attention.md of that era), so every query head of a GQA group reads its KV head "
        "again; 'MMHA optimization for MQA and GQA' is a v0.7.0 change (CHANGELOG.md) and XQA a v0.8 one "
        "(docs/source/blogs/XQA-kernel.md). The 2023 benchmark engines use a contiguous KV cache, not XQA's paged one.",
    ),
)
"""Documented properties of an engine version that change what the hardware does, matched on the row's
``engine`` column: (pattern, ServeConfig fields, source). The same for every row of that engine."""


CHECKPOINT_SETUPS: tuple[tuple[str, str, dict[str, str], str], ...] = (
    (
        r"^DeepSeek-R1",
        "fp4",
        {"attention_precision": "bf16"},
        "nvidia/DeepSeek-R1-FP4 (ModelOpt NVFP4): the MoE layers are FP4, the 61 attention modules bf16 "
        "(TensorRT-LLM tech blog 1, 'Precision Strategy' table; blog 3: 'The MoE layers inside this checkpoint have "
        "been quantized into FP4', the checkpoint is 'about 400 GB' = 654 B expert weights x 0.56 B + 17 B in bf16, "
        "and 'about 80 GB' per GPU under attention DP on 8 B200s).",
    ),
)
"""Documented properties of a published checkpoint, matched on the row's ``model`` and its weight precision:
(model pattern, precision, ServeConfig fields, source). The same for every row of that checkpoint."""


def checkpoint_setup(model: str, precision: str) -> tuple[dict[str, str], list[str]]:
    """ServeConfig fields and their sources for a row's checkpoint (empty when it quantises every layer)."""
    fields: dict[str, str] = {}
    notes: list[str] = []
    for pattern, prec, values, source in CHECKPOINT_SETUPS:
        if prec == precision and re.search(pattern, model):
            fields.update(values)
            notes.append(source)
    return fields, notes


def engine_setup(engine: str) -> tuple[dict[str, bool], list[str]]:
    """ServeConfig fields and their sources for a row's engine (empty for today's engines)."""
    fields: dict[str, bool] = {}
    notes: list[str] = []
    for pattern, values, source in ENGINE_SETUPS:
        if re.search(pattern, engine):
            fields.update(values)
            notes.append(source)
    return fields, notes


def check_row(catalog: Catalog, row: dict[str, str]) -> InferenceCheck:
    """Predict one row (or say why it cannot be predicted)."""
    measured = float(row["metric_value"]) if row["metric_value"] else None
    base = {"id": row["id"], "model": row["model"], "metric": row["metric_name"], "unit": row["metric_unit"]}
    why = _not_expressible(row)
    system = _system(row["gpu"]) or ""
    if why:
        return InferenceCheck(**base, system=system, measured=measured, reason=why)  # type: ignore[arg-type]
    assumptions: list[str] = []
    tp = int(row["tp"])
    pp = int(row["pp"] or 1)
    prec_text = row["precision"].lower()
    precision = "fp4" if "fp4" in prec_text else "fp8" if "fp8" in prec_text else "bf16"
    if not prec_text:
        assumptions.append("precision not stated: bf16")
    kv_dtype = "fp8" if "fp8 kv" in prec_text else "bf16" if "fp16 kv" in prec_text else None
    if kv_dtype is None:
        assumptions.append("KV cache fp8 with fp8/fp4 weights, else bf16 (fmstack default)")
    ep = min(int(row["ep"]), tp) if row["ep"].isdigit() else 1
    attention_dp = "attention DP" in row["notes"]
    if attention_dp:
        if not row["ep"].isdigit():
            assumptions.append(f"attention DP with EP not stated: ep = tp = {tp}")
        ep = tp
    engine_fields, engine_notes = engine_setup(row["engine"])
    assumptions.extend(engine_notes)
    ckpt_fields, ckpt_notes = checkpoint_setup(row["model"], precision)
    assumptions.extend(ckpt_notes)
    load = row["batch_or_concurrency"]
    static = "static" in load
    concurrency: int | None = None
    if load.startswith("max load"):
        assumptions.append("max load: concurrency = sequences the KV cache holds")
    else:
        concurrency = int(re.findall(r"\d+", load)[0])
    speculative = None
    mtp = re.search(r"MTP[^)]*?\((\d+) (?:next-n )?layers\)", row["notes"])
    if mtp is not None:
        # the row's own speculation, with the acceptance any user gets by default (not fitted to the row)
        speculative = make_spec("mtp", catalog.model(MODEL_NAMES[row["model"]]), tokens=int(mtp.group(1)))
        assert speculative is not None  # "mtp" is a method, never "none"
        assumptions.append(
            f"MTP speculative decoding, {speculative.tokens} draft tokens at fmstack's default acceptance "
            f"{speculative.acceptance[0]} per position (DeepSeek-V3 report sec. 5.4.3): "
            f"{speculative.mean_tokens_per_step:.2f} tokens per iteration"
        )
    cfg = ServeConfig(
        speculative=speculative, tp=tp, pp=pp, ep=ep, precision=precision, kv_dtype=kv_dtype, input_len=int(row["input_len"]), output_len=int(row["output_len"]),
        concurrency=concurrency, scheduler="static" if static else "continuous", attention_dp=attention_dp,
        attention_precision=ckpt_fields.get("attention_precision"), **engine_fields,
    )  # fmt: skip
    arch = catalog.model(MODEL_NAMES[row["model"]])
    cluster = build_cluster(catalog, system, 1)
    est = estimate_serve(arch, cluster, cfg)
    metric = row["metric_name"]
    predicted = {
        "output_throughput_total": est.output_tokens_per_s * (int(row["num_gpus"] or tp) // (tp * pp)),
        "output_throughput_per_gpu": est.output_tokens_per_s_per_gpu,
        "ttft": est.ttft_s * 1e3,
        "tpot": est.itl_s * 1e3,
        # trtllm-bench: the mean over requests of each one's output tokens / its end-to-end latency
        "output_throughput_per_user": cfg.output_len / est.latency_s,
    }[metric]
    err = 100.0 * (predicted - measured) / measured if measured else None
    return InferenceCheck(
        **base, system=system, measured=measured, predicted=predicted, error_pct=err,
        in_scope=True, bottleneck=est.bottleneck, assumptions=assumptions,
        config=f"tp {tp} pp {pp} ep {ep}{' attention-dp' if attention_dp else ''} {precision}{f' ({cfg.attention_precision} attention)' if cfg.attention_precision else ''}/{cfg.kv} kv, "
        f"{cfg.input_len}/{cfg.output_len}, {'static ' if static else ''}batch {est.running}"
        f"{f', {speculative.method} k={speculative.tokens}' if speculative is not None else ''}"
        f"{'' if cfg.gqa_kv_sharing or arch.num_kv_heads == arch.num_heads else ', KV read per query head'}",
    )  # fmt: skip


def validate_inference(catalog: Catalog) -> list[InferenceCheck]:
    """Every row of the inference measurements, predicted where the model can express it."""
    return [check_row(catalog, row) for row in _rows()]


def summary(checks: list[InferenceCheck]) -> tuple[float, float, int]:
    """(median, worst) absolute error in percent over the predicted rows, and their count."""
    errors = [abs(c.error_pct) for c in checks if c.in_scope and c.error_pct is not None]
    if not errors:
        return float("nan"), float("nan"), 0
    return statistics.median(errors), max(errors), len(errors)
