"""Where a job's allocated GPU-seconds go when a run segment ends.

A segment starts with ``startup_s`` of restart (process launch, checkpoint load), then alternates ``T`` seconds
of compute and ``C`` seconds of checkpoint write (Young 1974's model). When it ends at elapsed ``e``:
- restart = min(e, startup);
- after that, ``k = floor((e - startup) / (T + C))`` full cycles are saved: productive k T, checkpoint k C;
- the remainder r: compute min(r, T) and an unfinished checkpoint max(0, r - T) are lost, unless the end is
  graceful (completion, planned maintenance, peer recovery), when both are kept; peer recovery (checkpointless)
  rolls back to the last completed step, so it loses the step in progress: the remainder's compute modulo the
  step time (at most one step; fmstack.perfmodel.goodput's checkpointless model, Daly's partial segment with
  the segment = one step).
Allocated = restart + productive + checkpoint + lost for every segment (GPU-hours are conserved).
"""

from __future__ import annotations

import math

from fmstack.sim.workload import Job


def wall_to_finish_s(job: Job) -> float:
    """Wall seconds from the segment start to completion: startup, compute, and the checkpoints in between."""
    compute = max(0.0, job.work_s - job.done_s) / job.speed
    t, c = job.ckpt_interval_s, job.ckpt_cost_s
    n_ckpt = 0 if math.isinf(t) or compute <= 0 else max(0, math.ceil(compute / t) - 1)
    return job.startup_s + compute + n_ckpt * c


def close_segment(job: Job, now_s: float, *, graceful: bool, rollback_step_s: float = 0.0) -> None:
    """Account the segment that started at ``job.start_s`` and ends now; a graceful end with ``rollback_step_s``
    > 0 (peer recovery) loses the step in progress."""
    e = max(0.0, now_s - job.start_s)
    g = job.cur_gpus
    job.alloc_gpu_s += e * g
    r0 = min(e, job.startup_s)
    job.restart_gpu_s += r0 * g
    e -= r0
    t, c = job.ckpt_interval_s, job.ckpt_cost_s
    if math.isinf(t):
        comp, ckpt, rem = 0.0, 0.0, e
    else:
        cycles = math.floor(e / (t + c))
        comp, ckpt, rem = cycles * t, cycles * c, e - cycles * (t + c)
    r_comp, r_ckpt = min(rem, t), max(0.0, rem - t)
    lost = 0.0
    if graceful:
        lost = math.fmod(r_comp, rollback_step_s) if rollback_step_s > 0 else 0.0
        comp += r_comp - lost
        ckpt += r_ckpt
    else:
        lost = r_comp + r_ckpt
    job.productive_gpu_s += comp * g
    job.ckpt_gpu_s += ckpt * g
    job.lost_gpu_s += lost * g
    job.done_s = min(job.work_s, job.done_s + comp * job.speed)
    job.start_s = now_s
