"""Checkpoint interval, recovery modes and goodput: how much wall-clock time failures and checkpoints cost.

- Young (CACM 1974): optimal compute interval between checkpoints T = sqrt(2 C M), C the time a checkpoint
  stalls training, M the job's MTBF. M = 185.6 min, C = 1 min -> 19.3 min.
- Daly (FGCS 2006), higher-order estimate:
  T = sqrt(2 C M) [1 + (1/3) sqrt(C / 2M) + (1/9) (C / 2M)] - C for C < 2M, else M.
- Daly (FGCS 2006), complete model: the expected wall time of a job of ideal length U checkpointing every tau seconds
  of work at cost delta, with exponential failures of mean M and recovery time R per failure:
  W = M e^(R/M) (e^((tau + delta)/M) - 1) U / tau. It counts the lost part of each interval and failures during
  recovery; R does not move the optimum, so Daly's interval ignores it.
- Goodput is U / W, the effective training time ratio (ETTR) of Kokolis et al. (HPCA 2025, arXiv 2410.21680).

Recovery modes differ in detection, restart and rollback (defaults cited in ``RECOVERY_DEFAULTS``).
Checkpointless recovery (HyperPod peer replication) rolls back one step, not one interval: the same formula
with tau = one step at no checkpoint cost, times the durable checkpoints' overhead (1 + delta / tau).
Spare nodes: a failure that takes a node out (``FailureModel.node_loss_share``) waits for a replacement unless
a spare is free. Nodes in repair are an M/G/inf queue, so the number in repair when a failure arrives is
Poisson with mean rho = (node-loss rate) x (repair time) (PASTA), and no spare is free with probability
P(Poisson(rho) >= spares). Elastic training runs on one replica less instead of waiting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

from fmstack.catalog.topology import Cluster
from fmstack.errors import InputError
from fmstack.perfmodel.checkpoint import CheckpointIO
from fmstack.perfmodel.failures import FailureModel


def _check_positive(value: float, field: str, allow_zero: bool = False) -> None:
    ok = math.isfinite(value) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        raise InputError(field, f"must be a {'non-negative' if allow_zero else 'positive'} number, got {value}")


def young_interval_s(mtbf_s: float, checkpoint_s: float) -> float:
    """Young (1974): T_opt = sqrt(2 C M)."""
    _check_positive(mtbf_s, "mtbf")
    _check_positive(checkpoint_s, "checkpoint_s", allow_zero=True)
    return math.sqrt(2.0 * checkpoint_s * mtbf_s)


def daly_interval_s(mtbf_s: float, checkpoint_s: float, restart_s: float = 0.0) -> float:
    """Daly (2006) higher-order optimum; ``restart_s`` is checked but, as Daly shows, does not move it."""
    _check_positive(mtbf_s, "mtbf")
    _check_positive(checkpoint_s, "checkpoint_s", allow_zero=True)
    _check_positive(restart_s, "restart_s", allow_zero=True)
    if checkpoint_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = checkpoint_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * checkpoint_s * mtbf_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - checkpoint_s


class RecoveryMode(StrEnum):
    """How a job comes back after a failure."""

    checkpoint_restart = "checkpoint_restart"
    """Scheduler requeues the job (Slurm), which reloads the last durable checkpoint."""
    auto_resume = "auto_resume"
    """Health agent replaces the node (spares first) and restarts from the last checkpoint (HyperPod)."""
    checkpointless = "checkpointless"
    """Healthy replicas hand their in-memory state to the recovering ones; rollback of one step (HyperPod)."""
    elastic = "elastic"
    """The job shrinks by a data-parallel replica, resumes from the checkpoint, and grows back later."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RecoveryTimes:
    """Seconds each phase of a recovery takes, with where the default comes from."""

    detection_s: float
    """From the failure until the job is torn down."""
    restart_s: float
    """Relaunch, process-group and data-loader set-up (the checkpoint read is computed from storage)."""
    replacement_s: float
    """Until a replacement node is ready when no spare is free (also a failed node's repair time)."""
    rollback: str
    """'checkpoint' (back to the last durable checkpoint) or 'step' (back one step)."""
    source: str

    def __post_init__(self) -> None:
        for name in ("detection_s", "restart_s", "replacement_s"):
            _check_positive(getattr(self, name), name, allow_zero=True)
        if self.rollback not in ("checkpoint", "step"):
            raise InputError("rollback", f"must be 'checkpoint' or 'step', got {self.rollback!r}")


