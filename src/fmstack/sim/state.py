"""State of a fleet-twin run: fleet, jobs, queues, and the operations that start, release and requeue jobs.

The policy runs after every change (its quick pass) and at the next multiple of its ``interval_s`` after a
change (its periodic pass: a backfill cycle with no change since the last one would start nothing, so it is
skipped).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from fmstack.catalog.loader import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.errors import InputError
from fmstack.observability.health import Action, HealthEngine, HealthPolicy
from fmstack.orchestration.policies import KUEUE_POLICIES, PendingJob, RunningJob, make_policy
from fmstack.orchestration.policies.base import RunningSet, planned_limit_s
from fmstack.orchestration.policies.fifo import PendingQueue
from fmstack.orchestration.policies.kueue import requeue_backoff_s
from fmstack.orchestration.policies.priority import MultifactorPriority, MultifactorSettings
from fmstack.perfmodel.failures import FailureModel, load_failure_model
from fmstack.sim.accounting import close_segment, wall_to_finish_s
from fmstack.sim.config import SimConfig
from fmstack.sim.engine import Environment
from fmstack.sim.faults import RepairTimes
from fmstack.sim.fleet import Alloc, Fleet, NodeState
from fmstack.sim.gpu_faults import GpuFaultMix
from fmstack.sim.node_history import NodeHistory
from fmstack.sim.preemption_rate import PreemptionRate
from fmstack.sim.speed import JobSpeedModel, PerfModelSpeed, step_tokens
from fmstack.sim.workload import MIN_DURATION_S, Job, generate, read_trace

SUBMIT, FINISH, FAULT, MAINT, DETECT, REPAIRED, ELIGIBLE, TICK, SAMPLE, PRIORITY, TIMEOUT = range(11)
OUT_STATE = {
    Action.RESET_GPU: NodeState.RESETTING,
    Action.REBOOT_NODE: NodeState.REBOOTING,
    Action.REPLACE_NODE: NodeState.REPLACING,
}


class _Capacity:
    """The fleet as a policy's :class:`Capacity`: placements are kept until the simulator starts the jobs.

    ``no_room`` (fleet version, sizes) remembers the sizes that could not be placed, across passes: placement is
    a function of the fleet's state, so they fail again until the fleet changes (its version moves)."""

    def __init__(self, fleet: Fleet, no_room: tuple[int, set[int]], jobs: dict[int, Job]) -> None:
        self.fleet = fleet
        self.allocs: dict[int, Alloc] = {}
        self.no_room = no_room
        self.jobs = jobs

    def can_place_after(self, num_gpus: int, preempt: Sequence[int]) -> bool:
        """Whether ``num_gpus`` could be placed once the running jobs ``preempt`` give their GPUs back (tried on
        the fleet, then undone)."""
        freed = [self.allocs.get(j) or self.jobs[j].alloc for j in preempt]  # started in this pass, or running
        for a in freed:
            self.fleet.release(a)
        got = self.fleet.place(num_gpus)
        if got is not None:
            self.fleet.release(got)
        for a in freed:
            self.fleet.take(a)
        return got is not None

    @property
    def total_gpus(self) -> int:
        return self.fleet.total_gpus

    @property
    def free_gpus(self) -> int:
        """Free GPUs on schedulable nodes. A hung job still holds its GPUs on a failed node, which is not
        schedulable: they are counted out once (with the node), not again as allocated (until 2026-11-24 they were
        subtracted twice, review)."""
        f = self.fleet
        return f.schedulable_gpus - (f.allocated_gpus - f.out_held_gpus)

    def try_start(self, job: PendingJob) -> bool:
        version, sizes = self.no_room
        if version == self.fleet.version and job.num_gpus in sizes:
            return False
        alloc = self.fleet.place(job.num_gpus)
        if alloc is None:
            if version != self.fleet.version:
                self.no_room = (self.fleet.version, set())
            self.no_room[1].add(job.num_gpus)
            return False
        self.allocs[job.job_id] = alloc
        return True


