"""The memory model against published peak memory (``data/peak-memory.csv``): torchtitan's Llama 3.1 runs.

Like with like: torchtitan prints the PyTorch caching allocator's peak *reserved* bytes
(``torch.cuda.memory_stats()["reserved_bytes.all.peak"]``, ``torchtitan/metrics.py`` at commit 9dec370), the
maximum over all GPUs. Reserved >= allocated (the allocator keeps freed blocks cached, and fragmentation), and it
leaves out what lives outside the allocator (CUDA context, NCCL's buffers), which nvidia-smi would count. The model's
``total_gib`` (weights + gradients + optimizer + activations + temporary buffers, without the 3 GiB reserve) is a
peak-allocated estimate, so it is compared with the published number as is and the gap says how much the allocator
and the terms the model does not have add.

How a torchtitan row becomes a :class:`~fmstack.perfmodel.config.TrainConfig` (each said in the row's assumptions):

- FSDP2 (``fully_shard`` with ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``) -> ``fsdp`` with
  ``fp32-params`` (the fp32 sharded parameters are the master, 16 B per sharded parameter) and a fp32 reduction; under
  pipeline parallelism torchtitan passes ``reshard_after_forward=False`` (``parallelize_llama.py``), so the stage's
  bf16 weights stay gathered from forward to backward: ZeRO-2 storage (weights whole, gradients and optimizer
  sharded) -> ``zero2``.
- Float8 (torchao ``Float8Linear``, dynamic tensorwise scaling) keeps no FP8 weight copy between steps and saves the
  high-precision inputs for backward (torchao ``float8_linear.py``: ``ctx.save_for_backward(input_hp, weight_hp_t)``),
  so its storage is the bf16 row's -> ``bf16``. (Transformer Engine, which the model's ``fp8`` describes, keeps both.)
- ``selective-op`` (torchtitan's op-level selective checkpointing: saves every other ``mm`` output and the SDPA
  outputs, ``_save_list`` in ``parallelize_llama.py``) is not one of Megatron-Core's recompute modules: not
  expressible. ``full`` -> ``full``.
- tensor parallelism comes with sequence-parallel norms (``SequenceParallel`` on ``attention_norm`` / ``ffn_norm``)
  -> ``sequence_parallel``; PP micro-batches = the PP degree, each ``local_batch / pp`` sequences.
"""

from __future__ import annotations

import csv
import math
import statistics
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from fmstack.catalog import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel.config import FSDP_REDUCE_BYTES, TrainConfig
from fmstack.perfmodel.training import estimate_training

DATA_FILE = "peak-memory.csv"
TOLERANCE_PCT = 25.0
"""Set before the first comparison: a row agrees when |predicted - measured| <= 25 % of measured."""

OP_SAC = (
    "torchtitan's op-level selective checkpointing (saves every other mm output and the SDPA outputs) is none of "
    "Megatron-Core's recompute modules"
)


@dataclass(frozen=True, slots=True)
class MemoryCheck:
    """One published peak-memory reading and the model's memory for its configuration."""

    id: str
    source: str
    locator: str
    model: str
    num_gpus: int
    config: str
    metric: str
    measured_gib: float
    predicted_gib: float | None
    error_pct: float | None
    parts_gib: dict[str, float] = field(default_factory=dict)
    """The model's breakdown: weights, grads, optimizer, activations, temporary."""
    assumptions: list[str] = field(default_factory=list)
    not_expressible: str = ""


def load_rows(text: str | None = None) -> list[dict[str, str]]:
    """The rows of ``data/peak-memory.csv`` (or of ``text``, a file of the same columns); ``#`` lines are comments."""
    if text is None:
        text = resources.files("fmstack.perfmodel").joinpath("data", DATA_FILE).read_text()
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    return list(csv.DictReader(lines))


def _int(row: dict[str, str], key: str) -> int:
    value = row.get(key, "")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise InputError(f"peak-memory row {row.get('id', '?')}: {key}", f"a positive integer, got {value!r}") from None
    if number < 1:
        raise InputError(f"peak-memory row {row.get('id', '?')}: {key}", f"a positive integer, got {number}")
    return number


