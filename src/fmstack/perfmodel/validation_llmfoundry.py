"""Side check of `fmstack validate`: PyTorch FSDP BF16 runs of MosaicML llm-foundry (not calibration data).

The training validation set (``validation.py``) is Megatron-Core / NeMo runs, mostly TP/PP; the planner usually
picks tp 1 with FSDP. This side check predicts every row of three published tables of that regime: MPT models
(125M..70B) trained with Composer's PyTorch FSDP ``FULL_SHARD``, BF16, FlashAttention (triton), with or without
activation checkpointing, on 8 to 128 GPUs (:data:`SOURCE`; rows in ``data/llmfoundry/benchmarks.csv``, models in
``data/llmfoundry/models.yaml``, the A100 40GB node in ``data/llmfoundry/instances.yaml``).

Each row maps to: tp = pp = cp = 1, dp = # GPUs, sharding fsdp, micro-batch and global batch from the row,
recompute full when Activation Checkpointing is True (Composer checkpoints every MPT block) else none, precision
bf16, flash attention on, and the data-parallel reduction in the row's MP Mode: Composer's DEFAULT reduces in
fp32 (``reduce_dtype=torch.float32``), PURE in bf16 (mosaicml/composer composer/trainer/mosaic_fsdp_utils.py,
``get_mixed_precision``). Gradients kept for the optimizer stay fp32 (keep_low_precision_grads=False there: FSDP
casts reduced gradients back to the fp32 parameters), and those fp32 parameters are the master: ``fp32-params``, FSDP1
``MixedPrecision(param_dtype=bf16)`` casting each shard before the all-gather (PyTorch ``_flat_param.py``
``_use_low_precision_shard``). Nothing is fitted to these rows: the efficiency defaults are the model's.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path

from fmstack.catalog.loader import Catalog, read_file
from fmstack.catalog.params import count_params
from fmstack.catalog.schema import ModelArch
from fmstack.catalog.topology import build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel.config import TrainConfig, describe_config
from fmstack.perfmodel.training import estimate_training
from fmstack.perfmodel.validation import error_stats

SOURCE = "mosaicml/llm-foundry scripts/train/benchmarking/README.md @ 061f2c7ce64e655100286584a7629e2a09f827ba"
"""The README's benchmark tables as of 2023-10-17 (the commit read; later commits add an H100 >= 128 GPU table)."""

TABLES: dict[str, str] = {
    "a100-80gb-roce": "A100 80GB with 1600 Gbps node-node interconnect (RoCE)",
    "a100-40gb-roce": "A100 40GB with 1600 Gbps node-node interconnect (RoCE)",
    "h100-80gb-bf16": "H100 80GB BF16",
}
"""Table key of benchmarks.csv -> the README's table heading."""

