"""One call for the training estimate: checkpoint size and I/O, FSx sizing, failures and goodput, as JSON.

FSx sizing (docs/resilience.md): the file system must (1) read the training data as fast as the GPUs eat it
(``dataload.dataload_requirement``), (2) hold the kept checkpoints and any staged data, and (3) write a
checkpoint fast enough that checkpointing costs at most ``checkpoint_waste_target`` of training time. For (3),
first-order waste (Young 1974; failure-rates.md): a synchronous write of C seconds costs sqrt(2 C / M) at the
optimal interval, so C <= w^2 M / 2; a background (async or tiered) write of T_w seconds forces an interval of
at least T_w and leaves the newest checkpoint T_w behind, costing T_w / (2M) + T_w / M, so T_w <= w M / 1.5.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fmstack.catalog.loader import Catalog
from fmstack.catalog.schema import ModelArch
from fmstack.catalog.topology import Cluster
from fmstack.errors import InputError
from fmstack.perfmodel.checkpoint import CheckpointIO, CheckpointSize, checkpoint_io, checkpoint_size, storage_tier
from fmstack.perfmodel.dataload import (
    bytes_per_token_for_vocab,
    dataload_requirement,
    fsx_capacity_for,
    fsx_capacity_needed,
    lustre_tier,
    round_capacity_tib,
)
from fmstack.perfmodel.failures import FailureModel, load_failure_model
from fmstack.perfmodel.goodput import GoodputEstimate, RecoveryMode, estimate_goodput, parse_recovery

DEFAULT_DATA_TIER = "fsx-persistent-250"
BACKGROUND_WASTE_FACTOR = 1.5
"""Rollback of half an interval (T_w / 2M) plus the durability lag (T_w / M)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ResiliencePlan:
    """Checkpoint, storage and failure model of one training configuration."""

    size: CheckpointSize
    io: CheckpointIO
    goodput: GoodputEstimate
    failure_model: FailureModel
    fsx_tier: str
    fsx_capacity_tib_needed: float
    fsx_capacity_tib_by: dict[str, float]
    """TiB needed for data reads, checkpoint writes and space, each rounded to the tier's step."""
    fsx_capacity_tib_used: float | None
    dataload_read_gbps: float
    bytes_per_token: float
    checkpoint_write_target_s: float | None
    spares: int

    def to_json(self) -> dict[str, Any]:
        g = self.goodput
        io = self.io
        return {
            "checkpoint_size_gib": self.size.total_gib,
            "checkpoint_size_bytes": {
                "weights": self.size.weights_bytes,
                "master": self.size.master_bytes,
                "optimizer": self.size.optimizer_bytes,
                "total": self.size.total_bytes,
            },
            "checkpoint_tier": io.tier,
            "checkpoint_durable_tier": io.durable_tier,
            "checkpoint_async": io.async_save,
            "checkpoint_write_s": io.write_s,
            "checkpoint_write_bottleneck": io.write.bottleneck,
            "checkpoint_durable_write_s": io.durable_write.time_s if io.durable_write else None,
            "checkpoint_blocking_s": io.blocking_s,
            "checkpoint_background_s": io.background_s,
            "checkpoint_read_s": io.read_s,
            "checkpoint_interval_s": g.checkpoint_interval_s,
            "checkpoint_interval_steps": g.checkpoint_interval_steps,
            "young_interval_s": g.young_interval_s,
            "daly_interval_s": g.daly_interval_s,
            "failure_model": self.failure_model.name,
            "failure_model_source": self.failure_model.source,
            "mtbf_s": g.mtbf_s,
            "expected_failures": g.expected_failures,
            "recovery": g.recovery.value,
            "spares": self.spares,
            "prob_no_spare": g.prob_no_spare,
            "goodput": g.goodput,
            "ideal_time_s": g.ideal_s,
            "time_to_train_s": g.time_to_train_s,
            "lost_time_s": {
                "checkpoint_overhead": g.checkpoint_overhead_s,
                "lost_progress": g.lost_progress_s,
                "detection_restart": g.detection_restart_s,
                "checkpoint_read": g.checkpoint_read_s,
                "replacement_wait": g.replacement_wait_s,
            },
            "dataload_read_gbps": self.dataload_read_gbps,
            "bytes_per_token": self.bytes_per_token,
            "fsx_tier": self.fsx_tier,
            "fsx_capacity_tib_needed": self.fsx_capacity_tib_needed,
            "fsx_capacity_tib_by": self.fsx_capacity_tib_by,
            "fsx_capacity_tib_used": self.fsx_capacity_tib_used,
            "checkpoint_write_target_s": self.checkpoint_write_target_s,
        }


