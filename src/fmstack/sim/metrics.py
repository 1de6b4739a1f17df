"""Results of a run (every metric is defined with its formula in docs/simulate.md).

- utilization = allocated GPU-s / (pool GPUs x horizon);
- goodput = productive GPU-s / allocated GPU-s; allocated = productive + checkpoint + lost + restart + hang;
- ETTR of a job (Kokolis et al., HPCA 2025) = productive time / (end or horizon - first start), GPU-weighted
  over jobs that started;
- queue wait = first start - submit plus waits after requeues; JCT = end - submit; percentiles p50/p90/p99
  (numpy "linear") by size class, null where a class has no job; ``wait`` counts jobs that started, ``wait_incl_pending`` also the jobs still
  pending at the horizon, with their wait so far (a lower bound: without them an overloaded queue looks short);
- fairness: GPU-hours per user and per queue, and Jain's index (sum x)^2 / (n sum x^2) of per-user GPU-hours.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np

from fmstack.orchestration.policies.base import planned_limit_s
from fmstack.sim.config import MAX_BF_WINDOW_MIN, MAX_DAYS
from fmstack.sim.fleet import NodeState
from fmstack.sim.state import SimState
from fmstack.sim.workload import Job

SIZE_CLASSES: tuple[tuple[str, int, int], ...] = (
    ("1-8", 1, 8),
    ("9-64", 9, 64),
    ("65-512", 65, 512),
    ("513+", 513, 1 << 30),
)


def _pct(values: list[float]) -> dict[str, float | None]:
    if not values:  # no job in the class: no percentile (null in JSON; 0 s read as "no wait")
        return {"count": 0, "p50_s": None, "p90_s": None, "p99_s": None, "mean_s": None}
    a = np.asarray(values, dtype=float)
    p = np.percentile(a, [50, 90, 99])
    return {"count": len(values), "p50_s": round(float(p[0]), 3), "p90_s": round(float(p[1]), 3),
            "p99_s": round(float(p[2]), 3), "mean_s": round(float(a.mean()), 3)}  # fmt: skip


def jain(values: list[float]) -> float:
    """Jain's fairness index: 1 when all equal, 1/n when one takes all."""
    a = np.asarray(values, dtype=float)
    if a.size == 0 or not a.any():
        return 1.0
    return float(a.sum() ** 2 / (a.size * (a**2).sum()))