SYSTEMS: dict[str, tuple[str, str]] = {
    "a100-80gb-roce": ("dgx-a100", "1600 Gb/s per node = dgx-a100's 8 x 200 Gb/s (ib-hdr standing for RoCE)"),
    "a100-40gb-roce": ("mosaic-a100-40gb-roce", "data/llmfoundry/instances.yaml (ib-hdr standing for RoCE)"),
    "h100-80gb-bf16": ("dgx-h100", "the H100 table states no interconnect: dgx-h100 (8 x 400 Gb/s NDR) assumed"),
}
"""Table key -> (catalog instance, why)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SideCheck:
    """One published llm-foundry row against the model."""

    table: str
    model: str
    seq_len: int
    num_gpus: int
    micro_batch: int
    global_batch: int
    activation_checkpointing: bool
    mp_mode: str
    measured_tokens_per_s_per_gpu: float
    predicted_tokens_per_s_per_gpu: float | None
    error_pct: float | None
    published_params: int
    model_params: int
    fits: bool = True
    bottleneck: str = ""
    config: str = ""
    assumptions: list[str] = field(default_factory=list)
    not_expressible: str = ""

    @property
    def params_error_pct(self) -> float:
        return (self.model_params / self.published_params - 1.0) * 100.0


def _data() -> Path:
    return Path(str(resources.files("fmstack.perfmodel") / "data" / "llmfoundry"))


def rows() -> list[dict[str, str]]:
    """The published rows (benchmarks.csv without its citation comment lines)."""
    text = (_data() / "benchmarks.csv").read_text(encoding="utf-8")
    return list(csv.DictReader(line for line in text.splitlines() if not line.startswith("#")))


def sidecheck_catalog(base: Catalog) -> Catalog:
    """``base`` plus the MPT models and the A100 40GB RoCE node (a new catalog; ``base`` is left unchanged)."""
    cat = Catalog()
    for kind in base.entries:
        cat.extend(base.all(kind))
    for name in ("models.yaml", "instances.yaml"):
        cat.extend(read_file(_data() / name))
    return cat


def mpt_model(cat: Catalog, size: str, seq_len: int) -> ModelArch:
    """MPT-``size`` with its learned position table sized to ``seq_len`` (the benchmark's model.max_seq_len)."""
    return cat.model(f"mpt-{size}").model_copy(update={"max_seq_len": seq_len})


def row_config(row: dict[str, str]) -> TrainConfig:
    """The TrainConfig one row describes (module docstring)."""
    n = int(row["num_gpus"])
    return TrainConfig(
        tp=1, pp=1, cp=1, dp=n, micro_batch=int(row["micro_batch"]), global_batch=int(row["global_batch"]),
        seq_len=int(row["seq_len"]), precision="bf16", sharding="fsdp",
        recompute="full" if row["activation_checkpointing"] == "True" else "none",
        flash_attention=True, grad_bytes=4, reduce_bytes=2 if row["mp_mode"] == "PURE" else 4,
        master_weights="fp32-params",
    )  # fmt: skip


def check_llmfoundry(catalog: Catalog) -> list[SideCheck]:
    """Every row of the three tables, predicted vs measured tokens/s/GPU."""
    cat = sidecheck_catalog(catalog)
    checks = []
    for row in rows():
        if row["sharding"] != "FULL_SHARD":
            raise InputError("benchmarks.csv", f"sharding {row['sharding']!r}: only FULL_SHARD rows are expressed")
        seq = int(row["seq_len"])
        model = mpt_model(cat, row["model"], seq)
        instance, why = SYSTEMS[row["table"]]
        cfg = row_config(row)
        base = SideCheck(
            table=row["table"], model=model.name, seq_len=seq, num_gpus=cfg.num_gpus, micro_batch=cfg.micro_batch,
            global_batch=cfg.global_batch, activation_checkpointing=cfg.recompute == "full", mp_mode=row["mp_mode"],
            measured_tokens_per_s_per_gpu=float(row["tokens_per_s_per_gpu"]), predicted_tokens_per_s_per_gpu=None,
            error_pct=None, published_params=int(row["num_params"]), model_params=count_params(model).total,
        )  # fmt: skip
        nodes = math.ceil(cfg.num_gpus / cat.instance(instance).num_gpus)
        try:
            est = estimate_training(model, build_cluster(cat, instance, nodes), cfg)
        except InputError as exc:
            checks.append(replace(base, not_expressible=str(exc)))
            continue
        assumptions = [f"system {instance}: {why}"] if nodes > 1 else []
        if not est.fits:
            assumptions.append(f"model memory {est.memory.total_gib:.0f} GiB does not fit; the run did")
        predicted = est.tokens_per_s_per_gpu
        error = (predicted / base.measured_tokens_per_s_per_gpu - 1.0) * 100.0
        done = replace(base, predicted_tokens_per_s_per_gpu=predicted, error_pct=error, fits=est.fits,
                       bottleneck=est.bottleneck, config=describe_config(est.config), assumptions=assumptions)  # fmt: skip
        checks.append(done)
    return checks


@dataclass(frozen=True, kw_only=True, slots=True)
class TableSummary:
    """Errors of one table's compared rows (signed: + = model faster than measured)."""

    table: str
    compared: int
    median_error_pct: float
    median_abs_error_pct: float
    worst_abs_error_pct: float


def summarize(checks: list[SideCheck], table: str) -> TableSummary:
    """Median signed, median absolute and worst absolute error of ``table``'s rows."""
    errors = [c.error_pct for c in checks if c.table == table and c.error_pct is not None]
    return TableSummary(table=table, compared=len(errors), **error_stats(errors))