def plan_resilience(
    *,
    model: ModelArch,
    cluster: Cluster,
    catalog: Catalog,
    step_time_s: float,
    train_time_s: float,
    tokens_per_s: float,
    num_gpus: int | None = None,
    tier: str = "fsx-persistent-1000",
    durable_tier: str | None = None,
    fsx_capacity_tib: float | None = None,
    async_save: bool = True,
    recovery: RecoveryMode | str = RecoveryMode.checkpoint_restart,
    failure_model: FailureModel | None = None,
    spares: int = 0,
    interval_s: float | None = None,
    bytes_per_token: float | None = None,
    read_amplification: float = 1.0,
    keep_checkpoints: int = 2,
    dataset_bytes: float = 0.0,
    checkpoint_waste_target: float = 0.01,
    data_tier: str = DEFAULT_DATA_TIER,
    s3_prefixes: int = 1,
    weight_dtype_bytes: float = 2,
    optimizer: str = "adam",
) -> ResiliencePlan:
    """Size the checkpoint, the FSx file system and the checkpoint interval; estimate goodput and time to train.

    With ``fsx_capacity_tib`` None the file system is sized by the three needs in the module docstring.
    """
    mode = parse_recovery(recovery)
    fm = failure_model if failure_model is not None else load_failure_model()
    gpus = num_gpus if num_gpus is not None else cluster.num_gpus
    if keep_checkpoints < 1:
        raise InputError("keep_checkpoints", f"must be at least 1, got {keep_checkpoints}")
    if not 0 < checkpoint_waste_target < 1:
        raise InputError("checkpoint_waste_target", f"must be a fraction in (0, 1), got {checkpoint_waste_target}")
    size = checkpoint_size(model, weight_dtype_bytes=weight_dtype_bytes, optimizer=optimizer)
    bpt = bytes_per_token if bytes_per_token is not None else bytes_per_token_for_vocab(model.vocab_size)
    read_gbps = dataload_requirement(tokens_per_s, bytes_per_token=bpt, read_amplification=read_amplification)

    tiers = [t for t in (tier, durable_tier) if t is not None]
    field_of = {tier: "tier", durable_tier: "durable_tier"}
    ckpt_lustre = [t for t in tiers if storage_tier(catalog, t, field_of[t]).tier == "lustre"]
    fsx = ckpt_lustre[0] if ckpt_lustre else data_tier
    entry = lustre_tier(fsx, catalog, field="data_tier")
    mtbf = fm.mtbf_s(gpus, cluster.gpus_per_node)
    target: float | None = None
    write_gbps = 0.0
    stored = dataset_bytes
    if ckpt_lustre:
        background = async_save or durable_tier is not None
        w = checkpoint_waste_target
        target = w * mtbf / BACKGROUND_WASTE_FACTOR if background else w * w * mtbf / 2.0
        write_gbps = size.total_bytes / 1e9 / target
        stored += keep_checkpoints * size.total_bytes
    needed = fsx_capacity_needed(fsx, catalog, read_gbps=read_gbps, write_gbps=write_gbps, stored_bytes=stored)
    by = {
        "read": fsx_capacity_for(read_gbps, fsx, catalog, op="read"),
        "write": fsx_capacity_for(write_gbps, fsx, catalog, op="write"),
        "space": round_capacity_tib(stored / 2.0**40, entry),
    }
    used = fsx_capacity_tib if fsx_capacity_tib is not None else (needed if ckpt_lustre else None)
    io = checkpoint_io(
        size,
        cluster,
        tier=tier,
        fsx_capacity_tib=used,
        async_save=async_save,
        catalog=catalog,
        durable_tier=durable_tier,
        s3_prefixes=s3_prefixes,
    )
    estimate = estimate_goodput(
        step_time_s=step_time_s,
        num_gpus=gpus,
        cluster=cluster,
        checkpoint=io,
        failure_model=fm,
        recovery=mode,
        spares=spares,
        interval_s=interval_s,
        train_time_s=train_time_s,
    )
    return ResiliencePlan(
        size=size,
        io=io,
        goodput=estimate,
        failure_model=fm,
        fsx_tier=entry.name,
        fsx_capacity_tib_needed=needed,
        fsx_capacity_tib_by=by,
        fsx_capacity_tib_used=used,
        dataload_read_gbps=read_gbps,
        bytes_per_token=bpt,
        checkpoint_write_target_s=target,
        spares=spares,
    )


def resilience_json(plan: ResiliencePlan | None = None, /, **kwargs: Any) -> dict[str, Any]:
    """The plan's JSON (keys ``checkpoint_size_gib``, ``checkpoint_write_s``, ``checkpoint_interval_s``,
    ``goodput``, ``time_to_train_s``, ``fsx_capacity_tib_needed`` and the breakdown); builds the plan from
    ``plan_resilience`` keyword arguments when none is given."""
    return (plan if plan is not None else plan_resilience(**kwargs)).to_json()
