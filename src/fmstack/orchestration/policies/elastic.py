"""GPU-count policies for deep-learning training jobs, re-decided every scheduling interval (usable alone).

Each policy maps the active jobs to a GPU count per job (0 = paused / preempted); placing the counts on nodes is
the caller's. Three published designs, re-implemented from their papers:

* :class:`TiresiasLas` -- discretised two-dimensional least-attained-service (Gu et al., "Tiresias", NSDI 2019,
  section 4.1): a job's attained service is GPUs x time; it is demoted to the next queue when that passes the
  queue's threshold; queues are served in order, FIFO (by submission) within a queue; a job runs with exactly the
  GPUs it asked for, and a job that does not fit is skipped (lower ones may still run) and, if running, preempted.
  Tiresias' starvation promotion (back to the top queue after waiting long) is off, as in the Pollux simulator's
  Tiresias (``_solve_starvation = 0``).
* :class:`OptimusGreedy` -- Optimus (Peng et al., EuroSys 2018, section 4): every job gets one GPU, then GPUs go
  one at a time to the job whose remaining time drops most with one more (its predicted remaining work at a fixed
  batch size times its step time). The Pollux simulator's Optimus also adds one gradient-accumulation step to its
  one-GPU prediction and places the smallest jobs first; neither is done here.
* :class:`PolluxGoodput` -- Pollux (Qiao et al., OSDI 2021, section 4.2): choose counts that maximise the power
  mean (p = -1) of the jobs' speedups, a job's speedup being its goodput on n GPUs over its goodput on a fair share
  (total GPUs / jobs), times the restart penalty ``max(age - 30 s x restarts, 0) / (age + 30 s)`` when its count
  changes. Pollux searches with a genetic algorithm; the objective is separable in the jobs, so here a dynamic
  programme over (jobs, GPUs) finds the exact optimum of the same objective for counts. The fair-share goodput is
  taken at the best count up to the fair share (an app whose batch-size limit caps its GPUs below the fair share
  would otherwise have a zero base). Differences from the Pollux simulator: there the fair-share goodput is
  evaluated on one node (ceil(16 / 64) = 1), here on the fair share's GPUs packed on ceil(fair / GPUs per node)
  nodes.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from fmstack.errors import InputError

RESTART_DELAY_S = 30.0
"""Pollux's assumed cost of a re-allocation (checkpoint, restart), in its restart penalty."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ElasticJob:
    """What a policy sees of an active (submitted, unfinished) job."""

    job_id: int
    submit_s: float
    attained_gpu_s: float
    """GPU-seconds the job has held so far."""
    cur_gpus: int
    request_gpus: int = 1
    """GPUs asked for (Tiresias runs a job at exactly this)."""
    max_gpus: int = 1
    """Most GPUs it may get (Optimus, Pollux)."""
    restarts: int = 0
    age_s: float = 0.0
    goodput: Sequence[float] = ()
    """Pollux: goodput on n GPUs at index n (index 0 = 0), up to the cluster's GPUs."""
    remaining_s: Sequence[float] = ()
    """Optimus: predicted remaining run time on n GPUs at index n (index 0 unused), up to ``max_gpus``."""


@dataclass(kw_only=True, slots=True)
class TiresiasLas:
    """Discretised 2D-LAS. ``thresholds_gpu_s``: attained service at which a job leaves queue k for k + 1."""

    thresholds_gpu_s: tuple[float, ...] = (16 * 3600.0,)
    """Tiresias' simulator default: two queues split at 16 GPU-hours (petuum/adaptdl simulator/tiresias.py)."""
    name: str = "tiresias"
    _queue: dict[int, tuple[int, int]] = field(default_factory=dict)
    """job -> (queue, order of entering it): a demoted job goes to the back of its new queue."""
    _entered: int = 0

    def __post_init__(self) -> None:
        if list(self.thresholds_gpu_s) != sorted(self.thresholds_gpu_s) or any(t <= 0 for t in self.thresholds_gpu_s):
            raise InputError("thresholds_gpu_s", f"must be positive and ascending, got {self.thresholds_gpu_s}")

    def allocate(self, now_s: float, jobs: Sequence[ElasticJob], total_gpus: int) -> dict[int, int]:
        live = {j.job_id for j in jobs}
        self._queue = {k: v for k, v in self._queue.items() if k in live}
        for j in sorted(jobs, key=lambda j: (j.submit_s, j.job_id)):
            level = sum(j.attained_gpu_s >= t for t in self.thresholds_gpu_s)
            old = self._queue.get(j.job_id)
            if old is None or old[0] != level:
                self._entered += 1
                self._queue[j.job_id] = (level, self._entered)
        free = total_gpus
        out: dict[int, int] = {}
        for j in sorted(jobs, key=lambda j: self._queue[j.job_id]):
            if j.request_gpus <= free:
                out[j.job_id] = j.request_gpus
                free -= j.request_gpus
            else:
                out[j.job_id] = 0
        return out


