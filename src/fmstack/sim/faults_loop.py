"""Fault events of the fleet twin: a node fails (or goes to planned maintenance), the failure is detected after
the recovery mode's detection time, the node-health engine picks an action, the node is reset, rebooted or
replaced (a spare joins the pool meanwhile), and each job on it recovers by its recovery mode:

- checkpoint-restart (Slurm): the whole allocation ends (NODE_FAIL) and the job is requeued with the same id,
  eligible after the requeue delay (120 s), restart count + 1; it reloads its last checkpoint;
- auto-resume (HyperPod): the failed node is swapped for a spare and the job restarts in place from its last
  checkpoint; with no spare it is requeued;
- checkpointless (HyperPod peer recovery): as auto-resume, but when a spare is free at the time of the failure
  only the step in progress is lost (peers hold the state of the last completed step; at most one step, as
  fmstack.perfmodel.goodput's checkpointless rollback), not the work since the last checkpoint;
- elastic: the job drops the failed node and continues one data-parallel replica smaller from its last
  checkpoint (no grow-back); a one-node job is requeued.
Failures strike the pool's nodes uniformly: candidates are drawn at rate r x (all nodes) and kept if the node is
in the pool (thinning), so the pool sees rate r per node whatever its composition. r is the failure model's rate
for a node of this instance's GPU count (per-GPU causes scale with the GPUs:
:meth:`fmstack.perfmodel.failures.FailureModel.node_failures_per_hour`; until 2026-11-24 every node was struck at
the 8-GPU reference node's rate, 1.47 x too often on 4-GPU GB200 nodes), and causes are drawn with that node's
mix.
"""

from __future__ import annotations

from typing import Any

from fmstack.observability.health import Action
from fmstack.perfmodel.goodput import RecoveryMode
from fmstack.sim.faults import engine_action
from fmstack.sim.fleet import NodeState
from fmstack.sim.gpu_faults import draw_gpu_class
from fmstack.sim.state import DETECT, FAULT, MAINT, OUT_STATE, REPAIRED, SAMPLE, SimState
from fmstack.sim.workload import Job

_ACTIVE = (NodeState.UP, NodeState.DRAINING)