_REPLACE = "replacement 3600 s: fmstack default (AWS News Blog, Dec 2025: recovery 'can take up to an hour'"
_REPLACE += " on self-managed clusters)"
_RESTART = "restart 900 s: AWS ML Blog 'Checkpointless training on Amazon SageMaker HyperPod' (Dec 2025),"
_RESTART += " checkpoint-based recovery 15-30 min, lower end"
RECOVERY_DEFAULTS: MappingProxyType[RecoveryMode, RecoveryTimes] = MappingProxyType(
    {
        RecoveryMode.checkpoint_restart: RecoveryTimes(
            detection_s=300.0,
            restart_s=1020.0,
            replacement_s=3600.0,
            rollback="checkpoint",
            source="detection: Slurm SlurmdTimeout default 300 s; restart: Slurm requeue delay 120 s + "
            + _RESTART[len("restart ") :]
            + "; "
            + _REPLACE,
        ),
        RecoveryMode.auto_resume: RecoveryTimes(
            detection_s=150.0,
            restart_s=900.0,
            replacement_s=3600.0,
            rollback="checkpoint",
            source="detection: health checks every 5 min (Kokolis et al. 2025), half a period on average; "
            + _RESTART
            + "; "
            + _REPLACE,
        ),
        RecoveryMode.checkpointless: RecoveryTimes(
            detection_s=60.0,
            restart_s=60.0,
            replacement_s=3600.0,
            rollback="step",
            source="detection: abort_timeout=60.0 in HyperPod's checkpointless example; detection + restart "
            "under 2 min (AWS ML Blog, Dec 2025: 'under 2 minutes'); " + _REPLACE,
        ),
        RecoveryMode.elastic: RecoveryTimes(
            detection_s=150.0,
            restart_s=900.0,
            replacement_s=3600.0,
            rollback="checkpoint",
            source="as auto_resume; while short of a node the job runs one data-parallel replica smaller",
        ),
    }
)


def parse_recovery(value: str | RecoveryMode) -> RecoveryMode:
    try:
        return RecoveryMode(value)
    except ValueError:
        allowed = ", ".join(m.value for m in RecoveryMode)
        raise InputError("recovery", f"unknown recovery mode {value!r}; allowed: {allowed}") from None


def prob_no_spare(spares: int, rho: float) -> float:
    """P(Poisson(rho) >= spares): a node-loss failure finds every spare in repair (1 with no spares)."""
    if spares <= 0:
        return 1.0
    term = math.exp(-rho)
    below = term
    for k in range(1, spares):
        term *= rho / k
        below += term
    return max(0.0, 1.0 - below)


@dataclass(frozen=True, kw_only=True, slots=True)
class GoodputEstimate:
    """Wall-clock time to train including checkpoints and failures, and where the extra time goes."""

    ideal_s: float
    """Failure-free compute time (the training estimate's steps x step time)."""
    time_to_train_s: float
    goodput: float
    """ideal_s / time_to_train_s: the effective training time ratio, in (0, 1]."""
    mtbf_s: float
    expected_failures: float
    checkpoint_interval_s: float
    checkpoint_interval_steps: int
    young_interval_s: float
    daly_interval_s: float
    checkpoint_overhead_s: float
    """Training stalled by checkpoint saves."""
    detection_restart_s: float
    """Detection and restart (recoveries cut short by another failure are shared out over the phases)."""
    checkpoint_read_s: float
    """Reading the checkpoint back after each failure."""
    replacement_wait_s: float
    """Waiting for a node (or, elastic, running a replica short) when no spare is free."""
    lost_progress_s: float
    """Work redone after rollbacks: about half an interval per failure plus the durability lag of an
    asynchronous or tiered save."""
    prob_no_spare: float
    recovery: RecoveryMode

    @property
    def lost_s(self) -> float:
        return self.time_to_train_s - self.ideal_s


def _choose_interval(
    interval_s: float | None, daly_s: float, step_time_s: float, checkpoint: CheckpointIO
) -> tuple[float, int]:
    floor = max(checkpoint.background_s, step_time_s)
    if interval_s is not None:
        _check_positive(interval_s, "interval_s")
        if interval_s < checkpoint.background_s:
            raise InputError(
                "interval_s",
                f"{interval_s:g} s is shorter than the background write ({checkpoint.background_s:.1f} s on "
                f"{checkpoint.durable_tier or checkpoint.tier}); the next save would start before the last is done",
            )
        wanted = interval_s
    else:
        wanted = max(daly_s, floor)
    steps = max(1, round(wanted / step_time_s))
    if steps * step_time_s < checkpoint.background_s:
        steps = math.ceil(checkpoint.background_s / step_time_s)
    return steps * step_time_s, steps