def row_config(row: dict[str, str], assumptions: list[str]) -> TrainConfig:
    """The TrainConfig of a torchtitan row (module docstring), its mapping choices appended to ``assumptions``."""
    tp, pp, dp, cp = (_int(row, k) for k in ("tp", "pp", "dp", "cp"))
    vpp, local, seq = _int(row, "vpp"), _int(row, "local_batch"), _int(row, "seq_len")
    if tp * pp * dp * cp != _int(row, "num_gpus"):
        raise InputError(
            f"peak-memory row {row['id']}: num_gpus",
            f"tp({tp}) * pp({pp}) * dp({dp}) * cp({cp}) = {tp * pp * dp * cp} != num_gpus({row['num_gpus']})",
        )
    sharding = row["sharding"]
    if sharding != "fsdp":
        raise InputError(f"peak-memory row {row['id']}: sharding", f"fsdp, got {sharding!r}")
    if pp > 1:
        sharding = "zero2"
        assumptions.append("FSDP2 with reshard_after_forward=False under PP: ZeRO-2 storage (weights whole)")
    precision = row["precision"]
    if precision not in ("bf16", "float8-torchao"):
        raise InputError(f"peak-memory row {row['id']}: precision", f"bf16 or float8-torchao, got {precision!r}")
    if precision == "float8-torchao":
        assumptions.append("torchao Float8: no FP8 weight copy kept, high-precision inputs saved: bf16 storage")
    mb = local // pp if pp > 1 else local
    if pp > 1 and local % pp:
        raise InputError(f"peak-memory row {row['id']}: local_batch", f"a multiple of pp({pp}), got {local}")
    # FSDP2's fp32 sharded parameters are the master (fp32-params: 4 + 4 + 8 = 16 B per sharded parameter); under PP
    # the gathered bf16 weights stay whole, 2 + 16 / dp B, which the default layout under zero2 gives byte for byte
    layout = {"master_weights": "fp32-params", "reduce_bytes": FSDP_REDUCE_BYTES} if sharding == "fsdp" else {}
    if layout:
        assumptions.append("FSDP2 mixed precision: fp32 sharded parameters as the master (fp32-params), reduce fp32")
    return TrainConfig(
        tp=tp, pp=pp, dp=dp, cp=cp, sequence_parallel=tp > 1, virtual_stages=vpp, micro_batch=mb,
        global_batch=local * dp, seq_len=seq, precision="bf16", recompute="full", sharding=sharding,  # type: ignore[arg-type]
        **layout,  # type: ignore[arg-type]
    )  # fmt: skip


def _config_text(cfg: TrainConfig) -> str:
    vpp = f" vpp{cfg.virtual_stages}" if cfg.virtual_stages > 1 else ""
    return (
        f"tp{cfg.tp} pp{cfg.pp}{vpp} dp{cfg.dp} cp{cfg.cp} mb{cfg.micro_batch} gb{cfg.global_batch} "
        f"seq{cfg.seq_len} {cfg.precision} {cfg.recompute} {cfg.sharding}"
    )


def check_peak_memory(catalog: Catalog, rows: list[dict[str, str]] | None = None) -> list[MemoryCheck]:
    """Every row of ``data/peak-memory.csv``: the model's memory (GiB) against the published peak."""
    checks = []
    for row in load_rows() if rows is None else rows:
        measured = float(row["measured_gib"])
        base: dict[str, Any] = dict(id=row["id"], source=row["source"], locator=row["locator"], model=row["model"],
                    num_gpus=int(row["num_gpus"]), metric=row["metric"], measured_gib=measured)  # fmt: skip
        if row["recompute"] == "selective-op":
            checks.append(MemoryCheck(**base, config="", predicted_gib=None, error_pct=None, not_expressible=OP_SAC))
            continue
        if row["recompute"] != "full":
            raise InputError(
                f"peak-memory row {row['id']}: recompute", f"full or selective-op, got {row['recompute']!r}"
            )
        assumptions: list[str] = []
        cfg = row_config(row, assumptions)
        model = catalog.model(row["model"])
        instance = catalog.instance(row["instance"])
        cluster = build_cluster(catalog, row["instance"], math.ceil(cfg.num_gpus / instance.num_gpus))
        mem = estimate_training(model, cluster, cfg).memory
        parts = {"weights": mem.weights_gib, "grads": mem.grads_gib, "optimizer": mem.optimizer_gib,
                 "activations": mem.activations_gib, "temporary": mem.temporary_gib}  # fmt: skip
        checks.append(
            MemoryCheck(
                **base, config=_config_text(cfg), predicted_gib=mem.total_gib,
                error_pct=100.0 * (mem.total_gib - measured) / measured, parts_gib=parts, assumptions=assumptions,
            )
        )  # fmt: skip
    return checks


def memory_summary(checks: list[MemoryCheck]) -> dict[str, float | int]:
    """Signed and absolute median error, worst absolute error (%) and rows compared (NaN when none compare)."""
    errors = [c.error_pct for c in checks if c.error_pct is not None]
    if not errors:
        return {"median_error_pct": math.nan, "median_abs_error_pct": math.nan, "worst_abs_error_pct": math.nan,
                "compared": 0}  # fmt: skip
    absolute = [abs(e) for e in errors]
    return {"median_error_pct": statistics.median(errors), "median_abs_error_pct": statistics.median(absolute),
            "worst_abs_error_pct": max(absolute), "compared": len(errors)}  # fmt: skip