@dataclass(frozen=True, kw_only=True, slots=True)
class OptimusGreedy:
    """Optimus: one GPU each (in submission order while they last), then by largest marginal drop in remaining time."""

    name: str = "optimus"

    def allocate(self, now_s: float, jobs: Sequence[ElasticJob], total_gpus: int) -> dict[int, int]:
        order = sorted(jobs, key=lambda j: (j.submit_s, j.job_id))
        out = {j.job_id: 0 for j in order}
        free = total_gpus
        for j in order:
            if free > 0:
                out[j.job_id] = 1
                free -= 1
        heap: list[tuple[float, int, int]] = []

        def push(i: int) -> None:
            j, n = order[i], out[order[i].job_id]
            if 0 < n < j.max_gpus:
                gain = j.remaining_s[n] - j.remaining_s[n + 1]
                if gain > 0:
                    heapq.heappush(heap, (-gain, i, n))

        for i in range(len(order)):
            push(i)
        while free > 0 and heap:
            _, i, n = heapq.heappop(heap)
            out[order[i].job_id] = n + 1
            free -= 1
            push(i)
        return out


@dataclass(frozen=True, kw_only=True, slots=True)
class PolluxGoodput:
    """Pollux's allocation objective, solved exactly over GPU counts."""

    gpus_per_node: int = 4
    """Speedups are scaled by the job's dominant share x nodes = 1 / GPUs per node before the power mean (as
    Pollux); this sets how much the 1e-3 floor weighs."""
    p: float = -1.0
    name: str = "pollux"

    def __post_init__(self) -> None:
        if not self.p < 0:
            raise InputError("p", f"the power mean's exponent must be < 0 (Pollux uses -1), got {self.p}")
        if self.gpus_per_node < 1:
            raise InputError("gpus_per_node", f"must be >= 1, got {self.gpus_per_node}")

    def restart_factor(self, job: ElasticJob) -> float:
        return max(job.age_s - RESTART_DELAY_S * job.restarts, 0.0) / (job.age_s + RESTART_DELAY_S)

    def allocate(self, now_s: float, jobs: Sequence[ElasticJob], total_gpus: int) -> dict[int, int]:
        if not jobs:
            return {}
        fair = min(math.ceil(total_gpus / len(jobs)), total_gpus)
        order = sorted(jobs, key=lambda j: (j.attained_gpu_s, j.submit_s, j.job_id))
        inf = math.inf
        dp = np.zeros(total_gpus + 1)
        choices: list[np.ndarray] = []
        g_idx = np.arange(total_gpus + 1)
        for j in order:
            top = min(j.max_gpus, total_gpus)
            good = np.asarray(j.goodput[: top + 1], dtype=float)
            # goodput on a fair share; an app that cannot use that many GPUs (batch-size limit) is measured at
            # the best count up to it, else a zero base would zero its speedups and starve it for ever
            base = float(max(j.goodput[1 : fair + 1]))
            speedup = good / base if base > 0 else np.zeros_like(good)
            speedup[0] = 0.0
            change = np.arange(top + 1) != j.cur_gpus
            speedup = np.where(change, speedup * self.restart_factor(j), speedup) / self.gpus_per_node
            cost = (speedup + 1e-3) ** self.p
            # cand[g, n] = dp[g - n] + cost[n]
            n_idx = np.arange(top + 1)
            prev = g_idx[:, None] - n_idx[None, :]
            cand = np.where(prev >= 0, dp[np.maximum(prev, 0)] + cost[None, :], inf)
            pick = np.argmin(cand, axis=1)
            dp = cand[g_idx, pick]
            choices.append(pick)
        out: dict[int, int] = {}
        g = int(np.argmin(dp))
        for j, pick in zip(reversed(order), reversed(choices), strict=True):
            n = int(pick[g])
            out[j.job_id] = n
            g -= n
        return out


ElasticPolicy = TiresiasLas | OptimusGreedy | PolluxGoodput
ELASTIC_POLICIES = ("pollux", "tiresias", "optimus")


def make_elastic_policy(name: str, gpus_per_node: int = 4) -> ElasticPolicy:
    if name == "tiresias":
        return TiresiasLas()
    if name == "optimus":
        return OptimusGreedy()
    if name == "pollux":
        return PolluxGoodput(gpus_per_node=gpus_per_node)
    raise InputError("policy", f"unknown elastic policy {name!r}; allowed: {', '.join(ELASTIC_POLICIES)}")
