"""Side check of `fmstack validate --only rlcheck`: NVIDIA NeMo RL's published GRPO step times (not calibration data).

Every GRPO row of NeMo RL's performance summary that names a model in the zoo and a system in the catalog
(:data:`SOURCE`; rows, with each row's recipe, in ``data/nemorl/grpo.csv``) is predicted with
:func:`fmstack.perfmodel.rl.estimate_rl`. The source publishes one time per row, the step (mean of 5 steps:
generation, policy and reference logprobs, training and refit), and tokens/s/GPU = (prompt + response tokens of the
step) / step time / GPUs; no per-stage times. So the check compares the step time; the predicted stages are reported
beside it, without a measured counterpart.

Each row maps to: GRPO, ``prompts x generations`` responses, ``minibatches = samples / T-GBS`` optimizer steps,
one epoch, a reference policy (the recipes' KL penalty 0.01), a rule reward (math verifier); generation TP from the
table, BF16; training TP and PP from the table; colocated for on-policy rows, else split placement with the
recipe's generation nodes, ``async_split`` and the row's ``max_trajectory_age`` (1 or 8 steps off). System:
DGX-H100 -> ``dgx-h100``, GB200-NVL72 -> ``dgx-gb200`` (4 GPUs a node, a 72-GPU NVLink domain).

Lengths: the response length is the table's *G-Average Seq len*, which is the mean generated length: the table's
own tokens/s/GPU x step x GPUs / samples exceeds it by 100-130 tokens on 23 of the 25 rows, the prompt (the math
prompt template around an OpenMathInstruct-2 problem). The prompt length of a row is the median of that difference
over the rows of its model (:func:`prompt_lengths`): a property of the workload read off the table, not a model
constant. Lengths are uniform (``length_spread`` 0): the source gives the mean only.

Colocated rows offload the training state to the host around generation, as NeMo RL always does when colocated
(``RLConfig.offload`` set for them; priced by :mod:`fmstack.perfmodel.rl_switch`).
Training TP / PP / CP / EP, the recipe's vLLM ``gpu_memory_utilization`` (``rollout_memory_fraction``) and the
policy's own logprob pass before training (``old_logprob``; NeMo RL recomputes the previous policy's logprobs) come
from the row. What the model cannot express is listed per row (``differences``), never corrected for: sequence
packing, the reference-policy swap and the orchestration of NeMo RL's step, and the real response-length distribution
(math answers up to the 4k / 8k cap: a long tail the uniform lengths do not have). Nothing is fitted to these rows.
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
from fmstack.errors import InputError
from fmstack.perfmodel.config import GradDtype
from fmstack.perfmodel.rl import RLConfig, estimate_rl
from fmstack.perfmodel.validation import error_stats

SOURCE = (
    "NVIDIA-NeMo/RL docs/about/performance-summary.md @ tag v0.6.0 5fb588932bf835506a8a5bac01de4f8c7ab0a065 "
    "(Llama 3.1 8B, Qwen3-32B rows: tag v0.5.0 6c7089300fded94abfa49bb9cbf9eb357d862461)"
)
URL = "https://docs.nvidia.com/nemo/rl/latest/about/performance-summary.html"
SYSTEMS: dict[str, str] = {"DGX-H100": "dgx-h100", "GB200-NVL72": "dgx-gb200"}
"""The source's system -> catalog instance."""
STAGES = ("rollout", "logprobs", "training", "weight_sync", "switch")
MEGATRON_SHARDING = "zero1"
"""The trained policy's data-parallel sharding in every row: NeMo RL's Megatron backend runs Megatron-Core's
distributed optimizer (``policy.megatron_cfg.optimizer.use_distributed_optimizer: true``, ``use_custom_fsdp: false``
in ``examples/configs/grpo_math_1B_megatron.yaml``, which the performance recipes inherit): optimizer state sharded,
weights replicated over data parallelism. Not estimate rl's default rule, FSDP at train tp = pp = 1 (veRL's FSDP
backend), which before session 16 priced the tp = pp = 1 rows with FSDP's weight gathers."""
MEGATRON_GRAD_DTYPE: GradDtype = "bf16"
"""The trained policy's gradients in every row (and stages.csv's): kept and reduced in bf16, 2 B on the wire.
``policy.megatron_cfg.distributed_data_parallel_config.grad_reduce_in_fp32: false`` in ``grpo_math_1B.yaml`` (tags
v0.5.0 6c708930, v0.6.0 5fb58893) and ``grpo_math_1B_megatron.yaml`` (tag v0.3.1 27d0af94, inherited by
``grpo_math_8B_megatron.yaml`` / ``grpo_math_70B_megatron.yaml``), which the performance recipes inherit without
overriding it; ``nemo_rl/models/megatron/setup.py`` passes it to Megatron-Core's ``DistributedDataParallelConfig``,
whose gradient buffer (and so the reduction) is then bf16."""
"""Predicted stages (NeMo RL's timers: generation, policy_and_reference_logprobs, policy_training, refit; the
colocated switch's host copies fall in prepare_for_generation, logprob_inference_prep and training_prep)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RLCheck:
    """One published NeMo RL row against the model (errors signed: + = the model is slower than measured)."""

    id: str
    release: str
    table: str
    model: str
    policy: str
    num_gpus: int
    samples: int
    prompt_len: int
    response_len: int
    measured_step_s: float
    measured_tokens_per_s_per_gpu: float
    predicted_step_s: float | None = None
    predicted_tokens_per_s_per_gpu: float | None = None
    step_error_pct: float | None = None
    predicted_stages_s: dict[str, float] = field(default_factory=dict)
    fits: bool = True
    bottleneck: str = ""
    exact: bool = True
    """False when the row uses a layout the model cannot express (``differences`` says which)."""
    differences: list[str] = field(default_factory=list)
    not_expressible: str = ""
    recipe: str = ""
    response_cap: int = 0
    """The recipe's per-response token limit: ``max_total_sequence_length`` - prompt (NeMo RL's ``max_new_tokens``
    and vLLM's ``max_model_len`` are both ``max_total_sequence_length``)."""
    predicted_step_cap_s: float | None = None
    """The step if one response per replica runs to ``response_cap`` (``RLConfig.response_cap``): a bound on the
    batch's tail, not the default prediction (the source gives the mean length only)."""
    step_error_cap_pct: float | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _data() -> Path:
    return Path(str(resources.files("fmstack.perfmodel") / "data" / "nemorl"))


