"""The fleet twin: :class:`Simulator` runs one :class:`fmstack.sim.config.SimConfig` to its horizon.

Events (a kind and its data on :class:`fmstack.sim.engine.Environment`): submit, finish, fault, planned
maintenance, detection, repair, eligible-again (after a requeue delay), backfill tick, sample. Each handler
changes the state and schedules its follow-up events (as vidur's simulator loop). Read the results with
:func:`fmstack.sim.metrics.summarise`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fmstack.orchestration.policies import PendingJob
from fmstack.orchestration.policies.base import planned_limit_s
from fmstack.orchestration.policies.fifo import PendingQueue
from fmstack.sim.faults_loop import FaultHandling
from fmstack.sim.state import (
    DETECT,
    ELIGIBLE,
    FAULT,
    FINISH,
    MAINT,
    PRIORITY,
    REPAIRED,
    SAMPLE,
    SUBMIT,
    TICK,
    TIMEOUT,
)


class Simulator(FaultHandling):
    """One run: build it, call :meth:`run`, then summarise it."""

    def run(self, progress: Callable[[float], None] | None = None) -> Simulator:
        """Run to the horizon; ``progress(now_s)`` is called at every sample (each simulated hour) and at the end."""
        env, horizon = self.env, self.cfg.horizon_s
        self.on_progress = progress
        for j in self.jobs.values():
            env.schedule(j.submit_s, SUBMIT, j.job_id)
        if self.failures is not None:
            env.schedule(self._next_fault(), FAULT)
            if self.cfg.planned and self.failures.planned_per_node_hour > 0:
                env.schedule(self._next_maint(), MAINT)
        env.schedule(0.0, SAMPLE)
        if self.prio is not None:
            env.schedule(self.prio.settings.calc_period_s, PRIORITY)
        handlers: dict[int, Callable[[Any], None]] = {
            SUBMIT: self._on_eligible, ELIGIBLE: self._on_eligible, FINISH: self._on_finish, FAULT: self._on_fault,
            MAINT: self._on_maint, DETECT: self._on_detect, REPAIRED: self._on_repaired, TICK: self._on_tick,
            SAMPLE: self._on_sample, PRIORITY: self._on_priority, TIMEOUT: self._on_timeout,
        }  # fmt: skip
        meter = self._meter

        def handle(kind: int, data: Any) -> None:
            meter(env.now_s)
            handlers[kind](data)

        env.run(horizon, handle)
        meter(horizon)
        if progress is not None:
            progress(horizon)
        for jid in sorted(self.running.ids()):
            self._close(self.jobs[jid], horizon, graceful=True, kind="horizon")
        for j in self.jobs.values():
            if j.hung:
                self._close_hang(j, horizon)
        return self

    def _on_eligible(self, jid: int) -> None:
        j = self.jobs[jid]
        if j.running:
            return
        if j.restarts == 0:
            j.eligible_s = j.submit_s
        self.pending[jid] = PendingJob(job_id=jid, num_gpus=j.num_gpus, submit_s=j.eligible_s,
                                       time_limit_s=planned_limit_s(j.time_limit_s), user=j.user, queue=j.queue,
                                       priority=self._priority_of(j, self.env.now_s),
                                       expected_runtime_s=j.work_s)  # fmt: skip
        self._changed()

    def _on_finish(self, data: tuple[int, int]) -> None:
        jid, epoch = data
        job = self.jobs[jid]
        if epoch != job.epoch or not job.running:
            return
        self._close(job, self.env.now_s, graceful=True, kind="completed")
        job.done_s = job.work_s
        job.end_s = self.env.now_s
        self._release(job)
        self._changed()

    def _on_timeout(self, data: tuple[int, int]) -> None:
        """The job reached its time limit before completing: Slurm kills it (TIMEOUT, not requeued); the work since
        its last checkpoint is lost."""
        jid, epoch = data
        job = self.jobs[jid]
        if epoch != job.epoch or not job.running:
            return
        lost_before = job.lost_gpu_s
        self._close(job, self.env.now_s, graceful=False, kind="timeout")
        self.timeout_lost_gpu_s += job.lost_gpu_s - lost_before
        job.epoch += 1
        job.timed_out = True
        job.end_s = self.env.now_s
        self._release(job)
        self._changed()

    def _on_priority(self, _: Any) -> None:
        """PriorityCalcPeriod: charge usage, decay it, recompute every pending job's priority and reorder."""
        prio = self.prio
        assert prio is not None
        now = self.env.now_s
        jobs = self.jobs
        prio.recalc(now, [(j.user, j.cur_gpus, j.start_s) for j in map(jobs.__getitem__, self.running.ids())])
        if self.pending:
            before = [p.job_id for p in self.pending]
            fresh = PendingQueue.of(
                PendingJob(
                    job_id=p.job_id,
                    num_gpus=p.num_gpus,
                    submit_s=p.submit_s,
                    time_limit_s=p.time_limit_s,
                    user=p.user,
                    queue=p.queue,
                    priority=self._priority_of(jobs[p.job_id], now),
                    expected_runtime_s=p.expected_runtime_s,
                )
                for p in self.pending
            )
            self.pending = fresh
            if [p.job_id for p in fresh] != before:
                self._changed()
        if now + prio.settings.calc_period_s < self.cfg.horizon_s:
            self.env.schedule(now + prio.settings.calc_period_s, PRIORITY)
