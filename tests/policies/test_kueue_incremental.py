"""The incremental Kueue pass decides exactly as the plain one (every workload in order, quota checks and
preemption targets from a rebuilt :class:`KueueState`), and :class:`CohortQuota` is :func:`quota_fits` as a bound."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fmstack.orchestration.policies import CountCapacity, PendingJob, Plan, RunningJob
from fmstack.orchestration.policies.base import RunningSet
from fmstack.orchestration.policies.fifo import PendingQueue
from fmstack.orchestration.policies.kueue import ClusterQueue, CohortQuota, KueueState, Quota, Workload, quota_fits
from fmstack.orchestration.policies.kueue_policy import RES, KueuePolicy


def reference_schedule(
    pol: KueuePolicy, now_s: float, pending: list[PendingJob], running: list[RunningJob], cap: CountCapacity
) -> Plan:
    """The pass written plainly: state rebuilt from every running job; each queue's workloads by priority then
    creation time; at each step every queue offers its head (the next workload past the last one taken from it
    that fits, or fits once the classic targets are gone; under StrictFIFO only the very next one, and a queue
    whose head can do neither is held), and the head whose queue has the lowest DRS share with it admitted goes
    next (then priority, creation time). Workloads admitted in this pass are never targets."""
    state = KueueState(queues=pol.cluster_queues(cap.total_gpus))
    for r in running:
        state.admitted.append(
            Workload(wid=r.job_id, queue=r.queue, request={RES: r.num_gpus}, priority=int(r.priority),
                     admitted_s=r.start_s)
        )  # fmt: skip
    strict = pol.queueing_strategy == "StrictFIFO"
    by_queue: dict[str, list[PendingJob]] = {}
    for j in sorted(pending, key=lambda j: (-j.priority, j.submit_s, j.job_id)):
        if j.queue in state.queues:
            by_queue.setdefault(j.queue, []).append(j)
    nxt = dict.fromkeys(by_queue, 0)
    now_ids: set[int] = set()
    no_room: set[int] = set()
    held: set[str] = set()
    starts: list[int] = []

    def wl_of(j: PendingJob) -> Workload:
        return Workload(wid=j.job_id, queue=j.queue, request={RES: j.num_gpus}, priority=int(j.priority),
                        admitted_s=now_s)  # fmt: skip

    def act(j: PendingJob) -> tuple[bool, list[int] | None] | None:
        """(fits, targets) if ``j`` can do something now, else None."""
        wl = wl_of(j)
        if state.fits(wl):
            return None if j.num_gpus in no_room else (True, None)
        targets = state.preemption_targets(wl, [w for w in state.classic_candidates(wl) if w.wid not in now_ids])
        return (False, targets) if targets else None

    while True:
        heads = []
        for q, jobs in by_queue.items():
            if q in held:
                continue
            for i in range(nxt[q], len(jobs)):
                a = act(jobs[i])
                if a is None:
                    if strict:
                        held.add(q)
                        break
                    continue
                j = jobs[i]
                heads.append(((state.share(q, extra=wl_of(j)), -j.priority, j.submit_s, j.job_id), q, i, a))
                break
        if not heads:
            return Plan(starts)
        _, q, i, (fits, targets) = min(heads)
        job = by_queue[q][i]
        nxt[q] = i + 1
        if fits:
            if cap.try_start(job):
                state.admit(wl_of(job))
                now_ids.add(job.job_id)
                starts.append(job.job_id)
                continue
            no_room.add(job.num_gpus)
        else:
            return Plan(starts, preempt=targets or [], preemptor=job.job_id)
        if strict:
            held.add(q)


QUEUES = ("a", "b", "c")
job_fields = st.tuples(
    st.sampled_from(QUEUES), st.sampled_from([1, 2, 4, 8, 16, 24]), st.sampled_from([0.0, 1.0, 2.5, 5.0])
)


@settings(max_examples=300, deadline=None)
@given(
    running=st.lists(st.tuples(job_fields, st.integers(0, 50)), max_size=12),
    pending=st.lists(st.tuples(job_fields, st.integers(0, 50)), max_size=12),
    free=st.integers(0, 64),
    within=st.sampled_from(["Never", "LowerPriority", "LowerOrNewerEqualPriority"]),
    reclaim=st.sampled_from(["Never", "LowerPriority", "Any"]),
    borrowing_limit=st.sampled_from([None, 0, 8]),
    nominal=st.sampled_from([{}, {"a": 40, "b": 8, "c": 16}]),
    strategy=st.sampled_from(["BestEffortFIFO", "StrictFIFO"]),
)
def test_incremental_pass_matches_plain_pass(
    running: list[tuple[tuple[str, int, float], int]],
    pending: list[tuple[tuple[str, int, float], int]],
    free: int,
    within: str,
    reclaim: str,
    borrowing_limit: int | None,
    nominal: dict[str, int],
    strategy: str,
) -> None:
    pol = KueuePolicy(queues=QUEUES, nominal_gpus=nominal, borrowing_limit_gpus=borrowing_limit,
                      within_cluster_queue=within, reclaim_within_cohort=reclaim,
                      queueing_strategy=strategy)  # fmt: skip
    run = [
        RunningJob(job_id=i, num_gpus=g, start_s=float(t), time_limit_s=1e4, queue=q, priority=p)
        for i, ((q, g, p), t) in enumerate(running)
    ]
    pend = [
        PendingJob(job_id=100 + i, num_gpus=g, submit_s=float(t), time_limit_s=1e4, queue=q, priority=p)
        for i, ((q, g, p), t) in enumerate(pending)
    ]
    want = reference_schedule(pol, 40.0, pend, run, CountCapacity(total_gpus=64, free_gpus=free))
    assert pol.schedule(40.0, pend, run, CountCapacity(total_gpus=64, free_gpus=free)) == want
    rs, pq = RunningSet(), PendingQueue()
    for r in run:
        rs[r.job_id] = r
    for j in pend:
        pq[j.job_id] = j
    assert pol.schedule(40.0, pq, rs, CountCapacity(total_gpus=64, free_gpus=free)) == want
    # the indexes built by that call are kept up to date as jobs come and go
    if run:
        rs.pop(run[0].job_id)
    if pend:
        pq.pop(pend[-1].job_id)
    late = PendingJob(job_id=999, num_gpus=8, submit_s=0.0, time_limit_s=1e4, queue="b", priority=1.0)
    pq[late.job_id] = late
    rest = [*pend[:-1], late]
    want = reference_schedule(pol, 41.0, rest, run[1:], CountCapacity(total_gpus=64, free_gpus=free))
    assert pol.schedule(41.0, pq, rs, CountCapacity(total_gpus=64, free_gpus=free)) == want


quota = st.builds(
    Quota,
    nominal=st.integers(0, 20),
    borrowing_limit=st.one_of(st.none(), st.integers(0, 10)),
    lending_limit=st.one_of(st.none(), st.integers(0, 20)),
)


@settings(max_examples=300, deadline=None)
@given(
    quotas=st.lists(st.tuples(quota, st.sampled_from([None, "x", "y"])), min_size=1, max_size=4),
    use=st.lists(st.integers(0, 30), min_size=4, max_size=4),
)
def test_cohort_quota_bound_is_quota_fits(quotas: list[tuple[Quota, str | None]], use: list[int]) -> None:
    queues = {f"q{i}": ClusterQueue(name=f"q{i}", quotas={RES: q}, cohort=c) for i, (q, c) in enumerate(quotas)}
    state = KueueState(queues=queues)
    cohort = CohortQuota(queues, RES)
    usage = {f"q{i}": u for i, u in enumerate(use)}
    all_fits = cohort.max_fits(lambda m: usage[m])
    for name, cq in queues.items():
        bound = cohort.max_fit(name, lambda m: usage[m])
        assert all_fits[name] == bound
        for n in range(0, 45):
            fits = quota_fits(cq, state.members(cq), {RES: n}, lambda m, r: usage[m])
            assert fits == (n <= bound), (name, n, bound)
