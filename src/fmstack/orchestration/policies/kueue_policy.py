"""The Kueue-like policy the fleet twin runs: one ClusterQueue per queue in a shared cohort, DRS fair-sharing
admission order, gang (all-or-nothing) admission with topology placement from the capacity, and classic
preemption (within a queue by priority, reclaim within the cohort).

Nominal quota: the fleet's GPUs split evenly among the queues (remainder to the first); a documented default
([D]) a user changes with ``nominal_gpus``. The admission order is computed once per pass: DRS share of the
queue with the workload added (lowest first, kueue fair_sharing.md), then priority, then creation time.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from fmstack.orchestration.policies.base import Capacity, PendingJob, Plan, RunningJob
from fmstack.orchestration.policies.kueue import ClusterQueue, KueueState, Quota, Workload

RES = "gpu"


@dataclass(frozen=True, kw_only=True, slots=True)
class KueuePolicy:
    """Kueue-like admission with quotas, cohort borrowing, fair sharing and preemption."""

    queues: tuple[str, ...] = ("default",)
    nominal_gpus: Mapping[str, int] = field(default_factory=dict)
    """Nominal GPU quota per queue; empty: an even split of the fleet."""
    borrowing_limit_gpus: int | None = None
    within_cluster_queue: str = "LowerPriority"
    reclaim_within_cohort: str = "Any"
    name: str = "kueue"
    interval_s: float = 0.0

    def cluster_queues(self, total_gpus: int) -> dict[str, ClusterQueue]:
        n = len(self.queues)
        out: dict[str, ClusterQueue] = {}
        for i, q in enumerate(self.queues):
            nominal = self.nominal_gpus.get(q, total_gpus // n + (total_gpus % n if i == 0 else 0))
            out[q] = ClusterQueue(
                name=q,
                quotas={RES: Quota(nominal=nominal, borrowing_limit=self.borrowing_limit_gpus)},
                cohort="fleet",
                within_cluster_queue=self.within_cluster_queue,
                reclaim_within_cohort=self.reclaim_within_cohort,
            )
        return out

    def schedule(
        self,
        now_s: float,
        pending: Collection[PendingJob],
        running: Collection[RunningJob],
        capacity: Capacity,
        *,
        periodic: bool = False,
    ) -> Plan:
        state = KueueState(queues=self.cluster_queues(capacity.total_gpus))
        for r in running:
            state.admitted.append(
                Workload(
                    wid=r.job_id,
                    queue=r.queue,
                    request={RES: r.num_gpus},
                    priority=int(r.priority),
                    admitted_s=r.start_s,
                )
            )
        wls = {
            j.job_id: Workload(
                wid=j.job_id, queue=j.queue, request={RES: j.num_gpus}, priority=int(j.priority), admitted_s=now_s
            )
            for j in pending
            if j.queue in state.queues
        }
        order = sorted(
            (j for j in pending if j.job_id in wls),
            key=lambda j: (state.share(j.queue, extra=wls[j.job_id]), -j.priority, j.submit_s, j.job_id),
        )
        starts: list[int] = []
        for job in order:
            wl = wls[job.job_id]
            if state.fits(wl):
                if capacity.try_start(job):
                    state.admit(wl)
                    starts.append(job.job_id)
                continue
            targets = state.preemption_targets(wl)
            if targets:
                return Plan(starts, preempt=targets)
        return Plan(starts)
