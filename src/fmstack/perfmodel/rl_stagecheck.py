"""Per-stage side check of the RL step model: NeMo RL's published stage times (not calibration data).

NeMo RL's performance summary (the rows of :mod:`fmstack.perfmodel.validation_rl`) publishes the step only. A few
sources publish the stages of a GRPO step (``data/nemorl/stages.csv``, each row with its source): the v0.3 blog's
Llama 3.1 8B / 70B runs and a user's reruns of them (NVIDIA-NeMo/RL issue #959), and PR #3461's GB200
Qwen3-30B-A3B run (generation and refit only). Each row is predicted as :func:`fmstack.perfmodel.validation_rl.
row_config` predicts an on-policy row (colocated, host offload, ``minibatches = samples / train GBS``, reference
policy, rule reward, the policy's own logprob pass), and every published stage is set against its counterpart:

- ``generation`` (NeMo RL's ``generation`` timer) <- the predicted ``rollout``; also with the tail to the recipe's
  cap (``RLConfig.response_cap``), as the rlcheck's second column;
- ``logprobs`` (``policy_and_reference_logprobs``) <- old-logprob + reference forward passes;
- ``training`` (``policy_training``) <- ``actor_train``;
- ``refit`` (the refit timer: ``prepare_for_generation``, which wakes vLLM and moves the weights) <- ``weight_sync``
  + ``colocated_switch`` (the training state's offload is in the logprob / training prep timers in NeMo RL, so this
  counterpart holds slightly more than the measured timer);
- ``rest``: the step minus the published stages, against the predicted step minus the same predicted stages.

Nothing is fitted to these rows; errors are signed (+ = the model is slower than measured).
"""

from __future__ import annotations

import csv
import math
import statistics
from dataclasses import asdict, dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from fmstack.catalog.loader import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.perfmodel.rl import RLConfig, RLEstimate, estimate_rl
from fmstack.perfmodel.validation import error_stats
from fmstack.perfmodel.validation_rl import MEGATRON_GRAD_DTYPE, MEGATRON_SHARDING, SYSTEMS, prompt_lengths, rows