def estimate_goodput(
    *,
    step_time_s: float,
    num_gpus: int,
    cluster: Cluster,
    checkpoint: CheckpointIO,
    failure_model: FailureModel,
    recovery: RecoveryMode | str,
    spares: int = 0,
    interval_s: float | None = None,
    train_time_s: float,
    recovery_times: RecoveryTimes | None = None,
    elastic_replica_gpus: int | None = None,
) -> GoodputEstimate:
    """Expected wall time and goodput of a job of ``train_time_s`` failure-free seconds (see module docstring).

    ``interval_s`` None picks Daly's interval for the blocking time, no shorter than one step or the background
    write, rounded to whole steps. ``spares`` counts spare nodes beside the job's nodes.
    """
    mode = parse_recovery(recovery)
    _check_positive(step_time_s, "step_time_s")
    _check_positive(train_time_s, "train_time_s")
    if num_gpus <= 0 or num_gpus > cluster.num_gpus:
        raise InputError("num_gpus", f"must be in 1..{cluster.num_gpus} (the cluster's GPUs), got {num_gpus}")
    if spares < 0:
        raise InputError("spares", f"must be a non-negative number of nodes, got {spares}")
    times = recovery_times if recovery_times is not None else RECOVERY_DEFAULTS[mode]
    gpn = cluster.gpus_per_node
    mtbf = failure_model.mtbf_s(num_gpus, gpn)
    node_loss = failure_model.node_loss_share
    if times.rollback == "checkpoint" and not checkpoint.durable and node_loss > 0:
        raise InputError(
            "tier",
            f"a checkpoint only on {checkpoint.tier} is lost with its node ({node_loss:.0%} of failures); "
            f"add a durable tier (FSx or s3) or use checkpointless recovery",
        )
    delta = checkpoint.blocking_s
    daly = daly_interval_s(mtbf, delta)
    tau, steps = _choose_interval(interval_s, daly, step_time_s, checkpoint)

    rho = failure_model.rate_per_s(num_gpus, gpn) * node_loss * times.replacement_s
    p_wait = prob_no_spare(spares, rho)
    if mode is RecoveryMode.elastic:
        replica = elastic_replica_gpus if elastic_replica_gpus is not None else gpn
        if replica <= 0 or replica > num_gpus:
            raise InputError("elastic_replica_gpus", f"must be in 1..{num_gpus} (the job's GPUs), got {replica}")
        # a job of one replica cannot shrink: it waits like the others
        shrink = times.replacement_s * replica / num_gpus + times.restart_s
        wait_cost = shrink if replica < num_gpus else times.replacement_s
    else:
        wait_cost = times.replacement_s
    per_wait = node_loss * p_wait * wait_cost
    read = checkpoint.read_s if times.rollback == "checkpoint" else 0.0
    lag = checkpoint.background_s if times.rollback == "checkpoint" else 0.0
    recover = times.detection_s + times.restart_s + read + per_wait + lag

    segment, seg_cost = (tau, delta) if times.rollback == "checkpoint" else (step_time_s, 0.0)
    exponent = (recover + segment + seg_cost) / mtbf
    if exponent > 50.0:
        raise InputError(
            "mtbf",
            f"job MTBF of {mtbf:.0f} s is far shorter than a recovery ({recover:.0f} s) plus an interval "
            f"({segment + seg_cost:.0f} s): the job would not make progress",
        )
    work = train_time_s * (1.0 + delta / tau)
    s_len = segment + seg_cost
    # Daly's (2006) complete model, split into its parts: n1 failed attempts at a segment, each losing the expected
    # partial segment M - s / (e^(s/M) - 1) and a recovery that takes M (e^(R/M) - 1) with failures during it.
    n1 = work / s_len * math.expm1(s_len / mtbf)
    partial = mtbf - s_len / math.expm1(s_len / mtbf)
    recovery_total = n1 * mtbf * math.expm1(recover / mtbf)
    wall = work + n1 * partial + recovery_total
    share = recovery_total / recover if recover > 0 else 0.0
    ckpt_overhead = work - train_time_s
    restart_total = share * (times.detection_s + times.restart_s)
    read_total = share * read
    wait_total = share * per_wait
    lost = n1 * partial + share * lag
    failures = wall / mtbf
    return GoodputEstimate(
        ideal_s=train_time_s,
        time_to_train_s=wall,
        goodput=train_time_s / wall,
        mtbf_s=mtbf,
        expected_failures=failures,
        checkpoint_interval_s=tau,
        checkpoint_interval_steps=steps,
        young_interval_s=young_interval_s(mtbf, delta),
        daly_interval_s=daly,
        checkpoint_overhead_s=ckpt_overhead,
        detection_restart_s=restart_total,
        checkpoint_read_s=read_total,
        replacement_wait_s=wait_total,
        lost_progress_s=lost,
        prob_no_spare=p_wait,
        recovery=mode,
    )