class FaultHandling(SimState):
    """Fault, maintenance, detection, repair and sampling events."""

    def _next_fault(self) -> float:
        assert self.failures is not None
        rate = self.failures.node_failures_per_hour(self.gpn) / 3600.0 * len(self.fleet.state)
        return self.env.now_s + float(self.env.rng.exponential(1.0 / rate))

    def _next_maint(self) -> float:
        assert self.failures is not None
        rate = self.failures.planned_per_node_hour / 3600.0 * len(self.fleet.state)
        return self.env.now_s + float(self.env.rng.exponential(1.0 / rate))

    def _pick_node(self) -> int | None:
        node = int(self.env.rng.integers(len(self.fleet.state)))
        return node if self.fleet.state[node] in _ACTIVE else None

    def _on_fault(self, _: Any) -> None:
        assert self.failures is not None
        self.env.schedule(self._next_fault(), FAULT)
        node = self._pick_node()
        if node is None:
            return
        category = self.failures.sample_category(self.env.rng, self.fault_shares)
        self._strike(node, category, planned=False)

    def _on_maint(self, _: Any) -> None:
        self.env.schedule(self._next_maint(), MAINT)
        node = self._pick_node()
        if node is not None:
            self._strike(node, "planned_maintenance", planned=True)

    def _strike(self, node: int, category: str, *, planned: bool) -> None:
        now = self.env.now_s
        jobs = sorted(self.node_jobs.get(node, ()))
        self.fleet.set_state(node, NodeState.DOWN)
        self.nodes_out += 1
        peers = not planned and self.rec.mode == RecoveryMode.checkpointless and bool(self.fleet.spares)
        graceful = planned or peers
        lost_before = sum(self.jobs[j].lost_gpu_s for j in jobs)
        for jid in jobs:
            job = self.jobs[jid]
            self.interruptions += 1
            if job.hung:
                continue
            self._close(job, now, graceful=graceful, kind="planned" if planned else "failed",
                        rollback_step_s=self._step_s(job) if peers else 0.0)  # fmt: skip
            job.epoch += 1
            job.hung = True
        # a GPU fault's Xid class, drawn with the twin's generator (the engine decides its action at detection)
        gpu_fault = draw_gpu_class(self.env.rng, self.gpu_classes).name if category == "gpu" else None
        self.fault_log.append(
            {"time_s": now, "node": node, "category": category, "gpu_fault": gpu_fault, "jobs": jobs, "action": "",
             "lost_gpu_h": (sum(self.jobs[j].lost_gpu_s for j in jobs) - lost_before) / 3600.0}
        )  # fmt: skip
        delay = 0.0 if planned else self.times.detection_s
        self.undetected[node] = (category, len(self.fault_log) - 1)
        self.env.schedule(now + delay, DETECT, (node, category, len(self.fault_log) - 1))

    def _close_hang(self, job: Job, now_s: float) -> None:
        self._charge(job, now_s)
        if self.keep_segments:
            self.segment_log.append((job.job_id, job.start_s, now_s, "hung", sorted(n for n, _ in job.alloc)))
        hang = max(0.0, now_s - job.start_s) * job.cur_gpus
        job.alloc_gpu_s += hang
        job.hang_gpu_s += hang
        job.start_s = now_s

    def _on_detect(self, data: tuple[int, str, int]) -> None:
        """The failure of ``node`` is detected: the node is handled (:meth:`_handle_node`) and its hung jobs
        recover. A hung job restarts only once: the other nodes of those jobs that failed too and are not detected
        yet are detected with it (the restart's health checks find them; Slurm's NODE_FAIL and HyperPod's
        auto-resume see every bad node of the allocation), so each failed node takes exactly one spare, and gives
        exactly that one back when it is repaired. Until 2026-11-24 the second node's spare was taken at the
        restart and again at its own detection, and one spare stayed in the pool for good (review)."""
        node, _, log_i = data
        if self.undetected.get(node, ("", -1))[1] != log_i:
            return  # detected already, with another failed node of one of its jobs
        nodes = [node]
        spares: dict[int, int | None] = {}
        for n in nodes:  # grows as hung jobs bring in their other failed nodes
            category, li = self.undetected.pop(n)
            spares[n] = self._handle_node(n, category, li)
            for jid in sorted(self.node_jobs.get(n, ())):
                for m, _ in self.jobs[jid].alloc:
                    if m in self.undetected and m not in nodes:
                        nodes.append(m)
        hung = sorted({jid for n in nodes for jid in self.node_jobs.get(n, ())})
        for jid in hung:
            job = self.jobs[jid]
            if job.hung:
                self._close_hang(job, self.env.now_s)
                if self.env.now_s >= job.deadline_s:
                    self._end_at_limit(job)  # Slurm killed it at its limit while it hung: no restart, no spare
                else:
                    self._recover(job, spares)
        self._changed()

    def _handle_node(self, node: int, category: str, log_i: int) -> int | None:
        """The health engine's action for a detected failure of ``node``: the node is reset, rebooted or replaced
        (out of service meanwhile, a spare joining the pool if one is on standby) or, for a job-level fault, back
        in service at once. Returns the spare that joined the pool for it, if any."""
        entry = self.fault_log[log_i]
        if category == "planned_maintenance":  # no fault: not in the node's history (fmstack.sim.node_history)
            action = Action.REBOOT_NODE
            out_s = self.repair.maintenance_s
        else:
            gpu_fault = next((k for k in self.gpu_classes if k.name == entry.get("gpu_fault")), None)
            seen = self.history.counts(node, entry["time_s"])
            raw = engine_action(self.health, category, gpu_fault, self.gpn, seen.resets, seen.reboots, seen.restarts)
            if seen.restarts or seen.resets or seen.reboots:
                first = engine_action(self.health, category, gpu_fault, self.gpn, 0, 0, 0)
                if first != raw:
                    entry["escalated_from"] = first.name
            self.history.record(node, entry["time_s"], raw)
            action = Action.RESTART_JOB if raw == Action.NONE else raw  # thermal: the job still restarts
            out_s = self.repair.out_s(action, self.times.replacement_s)
        entry["action"] = action.name
        spare: int | None = None
        if out_s > 0:
            self.fleet.set_state(node, OUT_STATE[action])
            spare = self.fleet.take_spare()
            self.env.schedule(self.env.now_s + out_s, REPAIRED, (node, spare is not None))
        else:
            self.fleet.set_state(node, NodeState.UP)
            self.nodes_out -= 1
        return spare

    def _end_at_limit(self, job: Job) -> None:
        """A hung job whose time limit passed before the hang was detected ends as TIMEOUT at the detection (the
        strike cancelled its TIMEOUT event; the overrun is at most the detection time); its hang was charged."""
        job.epoch += 1
        job.hung = False
        job.timed_out = True
        job.end_s = self.env.now_s
        self._release(job)

    def _recover(self, job: Job, spares: dict[int, int | None]) -> None:
        """Recover a hung job by the recovery mode; ``spares``: the spare that joined the pool for each of its
        failed nodes (None: none was on standby). A spare takes only its node's part of the jobs, so it has room."""
        mode = self.rec.mode
        if mode == RecoveryMode.checkpoint_restart:
            self._fault_requeue(job)
            return
        bad = [(n, g) for n, g in job.alloc if self.fleet.state[n] not in _ACTIVE]
        keep = [(n, g) for n, g in job.alloc if self.fleet.state[n] in _ACTIVE]
        for n, _ in job.alloc:
            self.node_jobs.get(n, set()).discard(job.job_id)
        self.fleet.release(bad)
        restart = self.times.restart_s
        if mode == RecoveryMode.elastic and bad:
            if keep:
                job.alloc = keep
                job.restarts_in_place += 1
                self.running.pop(job.job_id, None)
                self._run_on(job, keep, restart)
                return
        else:
            for n, g in bad:
                swap = spares.get(n)
                if swap is None:
                    self.fleet.release(keep)
                    job.alloc = []
                    self._fault_requeue(job)
                    return
                keep.append(self.fleet.place_on(swap, g))
            job.restarts_in_place += 1
            self.running.pop(job.job_id, None)
            self._run_on(job, keep, restart)
            return
        job.alloc = keep
        self._fault_requeue(job)

    def _on_repaired(self, data: tuple[int, bool]) -> None:
        node, swapped = data
        self.nodes_out -= 1
        if swapped:
            self.fleet.to_spare(node)
        else:
            self.fleet.set_state(node, NodeState.UP)
        self._changed()

    def _on_sample(self, _: Any) -> None:
        self.samples.append(
            (self.env.now_s, self.fleet.allocated_gpus, len(self.pending), len(self.running), self.nodes_out,
             len(self.fleet.spares))
        )  # fmt: skip
        self.env.schedule(self.env.now_s + self.cfg.sample_s, SAMPLE)
        if self.on_progress is not None:
            self.on_progress(self.env.now_s)