def summarise(sim: SimState) -> dict[str, Any]:
    """The run's results as plain JSON-able data (rounded so that output is stable byte for byte)."""
    cfg = sim.cfg
    horizon = cfg.horizon_s
    jobs = list(sim.jobs.values())
    h = 3600.0
    alloc = sum(j.alloc_gpu_s for j in jobs)
    parts = {
        "productive": sum(j.productive_gpu_s for j in jobs),
        "checkpoint": sum(j.ckpt_gpu_s for j in jobs),
        "lost_work": sum(j.lost_gpu_s for j in jobs),
        "restart": sum(j.restart_gpu_s for j in jobs),
        "hang_until_detected": sum(j.hang_gpu_s for j in jobs),
    }
    _, idle, down, standby = sim.fleet_gpu_s
    started = [j for j in jobs if j.first_start_s >= 0]
    done = [j for j in jobs if j.end_s >= 0 and not j.timed_out]
    ettr_num = sum(j.productive_gpu_s for j in started)
    ettr_den = sum(((j.end_s if j.end_s >= 0 else horizon) - j.first_start_s) * j.num_gpus for j in started)
    by_class: dict[str, Any] = {}
    # pending at the horizon: in the queue, or requeued and waiting out the requeue delay or backoff (squeue shows
    # such a job PENDING, reason BeginTime); a trace job submitted after the horizon never arrived
    queued = {p.job_id for p in sim.pending}
    delayed = {j.job_id for j in jobs if j.end_s < 0 and not j.running and j.job_id not in queued
               and j.first_start_s >= 0}  # fmt: skip
    pending = queued | delayed
    not_arrived = sum(1 for j in jobs if j.submit_s > horizon)
    # a job still pending at the horizon has waited at least horizon - eligible on top of its earlier waits
    waited = [(j, j.wait_s + (max(0.0, horizon - j.eligible_s) if j.job_id in pending else 0.0))
              for j in jobs if j.first_start_s >= 0 or j.job_id in pending]  # fmt: skip
    for name, lo, hi in SIZE_CLASSES:
        cls_started = [j for j in started if lo <= j.num_gpus <= hi]
        cls_done = [j for j in done if lo <= j.num_gpus <= hi]
        by_class[name] = {
            "wait": _pct([j.wait_s for j in cls_started]),
            "jct": _pct([j.end_s - j.submit_s for j in cls_done]),
            "wait_incl_pending": _pct([w for j, w in waited if lo <= j.num_gpus <= hi]),
        }
    per_user: dict[str, float] = {}
    per_queue: dict[str, float] = {}
    for j in jobs:
        per_user[j.user] = per_user.get(j.user, 0.0) + j.alloc_gpu_s / h
        per_queue[j.queue] = per_queue.get(j.queue, 0.0) + j.alloc_gpu_s / h
    cats: Counter[str] = Counter(f["category"] for f in sim.fault_log)
    actions: Counter[str] = Counter(f["action"] for f in sim.fault_log)
    gpu_faults: Counter[str] = Counter(f["gpu_fault"] for f in sim.fault_log if f.get("gpu_fault"))
    escalations: Counter[str] = Counter(
        f"{f['escalated_from']}->{f['action']}" for f in sim.fault_log if f.get("escalated_from")
    )
    r = 6
    return {
        "config": {
            "instance": cfg.instance, "nodes": cfg.nodes, "gpus": sim.fleet.total_gpus, "days": cfg.days,
            "jobs": len(jobs), "policy": cfg.policy, "priority": cfg.priority, "faults": cfg.faults, "recovery": cfg.recovery.mode.value,
            "checkpoint_interval": cfg.recovery.interval, "checkpoint_cost_s": cfg.recovery.ckpt_cost_s,
            "checkpoint_interval_rate": cfg.recovery.interval_rate,
            "spares": cfg.spares, "seed": cfg.seed, "bf_window_min": cfg.bf_window_min,
            "health_window_h": cfg.health_window_h if math.isfinite(cfg.health_window_h) else None,
            "load": cfg.load if cfg.trace is None else None, "trace": None if cfg.trace is None else str(cfg.trace),
            "recovery_times_s": {"detection": sim.times.detection_s, "restart": sim.times.restart_s,
                                 "replacement": sim.times.replacement_s},
        },
        "utilization": round(alloc / (sim.fleet.total_gpus * horizon), r),
        "gpu_hours": {"capacity": round(sim.fleet.total_gpus * horizon / h, 3), "allocated": round(alloc / h, 3),
                      **{k: round(v / h, 3) for k, v in parts.items()},
                      "idle": round(idle / h, 3), "down": round(down / h, 3), "spare_standby": round(standby / h, 3),
                      "spare_capacity": round(cfg.spares * sim.gpn * horizon / h, 3)},
        "goodput": round(parts["productive"] / alloc, r) if alloc else 0.0,
        "ettr": round(ettr_num / ettr_den, r) if ettr_den else 0.0,
        "jobs": {"submitted": len(jobs), "started": len(started), "completed": len(done),
                 "restarts": sum(j.restarts for j in jobs),
                 "restarts_in_place": sum(j.restarts_in_place for j in jobs), "preemptions": sim.preemptions,
                 "pending_at_end": len(pending), "requeue_delay_at_end": len(delayed),
                 "running_at_end": sum(1 for j in jobs if j.running), "not_arrived": not_arrived,
                 "preemption_lost_gpu_hours": round(sim.preempted_lost_gpu_s / h, 3),
                 "timed_out": sum(j.timed_out for j in jobs),
                 "timeout_lost_gpu_hours": round(sim.timeout_lost_gpu_s / h, 3),
                 "preemption_cycles_broken": sim.preemption_cycles_broken,
                 "preemptions_per_job_hour": sim.preemption_rate.per_job_hour(horizon)},
        "by_size_class": by_class,
        "fairness": {
            "jain_users": round(jain(list(per_user.values())), r),
            "gpu_hours_per_user": {k: round(v, 3) for k, v in sorted(per_user.items())},
            "gpu_hours_per_queue": {k: round(v, 3) for k, v in sorted(per_queue.items())},
        },
        "failures": {
            "events": len(sim.fault_log), "job_interruptions": sim.interruptions,
            "by_category": dict(sorted(cats.items())), "by_action": dict(sorted(actions.items())),
            "by_gpu_fault": dict(sorted(gpu_faults.items())),
            "escalations": dict(sorted(escalations.items())),
            "by_gpu_fault_action": gpu_fault_actions(sim),
            "lost_gpu_hours": round((parts["lost_work"] - sim.preempted_lost_gpu_s - sim.timeout_lost_gpu_s) / h, 3),
            "model": failure_model(sim),
        },
        "events_processed": sim.env.events_processed,
        "warnings": warnings(sim),
    }  # fmt: skip


