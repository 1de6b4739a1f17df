"""Training configurations as columns of NumPy arrays, so one formula serves one config or millions.

The scalar estimate (:func:`fmstack.perfmodel.training.estimate_training`) builds columns of plain floats
from one :class:`TrainConfig` (:func:`columns_of`); the planner builds long float64 arrays from its
enumeration. Both then call the same step model, whose formulas take floats and arrays alike
(:mod:`fmstack.perfmodel.num`), so the two paths give the same numbers by construction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Generic, TypeVar

import numpy as np
from numpy.typing import NDArray

from fmstack.perfmodel.config import PRECISION_CHOICES, RECOMPUTE_CHOICES, SHARDING_CHOICES, TrainConfig
from fmstack.perfmodel.num import Num

F = NDArray[np.float64]
V = TypeVar("V", bound=Num)
"""float (one configuration) or a float64 array (one row per configuration)."""

RECOMPUTE_CODE = {name: i for i, name in enumerate(RECOMPUTE_CHOICES)}
PRECISION_CODE = {name: i for i, name in enumerate(PRECISION_CHOICES)}
SHARDING_CODE = {name: i for i, name in enumerate(SHARDING_CHOICES)}


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
    overlap_ep: V | None = field(default=None)
    """1 where the EP all-to-all overlaps another micro-batch's compute; None (the planner's columns) = all 0."""

    def __len__(self) -> int:
        return 1 if isinstance(self.tp, float) else int(self.tp.shape[0])

    def row(self: Columns[F], i: int) -> TrainConfig:
        """The configuration of row ``i`` as a TrainConfig."""
        inv_p = {v: k for k, v in PRECISION_CODE.items()}
        inv_r = {v: k for k, v in RECOMPUTE_CODE.items()}
        inv_s = {v: k for k, v in SHARDING_CODE.items()}
        return TrainConfig(
            tp=int(self.tp[i]),
            pp=int(self.pp[i]),
            dp=int(self.dp[i]),
            cp=int(self.cp[i]),
            ep=int(self.ep[i]),
            etp=int(self.etp[i]),
            sequence_parallel=bool(self.sp[i]),
            virtual_stages=int(self.vpp[i]),
            micro_batch=int(self.mb[i]),
            global_batch=int(self.gb[i]),
            seq_len=int(self.seq[i]),
            precision=inv_p[int(self.precision[i])],
            recompute=inv_r[int(self.recompute[i])],
            sharding=inv_s[int(self.sharding[i])],
            hsdp_shard_size=int(self.hsdp[i]),
            overlap_dp=bool(self.overlap_dp[i]),
            overlap_tp=bool(self.overlap_tp[i]),
            flash_attention=bool(self.flash[i]),
            grad_bytes=int(self.grad_bytes[i]),
            reduce_bytes=int(self.reduce_bytes[i]),
            overlap_ep=bool(self.overlap_ep[i]) if self.overlap_ep is not None else False,
        )

    def take(self: Columns[F], index: NDArray[np.int64]) -> Columns[F]:
        taken: dict[str, F | None] = {f.name: getattr(self, f.name) for f in fields(self)}
        return Columns(**{k: None if v is None else v[index] for k, v in taken.items()})  # type: ignore[arg-type]


def columns_of(c: TrainConfig) -> Columns[float]:
    """One configuration as columns of plain floats (the scalar estimate's fast path)."""
    return Columns(
        tp=float(c.tp),
        pp=float(c.pp),
        dp=float(c.dp),
        cp=float(c.cp),
        ep=float(c.ep),
        etp=float(c.etp),
        sp=float(c.sequence_parallel),
        vpp=float(c.virtual_stages),
        mb=float(c.micro_batch),
        gb=float(c.global_batch),
        seq=float(c.seq_len),
        precision=float(PRECISION_CODE[c.precision]),
        recompute=float(RECOMPUTE_CODE[c.recompute]),
        sharding=float(SHARDING_CODE[c.sharding]),
        hsdp=float(c.hsdp_shard_size),
        overlap_dp=float(c.overlap_dp),
        overlap_tp=float(c.overlap_tp),
        flash=float(c.flash_attention),
        grad_bytes=float(c.grad_bytes),
        reduce_bytes=float(c.reduce_bytes),
        overlap_ep=float(c.overlap_ep),
    )


def columns_from_configs(configs: Sequence[TrainConfig]) -> Columns[F]:
    """Columns with one row per configuration."""

    def col(values: Sequence[float]) -> F:
        return np.asarray(values, dtype=np.float64)

    return Columns(
        tp=col([c.tp for c in configs]),
        pp=col([c.pp for c in configs]),
        dp=col([c.dp for c in configs]),
        cp=col([c.cp for c in configs]),
        ep=col([c.ep for c in configs]),
        etp=col([c.etp for c in configs]),
        sp=col([float(c.sequence_parallel) for c in configs]),
        vpp=col([c.virtual_stages for c in configs]),
        mb=col([c.micro_batch for c in configs]),
        gb=col([c.global_batch for c in configs]),
        seq=col([c.seq_len for c in configs]),
        precision=col([PRECISION_CODE[c.precision] for c in configs]),
        recompute=col([RECOMPUTE_CODE[c.recompute] for c in configs]),
        sharding=col([SHARDING_CODE[c.sharding] for c in configs]),
        hsdp=col([c.hsdp_shard_size for c in configs]),
        overlap_dp=col([float(c.overlap_dp) for c in configs]),
        overlap_tp=col([float(c.overlap_tp) for c in configs]),
        flash=col([float(c.flash_attention) for c in configs]),
        grad_bytes=col([c.grad_bytes for c in configs]),
        reduce_bytes=col([c.reduce_bytes for c in configs]),
        overlap_ep=col([float(c.overlap_ep) for c in configs]),
    )
