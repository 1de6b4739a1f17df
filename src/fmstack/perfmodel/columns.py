"""Training configurations as columns of NumPy arrays, so one formula serves one config or millions.

The scalar estimate (:func:`fmstack.perfmodel.training.estimate_training`) builds columns of plain floats
from one :class:`TrainConfig` (:func:`columns_of`); the planner builds long float64 arrays from its
enumeration. Both then call the same step model, whose formulas take floats and arrays alike
(:mod:`fmstack.perfmodel.num`), so the two paths give the same numbers by construction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Generic, TypeVar

import numpy as np
from numpy.typing import NDArray

from fmstack.perfmodel.config import (
    MASTER_WEIGHTS_CHOICES,
    OPTIMIZER_STATE_CHOICES,
    PRECISION_CHOICES,
    RECOMPUTE_CHOICES,
    RECOMPUTE_MODULES,
    SHARDING_CHOICES,
    TrainConfig,
    reduce_bytes_of,
    wire_bytes,
)
from fmstack.perfmodel.num import Num

F = NDArray[np.float64]
V = TypeVar("V", bound=Num)
"""float (one configuration) or a float64 array (one row per configuration)."""

RECOMPUTE_CODE = {name: i for i, name in enumerate(RECOMPUTE_CHOICES)}
PRECISION_CODE = {name: i for i, name in enumerate(PRECISION_CHOICES)}
SHARDING_CODE = {name: i for i, name in enumerate(SHARDING_CHOICES)}
OPT_STATE_CODE = {name: i for i, name in enumerate(OPTIMIZER_STATE_CHOICES)}
MASTER_CODE = {name: i for i, name in enumerate(MASTER_WEIGHTS_CHOICES)}
_CODES: dict[str, dict[Any, int]] = {
    "precision": PRECISION_CODE,
    "recompute": RECOMPUTE_CODE,
    "sharding": SHARDING_CODE,
    "opt_state": OPT_STATE_CODE,
    "master": MASTER_CODE,
}
RECOMPUTE_MODULE_BIT = {name: float(2**i) for i, name in enumerate(RECOMPUTE_MODULES)}
"""Bit of each recompute module in the ``rc_modules`` column (a sum of bits)."""
_FLAGS = frozenset({"sp", "overlap_dp", "overlap_tp", "flash", "overlap_ep", "fp8_params", "grad_shard"})

CONFIG_FIELDS = {
    "tp": "tp", "pp": "pp", "dp": "dp", "cp": "cp", "ep": "ep", "etp": "etp", "sp": "sequence_parallel",
    "vpp": "virtual_stages", "mb": "micro_batch", "gb": "global_batch", "seq": "seq_len", "precision": "precision",
    "recompute": "recompute", "sharding": "sharding", "hsdp": "hsdp_shard_size", "overlap_dp": "overlap_dp",
    "overlap_tp": "overlap_tp", "flash": "flash_attention", "grad_bytes": "grad_bytes",
    "reduce_bytes": "reduce_bytes", "rc_modules": "recompute_modules", "rc_layers": "recompute_layers",
    "overlap_ep": "overlap_ep", "opt_state": "optimizer_state_dtype", "master": "master_weights",
    "fp8_params": "fp8_param_gather", "grad_shard": "grad_shard_buffer",
}  # fmt: skip
"""Column name -> TrainConfig field (categorical ones as codes, flags as 0 / 1)."""


@dataclass(frozen=True, slots=True)
class Columns(Generic[V]):
    """One float64 array (or one float) per configuration field; codes for the categorical ones."""

    tp: V
    pp: V
    dp: V
    cp: V
    ep: V
    etp: V
    sp: V
    vpp: V
    mb: V
    gb: V
    seq: V
    precision: V
    recompute: V
    sharding: V
    hsdp: V
    overlap_dp: V
    overlap_tp: V
    flash: V
    grad_bytes: V
    reduce_bytes: V
    rc_modules: V
    """Sum of the RECOMPUTE_MODULE_BIT of the config's recompute_modules (0: none given)."""
    rc_layers: V
    """recompute_layers: fully recomputed layers at the start of every pipeline chunk."""
    overlap_ep: V | None = field(default=None)
    """1 where the EP all-to-all overlaps another micro-batch's compute; None (the planner's columns) = all 0."""
    opt_state: V | None = field(default=None)
    """OPT_STATE_CODE of Adam's m and v dtype; None = fp32 (code 0) everywhere."""
    master: V | None = field(default=None)
    """MASTER_CODE of the master weights; None = fp32 (code 0) everywhere."""
    fp8_params: V | None = field(default=None)
    """1 where the weights are FP8 parameters (``fp8_param_gather``); None = all 0."""
    grad_shard: V | None = field(default=None)
    """1 where the reduce-scattered gradient shard has its own buffer (Apex DistributedFusedAdam); None = all 0."""

    def __len__(self) -> int:
        return 1 if isinstance(self.tp, float) else int(self.tp.shape[0])

    def row(self: Columns[F], i: int) -> TrainConfig:
        """The configuration of row ``i`` as a TrainConfig."""
        values: dict[str, object] = {}
        for col, name in CONFIG_FIELDS.items():
            column: F | None = getattr(self, col)
            if column is None:  # an optional column left out (the planner's overlap_ep, the layout): the default
                continue
            x = column[i]
            if col == "rc_modules":
                values[name] = modules_of(float(x))
            elif col in _CODES:
                values[name] = {v: k for k, v in _CODES[col].items()}[int(x)]
            else:
                values[name] = bool(x) if col in _FLAGS else int(x)
        cfg = TrainConfig(**values)  # type: ignore[arg-type]
        # a wire that is the gradients' own (config.wire_bytes) is the default: None, as the config was built
        return cfg.with_(reduce_bytes=None) if cfg.reduce_bytes == wire_bytes(cfg.precision, cfg.grad_bytes) else cfg

    def take(self: Columns[F], index: NDArray[np.int64]) -> Columns[F]:
        taken: dict[str, F | None] = {f.name: getattr(self, f.name) for f in fields(self)}
        return Columns(**{k: None if v is None else v[index] for k, v in taken.items()})  # type: ignore[arg-type]


def columns_of(c: TrainConfig) -> Columns[float]:
    """One configuration as columns of plain floats (the scalar estimate's fast path)."""
    values: dict[str, float] = {}
    for col, name in CONFIG_FIELDS.items():
        value = getattr(c, name)
        if col == "rc_modules":
            values[col] = sum(RECOMPUTE_MODULE_BIT.get(m, 0.0) for m in set(value))
        elif col == "reduce_bytes":
            values[col] = float(reduce_bytes_of(c))
        else:
            values[col] = float(_CODES[col][value]) if col in _CODES else float(value)
    return Columns(**values)


def modules_of(mask: float) -> tuple[str, ...]:
    """The recompute module names of an ``rc_modules`` value, in RECOMPUTE_MODULES order."""
    bits = int(mask)
    return tuple(name for i, name in enumerate(RECOMPUTE_MODULES) if bits >> i & 1)


def columns_from_configs(configs: Sequence[TrainConfig]) -> Columns[F]:
    """Columns with one row per configuration."""
    rows = [columns_of(c) for c in configs]
    return Columns(
        **{f.name: np.asarray([getattr(r, f.name) for r in rows], dtype=np.float64) for f in fields(Columns)}
    )
