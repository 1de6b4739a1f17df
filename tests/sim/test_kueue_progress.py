"""Kueue runs make progress: within a queue by priority then creation time, the preemptor gets the GPUs its
victims free, a pass never preempts what it admitted, and a cycle of preemptions at one instant is broken.

Review (session 13): on tests/sim/data/kueue_livelock4.csv (2 nodes, queues a and b of nominal 8 GPUs each) the
twin preempted job 3 at t = 10 s without end: job 0 (b, 16 GPUs, priority 1) evicted job 3 (b, 8, priority 0),
job 4 (a, 16, priority 5) took the freed GPUs, job 3 reclaimed them from a, job 0 evicted job 3 again in the pass
that had just readmitted it, and so on, with the clock stuck at 10 s."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fmstack.catalog import Catalog
from fmstack.orchestration.policies import Capacity, PendingJob, Plan, RunningJob
from fmstack.sim.config import SimConfig
from fmstack.sim.metrics import summarise
from fmstack.sim.simulator import Simulator
from fmstack.sim.workload import Job
from tests.sim.conftest import FlatSpeed

DATA = Path(__file__).parent / "data"


class _Bounded(Simulator):
    """Fails instead of hanging: a run that livelocks preempts without end at one instant."""

    def _preempt(self, job: Job) -> None:
        assert self.preemptions < 200, f"livelock: {self.preemptions} preemptions, clock at {self.env.now_s} s"
        super()._preempt(job)


def _run(catalog: Catalog, trace: str, nodes: int) -> Simulator:
    cfg = SimConfig(policy="kueue", trace=DATA / trace, nodes=nodes, days=1.0, faults=None)
    sim = _Bounded(cfg, catalog)
    sim.run()
    return sim


def test_review_livelock_trace_finishes_as_counted_by_hand(catalog: Catalog) -> None:
    # 2 nodes x 8 GPUs; queues a, b nominal 8 each; no faults, no checkpoints; a requeued job restarts in 780 s
    # (auto-resume's startup after a requeue) and redoes its work (nothing was saved).
    # t=0: job 3 (b, 8, prio 0) fits; job 4 (a, 16, prio 5) would need b's 8 in use, nothing to take: waits.
    # t=10: job 0 (b, 16, prio 1) evicts job 3 (its queue, lower priority) and starts on both nodes at once
    #   (the preemptor gets the freed GPUs; job 4 used to take them).
    # t=30: job 2 (b, 8, prio 5) evicts job 0 and starts; job 3 (b, 8) heads b after job 0 and fits: starts.
    # t=1030: job 2 ends; job 0 (b, prio 1) evicts job 3 (prio 0) and runs 780 + 1000 s: ends at 2810.
    # t=2810: b's job 3 (DRS share 0) goes before a's job 4 (a would borrow 8: share 8 x 1000 / 16 = 500) and
    #   ends at 2810 + 780 + 1000 = 4590; then job 4 (16) starts and ends at 5590.
    sim = _run(catalog, "kueue_livelock4.csv", nodes=2)
    ended = [(jid, start, end, how) for jid, start, end, how, _ in sim.segment_log]
    assert ended == [
        (3, 0.0, 10.0, "preempted"),
        (0, 10.0, 30.0, "preempted"),
        (2, 30.0, 1030.0, "completed"),
        (3, 30.0, 1030.0, "preempted"),
        (0, 1030.0, 2810.0, "completed"),
        (3, 2810.0, 4590.0, "completed"),
        (4, 4590.0, 5590.0, "completed"),
    ]
    s = summarise(sim)
    assert s["jobs"]["preemptions"] == 3 and s["jobs"]["preemption_cycles_broken"] == 0
    assert s["warnings"] == []


def test_review_27_job_trace_finishes(catalog: Catalog) -> None:
    # the reviewer's first livelock (32 nodes, 7 queues): every job completes within the day
    sim = _run(catalog, "kueue_livelock.csv", nodes=32)
    s = summarise(sim)
    assert s["jobs"]["completed"] == s["jobs"]["submitted"] == 27
    assert s["jobs"]["preemptions"] < s["jobs"]["submitted"]
    assert s["jobs"]["preemption_cycles_broken"] == 0


@dataclass(frozen=True)
class _Flip:
    """A policy that starts what fits, else evicts a running job for a pending one: two jobs on one node swap
    places at the same instant without end."""

    name: str = "flip"
    interval_s: float = 0.0

    def schedule(
        self,
        now_s: float,
        pending: Collection[PendingJob],
        running: Collection[RunningJob],
        capacity: Capacity,
        *,
        periodic: bool = False,
    ) -> Plan:
        starts = [p.job_id for p in pending if capacity.try_start(p)]
        if starts or not pending or not running:
            return Plan(starts)
        return Plan([], preempt=[next(iter(running)).job_id], preemptor=next(iter(pending)).job_id)


def test_a_cycle_of_preemptions_at_one_instant_is_broken(catalog: Catalog) -> None:
    # one node; job 1 (8 GPUs) runs from 0, job 2 (8 GPUs) comes at 10. At 10: 2 evicts 1 (1 is requeued at
    # once), 1 evicts 2, and 2 would evict 1 again from the very state of the first preemption: that one is not
    # made. Job 1 runs on and ends at 10 + 780 (restart after a requeue) + 1,000 s of work = 1,790 s (its first
    # 10 s were lost: no checkpoint); job 2 then runs 1,000 s.
    jobs = [Job(job_id=1, submit_s=0.0, num_gpus=8, work_s=1000.0, time_limit_s=1e5),
            Job(job_id=2, submit_s=10.0, num_gpus=8, work_s=1000.0, time_limit_s=1e5)]  # fmt: skip
    sim = _Bounded(SimConfig(nodes=1, days=1.0, faults=None), catalog, speed=FlatSpeed(), jobs=jobs)
    flip: Any = _Flip()
    sim.policy = flip
    sim.run()
    s = summarise(sim)
    assert s["jobs"]["preemptions"] == 2
    assert s["jobs"]["preemption_cycles_broken"] == 1
    assert s["jobs"]["completed"] == 2
    assert (sim.jobs[1].end_s, sim.jobs[2].end_s) == (1790.0, 1790.0 + 780.0 + 1000.0)
    assert len(s["warnings"]) == 1 and "1 preemption not made" in s["warnings"][0]
