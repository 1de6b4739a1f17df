"""Kueue's order and the pass's limits, counted by hand: within a ClusterQueue by priority then creation time
(kueue concepts/cluster_queue.md, "Queueing strategy"), BestEffortFIFO vs StrictFIFO, the preemptor named in
the plan, and no preemption of a workload admitted in the same pass. Two queues a and b of nominal 8 GPUs each
in one cohort of 16 (the even split of a 16-GPU fleet)."""

from __future__ import annotations

import pytest

from fmstack.errors import InputError
from fmstack.orchestration.policies import CountCapacity, PendingJob, RunningJob
from fmstack.orchestration.policies.kueue import KueueState, Workload
from fmstack.orchestration.policies.kueue_policy import RES, KueuePolicy, _Pass, _Queues


def _pending(jid: int, queue: str, gpus: int, prio: float, submit_s: float) -> PendingJob:
    return PendingJob(job_id=jid, num_gpus=gpus, submit_s=submit_s, time_limit_s=1e4, queue=queue, priority=prio)


def _running(jid: int, queue: str, gpus: int, prio: float = 0.0, start_s: float = 0.0) -> RunningJob:
    return RunningJob(job_id=jid, num_gpus=gpus, start_s=start_s, time_limit_s=1e4, queue=queue, priority=prio)


def test_within_a_queue_priority_goes_first_whatever_the_size() -> None:
    # b: job 3 (8 GPUs, priority 0, t=0) and job 0 (16, priority 1, t=10); a: job 4 (16, priority 5, t=0).
    # b's head is job 0 (priority 1 > 0), with DRS share (16 - 8) x 1000 / 16 = 500; a's head job 4 has 500 too,
    # and priority 5 goes first: it fits (16 of the cohort's 16) and starts. b's job 0 then needs 16 more: no
    # quota, and nothing of b ran at the pass start to preempt; job 3 would reclaim from a, which borrows, but
    # only workloads running at the pass start are targets and a's only one was admitted now: nothing.
    # (Ordered by share with the workload first, job 3 (share 0) used to start first and job 0 then evicted it in
    # the same pass: the reviewer's livelock.)
    pol = KueuePolicy(queues=("a", "b"))
    pend = [_pending(3, "b", 8, 0, 0.0), _pending(4, "a", 16, 5, 0.0), _pending(0, "b", 16, 1, 10.0)]
    plan = pol.schedule(20.0, pend, [], CountCapacity(total_gpus=16, free_gpus=16))
    assert plan.starts == [4] and plan.preempt == [] and plan.preemptor is None


def test_the_plan_names_the_preemptor() -> None:
    # job 3 (b, 8, priority 0) runs; job 0 (b, 16, priority 1) evicts it (b's lower priority) and then fits,
    # borrowing a's unused 8: the plan names job 0 so that the caller starts it on the GPUs job 3 frees
    pol = KueuePolicy(queues=("a", "b"))
    plan = pol.schedule(20.0, [_pending(0, "b", 16, 1, 10.0)], [_running(3, "b", 8)],
                        CountCapacity(total_gpus=16, free_gpus=8))  # fmt: skip
    assert plan.starts == [] and plan.preempt == [3] and plan.preemptor == 0


@pytest.mark.parametrize(("strategy", "starts"), [("BestEffortFIFO", [2]), ("StrictFIFO", [])])
def test_strict_fifo_holds_the_queue_behind_its_head(strategy: str, starts: list[int]) -> None:
    # a: job 1 (16 GPUs, t=0) fits the quota (borrowing b's 8) but 8 GPUs are free, so it cannot be placed; job 2
    # (8, t=1) could start. BestEffortFIFO sets job 1 aside and starts job 2; StrictFIFO keeps job 1 at the head
    # and nothing of a starts (kueue: "older workloads that can't be admitted will block newer workloads")
    pol = KueuePolicy(queues=("a", "b"), queueing_strategy=strategy)
    pend = [_pending(1, "a", 16, 0, 0.0), _pending(2, "a", 8, 0, 1.0)]
    assert pol.schedule(5.0, pend, [], CountCapacity(total_gpus=16, free_gpus=8)).starts == starts


def test_strict_fifo_holds_only_the_blocked_queue() -> None:
    # a's head (24 GPUs) can never fit the cohort's 16: it holds a; b's workload starts
    pol = KueuePolicy(queues=("a", "b"), queueing_strategy="StrictFIFO")
    pend = [_pending(1, "a", 24, 0, 0.0), _pending(2, "a", 4, 0, 1.0), _pending(3, "b", 4, 0, 2.0)]
    assert pol.schedule(5.0, pend, [], CountCapacity(total_gpus=16, free_gpus=16)).starts == [3]


def test_unknown_queueing_strategy_is_refused() -> None:
    with pytest.raises(InputError, match="allowed: BestEffortFIFO, StrictFIFO"):
        KueuePolicy(queueing_strategy="Fifo")


def test_a_workload_admitted_in_the_pass_is_not_a_target() -> None:
    # a runs job 1 (8 GPUs, its nominal quota); the pass admits job 2 (a, 4: a borrows 4 of b's). Job 9 (b, 8)
    # no longer fits (12 + 8 > 16) and reclaims from a, which borrows. Kueue's classic order takes the most
    # recently admitted first, which would be job 2, admitted a moment ago in this very pass; targets come from
    # the workloads running at the pass start, so job 1 goes (a back to 4, b to 8: fits without borrowing).
    pol = KueuePolicy(queues=("a", "b"))
    pas = _Pass(pol, _Queues(pol.cluster_queues(16)), 5.0, [_running(1, "a", 8)])
    pas.admit(_pending(2, "a", 4, 0, 1.0))
    assert pas.targets(_pending(9, "b", 8, 0, 2.0)) == [1]
    # the plain classic walk over everything admitted, the new workload included, would pick job 2
    state = KueueState(queues=pol.cluster_queues(16))
    state.admit(Workload(wid=1, queue="a", request={RES: 8}, admitted_s=0.0))
    state.admit(Workload(wid=2, queue="a", request={RES: 4}, admitted_s=5.0))
    assert state.preemption_targets(Workload(wid=9, queue="b", request={RES: 8}, admitted_s=5.0)) == [2]