def rows() -> list[dict[str, str]]:
    """The published rows (grpo.csv without its citation comment lines)."""
    text = (_data() / "grpo.csv").read_text(encoding="utf-8")
    return list(csv.DictReader(line for line in text.splitlines() if not line.startswith("#")))


def _samples(row: dict[str, str]) -> int:
    return int(row["prompts"]) * int(row["generations"])


def prompt_lengths(data: list[dict[str, str]]) -> dict[str, int]:
    """Model -> prompt tokens: the median over its rows of tokens/s/GPU x step x GPUs / samples - mean response."""
    by_model: dict[str, list[float]] = {}
    for r in data:
        total = float(r["tokens_per_s_per_gpu"]) * float(r["step_time_s"]) * int(r["gpus"]) / _samples(r)
        by_model.setdefault(r["model"], []).append(total - float(r["avg_gen_len"]))
    return {m: round(statistics.median(v)) for m, v in by_model.items()}


def row_config(row: dict[str, str], prompt_len: int) -> RLConfig:
    """The RLConfig one row describes (module docstring)."""
    samples = _samples(row)
    on = row["policy"] == "on"
    return RLConfig(
        algorithm="grpo", prompts_per_step=int(row["prompts"]), samples_per_prompt=int(row["generations"]),
        prompt_len=prompt_len, response_len=int(row["avg_gen_len"]),
        placement="colocated" if on else "split", rollout_nodes=None if on else int(row["gen_nodes"]),
        async_split=not on, max_trajectory_age=_age(row), rollout_tp=int(row["gen_tp"]), rollout_precision="bf16",
        train_tp=int(row["train_tp"]), train_pp=int(row["train_pp"]), train_cp=int(row["train_cp"]),
        train_ep=int(row["train_ep"]), rollout_memory_fraction=float(row["gpu_memory_utilization"]), epochs=1,
        minibatches=max(1, samples // int(row["train_gbs"])), reward_model=False, reference=True,
        offload=True if on else None,
        train_sharding=MEGATRON_SHARDING, grad_dtype=MEGATRON_GRAD_DTYPE,
    )  # fmt: skip


def _age(row: dict[str, str]) -> int:
    """Steps off-policy of an asynchronous row (``1off``, ``8off``): its max_trajectory_age_steps; 1 on-policy."""
    policy = row["policy"]
    return int(policy.removesuffix("off")) if policy.endswith("off") else 1


def differences(row: dict[str, str]) -> tuple[list[str], bool]:
    """What the run does that the model does not, and whether the run is expressed exactly."""
    out = []
    exact = True
    if row["note"]:
        out.append(row["note"])
    return out, exact


def check_nemorl(catalog: Catalog) -> list[RLCheck]:
    """Every row, predicted vs measured step time, with the predicted stages."""
    data = rows()
    prompts = prompt_lengths(data)
    checks = []
    for row in data:
        samples = _samples(row)
        prompt = prompts[row["model"]]
        diffs, exact = differences(row)
        base = RLCheck(
            id=row["id"], release=row["release"], table=row["table"], model=row["model"], policy=row["policy"],
            num_gpus=int(row["gpus"]), samples=samples, prompt_len=prompt, response_len=int(row["avg_gen_len"]),
            measured_step_s=float(row["step_time_s"]),
            measured_tokens_per_s_per_gpu=float(row["tokens_per_s_per_gpu"]), exact=exact, differences=diffs,
            recipe=row["recipe"],
        )  # fmt: skip
        instance = SYSTEMS[row["system"]]
        nodes = math.ceil(int(row["gpus"]) / int(row["gpus_per_node"]))
        try:
            cluster = build_cluster(catalog, instance, nodes)
            cfg = row_config(row, prompt)
            est = estimate_rl(catalog.model(row["model"]), cluster, cfg)
            cap = int(row["max_seq_len"]) - prompt
            capped = estimate_rl(catalog.model(row["model"]), cluster, replace(cfg, response_cap=cap))
        except InputError as exc:
            checks.append(_replace(base, not_expressible=f"{exc.field}: {exc.message}"))
            continue
        p = est.parts_s
        stages = {
            "rollout": p["rollout"],
            "logprobs": p["old_logprob_forward"] + p["reference_forward"] + p["reward_forward"] + p["critic_forward"],
            "training": p["actor_train"] + p["critic_train"],
            "weight_sync": p["weight_sync"],
            "switch": p["colocated_switch"],
        }
        step = est.step_time_s
        tokens = samples * (prompt + base.response_len)
        checks.append(
            _replace(
                base, predicted_step_s=step, predicted_tokens_per_s_per_gpu=tokens / step / base.num_gpus,
                step_error_pct=(step / base.measured_step_s - 1.0) * 100.0, predicted_stages_s=stages,
                fits=est.fits, bottleneck=est.bottleneck, response_cap=cap, predicted_step_cap_s=capped.step_time_s,
                step_error_cap_pct=(capped.step_time_s / base.measured_step_s - 1.0) * 100.0,
            )
        )  # fmt: skip
    return checks


def _replace(c: RLCheck, **kw: Any) -> RLCheck:
    return RLCheck(**{**asdict(c), **kw})


@dataclass(frozen=True, kw_only=True, slots=True)
class RLSummary:
    """Step-time errors of a set of rows (signed: + = model slower than measured)."""

    scope: str
    compared: int
    median_error_pct: float
    median_abs_error_pct: float
    worst_abs_error_pct: float


SCOPES = ("all", "exact", "on", "off", "cap_all", "cap_on", "cap_off")
"""Summary scopes; ``cap_*``: the same rows with the tail to the cap (``RLCheck.predicted_step_cap_s``)."""


def summarize(checks: list[RLCheck], scope: str) -> RLSummary:
    """``scope``: ``all``, ``exact`` (layout expressed), ``on`` (on-policy) or ``off`` (asynchronous); ``cap_all``,
    ``cap_on``, ``cap_off``: those rows' errors with the tail to the recipe's cap."""
    cap = scope.startswith("cap_")
    base = scope.removeprefix("cap_")

    def keep(c: RLCheck) -> bool:
        return {"all": True, "exact": c.exact, "on": c.policy == "on", "off": c.policy != "on"}[base]

    errs = [c.step_error_cap_pct if cap else c.step_error_pct for c in checks if keep(c)]
    errors = [e for e in errs if e is not None]
    return RLSummary(scope=scope, compared=len(errors), **error_stats(errors))