BACKFILL_POLICIES = ("slurm-backfill", "easy-backfill")


def failure_model(sim: SimState) -> dict[str, Any] | None:
    """The failure model as this run applied it (None without faults): the rate of one node of this instance
    (:meth:`FailureModel.node_failures_per_hour`) and of planned maintenance, per 1,000 node-days as Kokolis et al.
    report them; the events to expect over the run (rate x pool nodes x days; the drawn count is Poisson around it,
    a little lower since out-of-service nodes do not fail again); the job MTBF and the checkpoint interval a job of
    one node and a job of the whole pool get (Young's or Daly's rule, or the fixed interval). Added in session 17:
    until then neither JSON nor HTML said what rate a run assumed."""
    m, cfg = sim.failures, sim.cfg
    if m is None:
        return None
    per_node_day = m.node_failures_per_hour(sim.gpn) * 24.0
    planned_day = m.planned_per_node_hour * 24.0 if cfg.planned else 0.0
    mtbf = {k: m.mtbf_s(g, sim.gpn) for k, g in (("node", sim.gpn), ("pool", sim.fleet.total_gpus))}
    total = sum(k.count for k in sim.gpu_classes)
    return {
        "name": m.name, "source": m.source,
        "failures_per_1000_node_days": round(per_node_day * 1000.0, 4),
        "planned_per_1000_node_days": round(planned_day * 1000.0, 4),
        "expected_events": round((per_node_day + planned_day) * cfg.nodes * cfg.days, 2),
        "node_loss_share": round(sum(v for c, v in sim.fault_shares.items() if c in m.node_loss_categories), 6),
        "job_mtbf_h": {k: round(v / 3600.0, 3) for k, v in mtbf.items()},
        "checkpoint_interval_min": {k: round(cfg.recovery.interval_s(v) / 60.0, 3) for k, v in mtbf.items()},
        "gpu_fault_shares": {k.name: round(k.count / total, 6) for k in sim.gpu_classes if k.count > 0},
    }  # fmt: skip


def gpu_fault_actions(sim: SimState) -> dict[str, dict[str, int]]:
    """Actions taken on the GPU faults of each Xid class (``{class: {action: count}}``): with no history the engine
    gives each class one action (docs/simulate.md, GPU faults by Xid class); escalations add the others."""
    out: dict[str, Counter[str]] = {}
    for f in sim.fault_log:
        if f.get("gpu_fault"):
            out.setdefault(f["gpu_fault"], Counter())[f["action"]] += 1
    return {k: dict(sorted(v.items())) for k, v in sorted(out.items())}


def _jobs(n: int) -> str:
    return f"{n:,} job" + ("" if n == 1 else "s")