class SimState:
    """The state of one run and the operations on jobs; event handlers live in the subclasses."""

    def __init__(
        self,
        config: SimConfig,
        catalog: Catalog,
        *,
        speed: JobSpeedModel | None = None,
        jobs: Sequence[Job] | None = None,
        repair: RepairTimes | None = None,
        gpu_mix: GpuFaultMix | None = None,
    ) -> None:
        self.cfg = config
        self.env = Environment(config.seed)
        self.cluster = build_cluster(catalog, config.instance, config.nodes)
        self.fleet = Fleet(self.cluster, config.spares)
        self.gpn = self.cluster.gpus_per_node
        self.speed = speed or PerfModelSpeed(catalog, config.instance)
        self.repair = repair or RepairTimes()
        self.rec = config.recovery
        self.times = self.rec.times
        self.failures: FailureModel | None = (
            load_failure_model(config.faults, include_planned=False) if config.faults else None
        )
        self.fault_shares = self.failures.node_category_shares(self.gpn) if self.failures is not None else {}
        """Cause shares of one node's failures (per-GPU causes weighted by this instance's GPUs per node)."""
        self.health = HealthEngine(HealthPolicy(recurrence_window_s=config.health_window_h * 3600.0))
        self.gpu_classes = (gpu_mix or GpuFaultMix()).classes()
        """Xid classes of GPU faults with their Table 5 counts (:mod:`fmstack.sim.gpu_faults`)."""
        if jobs is None:
            if config.trace is not None:
                jobs = read_trace(config.trace, fleet_gpus=self.fleet.total_gpus, gpus_per_node=self.gpn)
            else:
                jobs = generate(self.env.rng, num_jobs=config.jobs, horizon_s=config.horizon_s,
                                fleet_gpus=self.fleet.total_gpus, gpus_per_node=self.gpn, target_load=config.load)  # fmt: skip
        self.jobs: dict[int, Job] = {}
        for j in jobs:
            self._admit_job(j)
        queues = tuple(sorted({j.queue for j in self.jobs.values()}))
        self.policy = make_policy(config.policy, self.gpn, queues, bf_window_s=config.bf_window_min * 60.0)
        self.pending = PendingQueue()
        self.running = RunningSet()
        self.node_jobs: dict[int, set[int]] = {}
        self.history = NodeHistory(len(self.fleet.state), self.health.policy.recurrence_window_s)
        """Each node's restarts, resets and reboots from faults, counted in the engine's recurrence window."""
        self.nodes_out = 0
        self.undetected: dict[int, tuple[str, int]] = {}
        """Failed nodes whose failure is not detected yet: node -> (cause, its fault-log index)."""
        self.tick_pending = False
        self.samples: list[tuple[float, int, int, int, int, int]] = []
        self.fault_log: list[dict[str, Any]] = []
        self.interruptions = 0
        self.segment_log: list[tuple[int, float, float, str, list[int]]] = []
        """(job, start_s, end_s, how it ended, nodes) of each run segment, kept for runs of <= 2,000 jobs."""
        self.keep_segments = len(self.jobs) <= 2000
        self.preemptions = 0
        self.preempted_lost_gpu_s = 0.0
        """Work lost to preemptions (compute since the victim's last checkpoint)."""
        self.timeout_lost_gpu_s = 0.0
        """Work lost to jobs killed at their time limit; the rest of lost work is failures'."""
        self.preempt_states: tuple[float, set[tuple[frozenset[int], frozenset[int]]]] = (-1.0, set())
        """(time, the running and pending job ids before each preemption at that time): see :meth:`_no_progress`."""
        self.preemption_cycles_broken = 0
        self.preemption_rate = PreemptionRate()
        """Preemptions per job-hour so far, by queue and priority (``--ckpt-interval-rate failures+preemptions``)."""
        self.no_room: tuple[int, set[int]] = (-1, set())
        self.fleet_gpu_s = [0.0, 0.0, 0.0, 0.0]
        """Integrals over time of the fleet's GPUs by what they are doing: held by jobs (allocated), free on
        schedulable nodes (idle), on out-of-service nodes and held by no job (down), spares on standby."""
        self.metered_to_s = 0.0
        self.on_progress: Callable[[float], None] | None = None
        """Called with the simulated time at every sample (a CLI progress bar)."""
        self.prio: MultifactorPriority | None = None
        if config.priority in ("multifactor", "fairtree"):
            users = sorted({j.user for j in self.jobs.values()})
            accounts: dict[str, str] | None = None
            if config.priority == "fairtree":  # a user's account: the queue of their first job
                accounts = {}
                for jid in sorted(self.jobs):
                    accounts.setdefault(self.jobs[jid].user, self.jobs[jid].queue)
            self.prio = MultifactorPriority(MultifactorSettings(), users, config.nodes, accounts)

    def _admit_job(self, j: Job) -> None:
        if j.job_id in self.jobs:
            raise InputError("trace", f"job_id {j.job_id} appears twice")
        if j.num_gpus > self.fleet.total_gpus:
            raise InputError("num_gpus", f"job {j.job_id} asks {j.num_gpus} GPUs > fleet {self.fleet.total_gpus}")
        if j.work_s <= 0:
            j.work_s = j.tokens / self.speed.tokens_per_s(j.model, j.num_gpus, True)
            if j.work_s < MIN_DURATION_S:
                raise InputError("tokens", f"job {j.job_id}: {j.tokens:g} tokens take {j.work_s:.3g} s on {j.num_gpus} "
                                 f"GPUs of {j.model}; a job runs at least {MIN_DURATION_S:g} s")  # fmt: skip
        if j.tokens <= 0:
            j.tokens = j.work_s * self.speed.tokens_per_s(j.model, j.num_gpus, True)
        if j.time_limit_s <= 0:  # a trace row without one: twice the runtime, at least an hour (inf: unlimited)
            j.time_limit_s = max(2.0 * j.work_s, 3600.0)
        self.jobs[j.job_id] = j

    def _meter(self, now_s: float) -> None:
        """Add the fleet's GPU-seconds since the last event to :attr:`fleet_gpu_s` (the state was constant)."""
        dt = now_s - self.metered_to_s
        if dt > 0:
            f = self.fleet
            m = self.fleet_gpu_s
            m[0] += dt * f.allocated_gpus
            m[1] += dt * (f.schedulable_gpus - (f.allocated_gpus - f.out_held_gpus))
            m[2] += dt * (f.out_nodes * f.gpn - f.out_held_gpus)
            m[3] += dt * len(f.spares) * f.gpn
            self.metered_to_s = now_s

    # scheduling

    def _changed(self) -> None:
        self._schedule(periodic=False)
        iv = self.policy.interval_s
        if iv > 0 and not self.tick_pending and self.pending:
            self.tick_pending = True
            self.env.schedule((math.floor(self.env.now_s / iv) + 1) * iv, TICK)

    def _on_tick(self, _: Any) -> None:
        self.tick_pending = False
        self._schedule(periodic=True)

    def _schedule(self, *, periodic: bool) -> None:
        if not self.pending:
            return
        for _ in range(2):
            cap = _Capacity(self.fleet, self.no_room, self.jobs)
            plan = self.policy.schedule(self.env.now_s, self.pending, self.running, cap,
                                        periodic=periodic)  # fmt: skip
            for jid in plan.starts:
                self._start(self.jobs[jid], cap.allocs.pop(jid), startup_s=0.0 if self.jobs[jid].restarts == 0
                            else self.rec.startup_after_requeue_s)  # fmt: skip
            for alloc in cap.allocs.values():
                self.fleet.release(alloc)
            self.no_room = cap.no_room
            if not plan.preempt or self._no_progress():
                return
            for jid in plan.preempt:
                self._preempt(self.jobs[jid])
            if plan.preemptor is not None:
                self._start_preemptor(self.jobs[plan.preemptor])

    def _start_preemptor(self, job: Job) -> None:
        """Start the job the preemptions made room for on the GPUs they freed, before another pass may take them
        (the policy checked that it can be placed then)."""
        if job.running or job.job_id not in self.pending.ids():
            return
        alloc = self.fleet.place(job.num_gpus)
        if alloc is not None:
            self._start(job, alloc, startup_s=0.0 if job.restarts == 0 else self.rec.startup_after_requeue_s)

    def _no_progress(self) -> bool:
        """Whether the running and pending jobs are as they were before an earlier preemption at this instant: the
        plan would repeat a cycle of preemptions (no simulated time passes between them, so the run would never
        end). The preemption is then not made; the run counts it (``jobs.preemption_cycles_broken``)."""
        now = self.env.now_s
        if now != self.preempt_states[0]:
            self.preempt_states = (now, set())
        key = (frozenset(self.running.ids()), frozenset(self.pending.ids()))
        if key in self.preempt_states[1]:
            self.preemption_cycles_broken += 1
            return True
        self.preempt_states[1].add(key)
        return False

    def _start(self, job: Job, alloc: Alloc, *, startup_s: float) -> None:
        now = self.env.now_s
        self.pending.pop(job.job_id, None)
        if job.first_start_s < 0:
            job.first_start_s = now
        job.wait_s += now - job.eligible_s
        job.deadline_s = now + job.time_limit_s
        self._run_on(job, alloc, startup_s)

    def _run_on(self, job: Job, alloc: Alloc, startup_s: float) -> None:
        now = self.env.now_s
        job.alloc = alloc
        job.cur_gpus = sum(g for _, g in alloc)
        for n, _ in alloc:
            self.node_jobs.setdefault(n, set()).add(job.job_id)
        packed = self.fleet.leaves_of(alloc) <= 1
        ref = self.speed.tokens_per_s(job.model, job.num_gpus, True)
        job.speed = self.speed.tokens_per_s(job.model, job.cur_gpus, packed) / ref
        job.startup_s = startup_s
        self.preemption_rate.start(job.job_id, (job.queue, job.priority), now)
        if self.rec.counts_preemptions:  # Young / Daly for any Poisson interrupt: failures + preemptions so far
            rate = self.preemption_rate.per_s((job.queue, job.priority), now)
            if self.failures is not None:
                rate += 1.0 / self.failures.mtbf_s(job.cur_gpus, self.gpn)
            job.ckpt_interval_s = (
                self.rec.optimum_floor_s(self.rec.interval_s(1.0 / rate), self._step_s(job)) if rate > 0 else math.inf
            )
        elif self.failures is not None:
            optimum = self.rec.interval_s(self.failures.mtbf_s(job.cur_gpus, self.gpn))
            job.ckpt_interval_s = self.rec.optimum_floor_s(optimum, self._step_s(job))
        elif self.rec.interval not in ("young", "daly"):
            # a fixed interval applies without faults too (preemptions roll back to the last checkpoint); Young's
            # and Daly's optimum for an infinite MTBF is never to checkpoint
            job.ckpt_interval_s = self.rec.interval_s(math.inf)
        job.ckpt_cost_s = self.rec.ckpt_cost_s if math.isfinite(job.ckpt_interval_s) else 0.0
        job.start_s = now
        job.running, job.hung = True, False
        job.epoch += 1
        # Slurm ends a job at its time limit (state TIMEOUT; OverTimeLimit 0 by default), counted from the
        # allocation's start: a requeue gets a new allocation and limit (``_start``), a restart in place keeps both
        # (HyperPod auto-resume and elastic shrink re-run the step inside the same job); the backfill's expected
        # end is that deadline (a job without a limit: a year on, as Slurm plans it)
        deadline = job.deadline_s
        limit_s = planned_limit_s(max(0.0, deadline - now))
        self.running[job.job_id] = RunningJob(job_id=job.job_id, num_gpus=job.cur_gpus, start_s=now,
                                              time_limit_s=limit_s, user=job.user, queue=job.queue,
                                              priority=job.priority)  # fmt: skip
        finish = now + wall_to_finish_s(job)
        if finish <= deadline:
            self.env.schedule(finish, FINISH, (job.job_id, job.epoch))
        else:
            self.env.schedule(max(deadline, now), TIMEOUT, (job.job_id, job.epoch))

    def _charge(self, job: Job, now_s: float) -> None:
        """Fair-share usage of the segment that ends now (its part since the last priority calculation)."""
        if self.prio is not None:
            self.prio.charge(job.user, job.cur_gpus * max(0.0, now_s - max(job.start_s, self.prio.last_charge_s)))

    def _priority_of(self, job: Job, now_s: float) -> float:
        if self.prio is None:
            return job.priority
        return self.prio.priority(now_s=now_s, eligible_s=job.eligible_s, user=job.user,
                                  num_nodes=-(-job.num_gpus // self.gpn), site=job.priority)  # fmt: skip

    def _close(self, job: Job, now_s: float, *, graceful: bool, kind: str, rollback_step_s: float = 0.0) -> None:
        self._charge(job, now_s)
        if self.keep_segments:
            self.segment_log.append((job.job_id, job.start_s, now_s, kind, sorted(n for n, _ in job.alloc)))
        close_segment(job, now_s, graceful=graceful, rollback_step_s=rollback_step_s)

    def _step_s(self, job: Job) -> float:
        """Wall seconds of one training step of ``job`` as it runs now (the speed model's batch, at its speed)."""
        ref = self.speed.tokens_per_s(job.model, job.num_gpus, True)
        return step_tokens(job.num_gpus, self.gpn) / (ref * job.speed)

    def _release(self, job: Job) -> None:
        self.fleet.release(job.alloc)
        for n, _ in job.alloc:
            self.node_jobs.get(n, set()).discard(job.job_id)
        job.alloc = []
        job.running = False
        self.running.pop(job.job_id, None)
        self.preemption_rate.stop(job.job_id, self.env.now_s)

    def _requeue(self, job: Job, delay_s: float) -> None:
        self._release(job)
        job.hung = False
        job.restarts += 1
        job.eligible_s = self.env.now_s + delay_s
        self.env.schedule(job.eligible_s, ELIGIBLE, job.job_id)

    def _fault_requeue(self, job: Job) -> None:
        """Requeue after a failure: Slurm's requeue delay, or under ``kueue`` the waitForPodsReady backoff (60 s
        doubling to 3,600 s) of a workload evicted when its pods are not ready again within recoveryTimeout
        (kueue setup_wait_for_pods_ready.md; shared/reference/orchestration-02-kueue-volcano-kai.md section 4),
        counted over this job's failure requeues only."""
        job.fault_requeues += 1
        if self.policy.name in KUEUE_POLICIES:
            self._requeue(job, requeue_backoff_s(job.fault_requeues))
        else:
            self._requeue(job, self.rec.requeue_delay_s)

    def _preempt(self, job: Job) -> None:
        self.preemptions += 1
        self.preemption_rate.preempted((job.queue, job.priority))
        job.preemptions += 1
        lost_before = job.lost_gpu_s
        self._close(job, self.env.now_s, graceful=False, kind="preempted")
        self.preempted_lost_gpu_s += job.lost_gpu_s - lost_before
        job.epoch += 1
        # a preempted workload is requeued at once (Evicted/Preempted, then requeued: kueue concepts/preemption.md);
        # the waitForPodsReady backoff is for workloads evicted because their pods were not ready, not for this
        self._requeue(job, 0.0)