STAGE_COLUMNS = ("generation", "logprobs", "training", "refit")
"""Published stages (columns ``<stage>_s`` of stages.csv), in NeMo RL's timer order of a step."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StageCheck:
    """One published per-stage row against the model."""

    id: str
    source: str
    model: str
    num_gpus: int
    prompt_len: int
    response_len: int
    response_cap: int
    measured_s: dict[str, float]
    """``step`` and every published stage (``STAGE_COLUMNS``), plus ``rest`` = step - the published stages."""
    predicted_s: dict[str, float] = field(default_factory=dict)
    """The same keys, predicted (default: no tail to the cap)."""
    predicted_cap_s: dict[str, float] = field(default_factory=dict)
    """The same keys with the tail to the cap (only ``generation``, ``rest`` and ``step`` change)."""
    error_pct: dict[str, float] = field(default_factory=dict)
    error_cap_pct: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _data() -> Path:
    return Path(str(resources.files("fmstack.perfmodel") / "data" / "nemorl"))


def stage_rows() -> list[dict[str, str]]:
    """The published per-stage rows (stages.csv without its citation comment lines)."""
    text = (_data() / "stages.csv").read_text(encoding="utf-8")
    return list(csv.DictReader(line for line in text.splitlines() if not line.startswith("#")))


def _config(row: dict[str, str], prompt_len: int) -> RLConfig:
    samples = int(row["prompts"]) * int(row["generations"])
    return RLConfig(
        algorithm="grpo", prompts_per_step=int(row["prompts"]), samples_per_prompt=int(row["generations"]),
        prompt_len=prompt_len, response_len=int(row["avg_gen_len"]), placement="colocated",
        rollout_tp=int(row["gen_tp"]), rollout_precision="bf16", train_tp=int(row["train_tp"]),
        train_pp=int(row["train_pp"]), train_cp=int(row["train_cp"]), train_ep=int(row["train_ep"]),
        rollout_memory_fraction=float(row["gpu_memory_utilization"]), epochs=1,
        minibatches=max(1, samples // int(row["train_gbs"])), reward_model=False, reference=True, offload=True,
        train_sharding=MEGATRON_SHARDING, grad_dtype=MEGATRON_GRAD_DTYPE,
    )  # fmt: skip


def _stages(est: RLEstimate) -> dict[str, float]:
    p = est.parts_s
    return {
        "generation": p["rollout"],
        "logprobs": p["old_logprob_forward"] + p["reference_forward"] + p["reward_forward"] + p["critic_forward"],
        "training": p["actor_train"] + p["critic_train"],
        "refit": p["weight_sync"] + p["colocated_switch"],
        "step": est.step_time_s,
    }


def _keep(stages: dict[str, float], published: set[str]) -> dict[str, float]:
    out = {k: v for k, v in stages.items() if k in published or k == "step"}
    # in the stages' own order: a set's order follows the string hash seed, and the float sum with it (1e-14 noise)
    out["rest"] = stages["step"] - sum(v for k, v in stages.items() if k in published)
    return out


def _errors(pred: dict[str, float], meas: dict[str, float]) -> dict[str, float]:
    """Signed errors; none for a ``rest`` the model leaves empty (every stage it has is published: its -100 % says
    nothing; the Llama rows), one where the rest holds unpublished stages (PR #3461's logprobs and training)."""
    return {k: (pred[k] / v - 1.0) * 100.0 for k, v in meas.items()
            if v > 0 and k in pred and not (k == "rest" and pred[k] <= 1e-9)}  # fmt: skip


def check_stages(catalog: Catalog) -> list[StageCheck]:
    """Every published per-stage row, predicted stage by stage (module docstring)."""
    prompts = prompt_lengths(rows())
    out = []
    for row in stage_rows():
        published = {k for k in STAGE_COLUMNS if row[f"{k}_s"].strip()}
        measured = {k: float(row[f"{k}_s"]) for k in STAGE_COLUMNS if k in published}
        measured["step"] = float(row["step_s"])
        measured["rest"] = measured["step"] - sum(measured[k] for k in STAGE_COLUMNS if k in published)
        prompt = prompts[row["prompt_of"]]
        cap = int(row["max_seq_len"]) - prompt
        nodes = math.ceil(int(row["gpus"]) / int(row["gpus_per_node"]))
        cluster = build_cluster(catalog, SYSTEMS[row["system"]], nodes)
        cfg = _config(row, prompt)
        model = catalog.model(row["model"])
        pred = _keep(_stages(estimate_rl(model, cluster, cfg)), published)
        pred_cap = _keep(_stages(estimate_rl(model, cluster, replace(cfg, response_cap=cap))), published)
        out.append(
            StageCheck(
                id=row["id"], source=row["source"], model=row["model"], num_gpus=int(row["gpus"]), prompt_len=prompt,
                response_len=int(row["avg_gen_len"]), response_cap=cap, measured_s=measured, predicted_s=pred,
                predicted_cap_s=pred_cap, error_pct=_errors(pred, measured), error_cap_pct=_errors(pred_cap, measured),
            )
        )  # fmt: skip
    return out


def stage_summary(checks: list[StageCheck]) -> dict[str, dict[str, float]]:
    """Per stage (and ``step``, ``rest``): how many rows publish it, signed / absolute median and worst error, and
    the median error with the tail to the cap (``median_error_cap_pct``)."""
    out: dict[str, dict[str, float]] = {}
    for key in (*STAGE_COLUMNS, "rest", "step"):
        errs = [c.error_pct[key] for c in checks if key in c.error_pct]
        caps = [c.error_cap_pct[key] for c in checks if key in c.error_cap_pct]
        out[key] = {
            "compared": len(errs),
            **error_stats(errs),
            "median_error_cap_pct": statistics.median(caps) if caps else math.nan,  # NaN: null in --json
        }
    return out