def _beyond_window(sim: SimState, window_s: float) -> int:
    """Never-started jobs whose earliest start at the end of the run lies beyond the backfill window: the running
    jobs free their GPUs at their expected ends (the allocation's time-limit deadline), node by node, and the first
    time the job fits (a job of more than one node's GPUs needs whole free nodes, as the backfill rounds it; a
    smaller one needs that many free GPUs on one node) is more than ``window_s`` away, so backfill could make it no
    reservation. Other jobs' reservations are left out, so this is a lower bound on the jobs the window refused."""
    gpn, fleet, now = sim.gpn, sim.fleet, sim.cfg.horizon_s
    up = [n for n, st in enumerate(fleet.state) if st == NodeState.UP]
    releases = sorted(((j.deadline_s, j.alloc) for j in sim.jobs.values() if j.running), key=lambda e: e[0])
    count = 0
    for job in sim.jobs.values():
        if job.first_start_s >= 0 or job.submit_s > now:
            continue
        free = {n: fleet.free[n] for n in up}
        nodes = -(-job.num_gpus // gpn)

        def fits(free: dict[int, int] = free, job: Job = job, nodes: int = nodes) -> bool:
            if job.num_gpus <= gpn:
                return any(g >= job.num_gpus for g in free.values())
            return sum(1 for g in free.values() if g == gpn) >= nodes

        earliest = now if fits() else math.inf
        for end_s, alloc in releases if earliest > now else ():
            for n, g in alloc:
                if n in free:
                    free[n] += g
            if fits():
                earliest = end_s
                break
        if earliest - now > window_s:
            count += 1
    return count


def warnings(sim: SimState) -> list[str]:
    """Settings that likely shaped the result: preemption cycles the run broke (:meth:`SimState._no_progress`), and
    jobs that never started under a backfill whose window (bf_window)
    was too short to reserve for them at the end of the run (slurm.conf(5): bf_window should be at least the
    longest time limit; a job whose earliest start lies beyond it gets no reservation, and smaller jobs may
    backfill ahead of it)."""
    cfg = sim.cfg
    out: list[str] = []
    late = [j.submit_s for j in sim.jobs.values() if j.submit_s > cfg.horizon_s]
    if late:
        days = math.ceil(max(late) / 86400.0 * 100) / 100
        out.append(
            f"{_jobs(len(late))} of the trace {'is' if len(late) == 1 else 'are'} submitted after the end of the run "
            f"({cfg.days:g} days) and not simulated (jobs.not_arrived); the last is submitted at day {days:g}"
            + (
                ": give --days past it to include every job"
                if days < MAX_DAYS
                else f", past the {MAX_DAYS:g}-day limit"
            )
        )
    if sim.preemption_cycles_broken:
        n = sim.preemption_cycles_broken
        out.append(
            f"{cfg.policy}: {n:,} preemption{'' if n == 1 else 's'} not made: each would have repeated the running "
            "and pending jobs of an earlier preemption at the same instant (a cycle that never ends); the "
            "preemptor waited instead (jobs.preemption_cycles_broken)"
        )
    if sim.failures is not None and not sim.failures.node_loss_categories:
        out.append(
            f"faults {cfg.faults}: the model gives a failure rate and no causes, so every failure is taken as a "
            "job-level fault (the job restarts, the node is back at once): no node is rebooted or replaced, and "
            "spares and repair times play no part; use llama3 for a cause mix"
        )
    if cfg.policy not in BACKFILL_POLICIES:
        return out
    window_s = cfg.bf_window_min * 60.0
    refused = _beyond_window(sim, window_s)
    longest = max((j.time_limit_s for j in sim.jobs.values()), default=0.0)
    if refused and longest > window_s:
        # a job without a limit (inf) is planned as a year: past the largest window
        longest_min = math.ceil(planned_limit_s(longest) / 60.0)
        need_min = min(longest_min, MAX_BF_WINDOW_MIN)
        said = "a job has no time limit, planned as a year" if math.isinf(longest) else (
            f"the longest time limit is {longest_min:,} min")  # fmt: skip
        out.append(
            f"{cfg.policy}: {_jobs(refused)} never started and at the end of the run could get no reservation: "
            f"{'its' if refused == 1 else 'their'} earliest start lay beyond bf_window ({cfg.bf_window_min:,} min; "
            f"{said}), so smaller jobs could backfill ahead; whether "
            f"a longer window starts {'it' if refused == 1 else 'them'} depends on when the running jobs really end: "
            f"compare with --bf-window {need_min}"
        )
    return out
