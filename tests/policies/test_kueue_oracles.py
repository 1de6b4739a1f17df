"""Kueue oracles 7-12 and KAI oracle 13 of shared/data/scheduling-oracles.md, plus the DRS property."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fmstack.orchestration.policies import CountCapacity, PendingJob, RunningJob, make_policy
from fmstack.orchestration.policies.kueue import ClusterQueue, KueueState, Quota, Workload, requeue_backoff_s
from fmstack.orchestration.policies.placement import balanced, best_fit, kai_place, least_free_capacity


def _max_admit(state: KueueState, queue: str) -> int:
    n = 0
    while state.fits(Workload(wid=-1, queue=queue, request={"cpu": n + 1})):
        n += 1
    return n


def _teams(a: Quota, b: Quota) -> KueueState:
    return KueueState(
        queues={
            "team-a": ClusterQueue(name="team-a", quotas={"cpu": a}, cohort="c"),
            "team-b": ClusterQueue(name="team-b", quotas={"cpu": b}, cohort="c"),
        }
    )


def test_oracle7_borrowing_limit() -> None:
    state = _teams(Quota(nominal=9, borrowing_limit=1), Quota(nominal=12))
    assert _max_admit(state, "team-a") == 10
    assert _max_admit(state, "team-b") == 21


def test_oracle8_lending_limit() -> None:
    state = _teams(Quota(nominal=9), Quota(nominal=12, lending_limit=1))
    assert _max_admit(state, "team-a") == 10
    state.admit(Workload(wid=1, queue="team-a", request={"cpu": 10}))
    assert _max_admit(state, "team-b") == 11


def test_oracle9_preemption_defaults_and_order() -> None:
    cq = ClusterQueue(name="q", quotas={"gpu": Quota(nominal=8)})
    assert (cq.within_cluster_queue, cq.reclaim_within_cohort) == ("Never", "Never")
    state = KueueState(queues={"q": cq}, admitted=[Workload(wid=1, queue="q", request={"gpu": 8}, priority=0)])
    assert state.preemption_targets(Workload(wid=9, queue="q", request={"gpu": 8}, priority=100)) is None
    # candidate order: borrowing queues first, then lowest priority, then most recently admitted
    queues = {
        "a": ClusterQueue(
            name="a",
            quotas={"gpu": Quota(nominal=8)},
            cohort="c",
            within_cluster_queue="LowerPriority",
            reclaim_within_cohort="Any",
        ),
        "b": ClusterQueue(name="b", quotas={"gpu": Quota(nominal=4)}, cohort="c"),
    }
    admitted = [
        Workload(wid=1, queue="a", request={"gpu": 2}, priority=1, admitted_s=10),
        Workload(wid=2, queue="a", request={"gpu": 2}, priority=1, admitted_s=20),
        Workload(wid=3, queue="a", request={"gpu": 2}, priority=0, admitted_s=5),
        Workload(wid=4, queue="b", request={"gpu": 6}, priority=9, admitted_s=1),  # b borrows 2
    ]
    state = KueueState(queues=queues, admitted=admitted)
    wl = Workload(wid=9, queue="a", request={"gpu": 4}, priority=5)
    assert [w.wid for w in state.classic_candidates(wl)] == [4, 3, 2, 1]
    # a uses 6 < nominal 8 and there are candidates of b, so reclaim looks for targets with which wl fits *without
    # borrowing* (preemption.md "Targets", 3rd heuristic): taking 4 leaves a at 6 + 4 = 10 > 8, taking 3 too gives
    # 4 + 4 = 8; putting 4 back would need 8 + 6 = 14 of the cohort's 12 -> both stay
    assert state.preemption_targets(wl) == [4, 3]
    # minimisation walks in reverse and drops what is not needed
    solo = {"q": ClusterQueue(name="q", quotas={"gpu": Quota(nominal=8)}, within_cluster_queue="LowerPriority")}
    w1, w2, w3 = (Workload(wid=i, queue="q", request={"gpu": g}) for i, g in ((1, 2), (2, 4), (3, 2)))
    state = KueueState(queues=solo, admitted=[w1, w2, w3])
    wl4 = Workload(wid=9, queue="q", request={"gpu": 4}, priority=5)
    assert state.preemption_targets(wl4, [w1, w2]) == [2]  # greedy takes 1 and 2; 1 is not needed


def test_oracle10_drs_share() -> None:
    queues = {
        "a": ClusterQueue(name="a", quotas={"gpu": Quota(nominal=10)}, cohort="c"),
        "b": ClusterQueue(name="b", quotas={"gpu": Quota(nominal=10)}, cohort="c", fair_weight=2.0),
    }
    state = KueueState(queues=queues, admitted=[Workload(wid=1, queue="a", request={"gpu": 15})])
    assert state.share("a") == 5 * 1000 / 20  # borrowed 5 of 20 lendable
    assert state.share("b") == 0.0
    assert state.share("b", extra=Workload(wid=2, queue="b", request={"gpu": 14})) == 4 * 1000 / 20 / 2


@settings(max_examples=200, deadline=None)
@given(
    nominal=st.tuples(st.integers(0, 20), st.integers(0, 20)),
    use_a=st.lists(st.integers(1, 10), max_size=4),
    use_b=st.lists(st.integers(1, 10), min_size=1, max_size=4),
    req=st.integers(1, 10),
    weights=st.tuples(st.sampled_from([0.5, 1.0, 2.0]), st.sampled_from([0.5, 1.0, 2.0])),
)
def test_oracle10_if_a_preempts_b_then_b_cannot_preempt_a_back(
    nominal: tuple[int, int], use_a: list[int], use_b: list[int], req: int, weights: tuple[float, float]
) -> None:
    queues = {
        n: ClusterQueue(name=n, quotas={"gpu": Quota(nominal=q)}, cohort="c", fair_weight=w)
        for n, q, w in zip("ab", nominal, weights, strict=True)
    }
    wid = iter(range(1000))
    admitted = [Workload(wid=next(wid), queue="a", request={"gpu": u}) for u in use_a]
    admitted += [Workload(wid=next(wid), queue="b", request={"gpu": u}) for u in use_b]
    state = KueueState(queues=queues, admitted=admitted)
    wl = Workload(wid=999, queue="a", request={"gpu": req})
    for target in [w for w in admitted if w.queue == "b"]:
        if not (state.fair_preemption_allowed(wl, target) and state.fits(wl, frozenset({target.wid}))):
            continue
        after = KueueState(queues=queues, admitted=[w for w in admitted if w.wid != target.wid] + [wl])
        back = Workload(wid=target.wid, queue="b", request=target.request)
        assert not after.fair_preemption_allowed(back, wl)


def test_oracle11_wait_for_pods_ready_backoff() -> None:
    assert [requeue_backoff_s(n) for n in range(1, 10)] == [60, 120, 240, 480, 960, 1920, 3600, 3600, 3600]


def test_oracle12_topology_best_fit_least_free_balanced() -> None:
    assert best_fit([3, 3, 2, 1], 7) == {0: 3, 1: 3, 3: 1}
    lfc = least_free_capacity([3, 3, 2, 1], 7)
    assert lfc == {3: 1, 2: 2, 0: 3, 1: 1}
    assert list(lfc.values()) == [1, 2, 3, 1]
    assert balanced([10, 10], 12) == {0: 6, 1: 6}
    assert best_fit([3, 3], 7) is None


def test_oracle13_kai_zone_bin_pack_rack_spread() -> None:
    assert kai_place({"A": [2, 1, 1, 1], "B": [2, 2, 2]}, 3) == ("A", {0: 2, 1: 1})


def test_kueue_policy_gang_admission_and_reclaim() -> None:
    pol = make_policy("kueue", queues=("a", "b"))
    # b borrows 12 of a's 16 -> a's 16-GPU job reclaims within the cohort
    running = [RunningJob(job_id=1, num_gpus=28, start_s=0.0, time_limit_s=1e4, queue="b")]
    job = PendingJob(job_id=2, num_gpus=16, submit_s=1.0, time_limit_s=1e4, queue="a")
    plan = pol.schedule(10.0, [job], running, CountCapacity(total_gpus=32, free_gpus=4))
    assert plan.starts == [] and plan.preempt == [1]
    # gang: a 16-GPU job never starts on 8 free GPUs, even with quota
    plan = pol.schedule(10.0, [job], [], CountCapacity(total_gpus=32, free_gpus=8))
    assert plan.starts == [] and plan.preempt == []
