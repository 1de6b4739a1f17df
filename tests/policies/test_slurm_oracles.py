"""Slurm oracles 1-5 of shared/data/scheduling-oracles.md (oracle 6, requeue, is in tests/sim)."""

from __future__ import annotations

import numpy as np
import pytest

from fmstack.errors import InputError
from fmstack.orchestration.policies import BackfillParams, CountCapacity, PendingJob, RunningJob, make_policy
from fmstack.orchestration.policies.backfill import BackfillPolicy, SlotMap
from fmstack.orchestration.policies.fairtree import Assoc, fair_tree_factors, level_fairshare
from fmstack.orchestration.policies.preemption import select_victims
from fmstack.orchestration.policies.priority import (
    FairShareLedger,
    PriorityWeights,
    age_factor,
    billing,
    decay,
    fair_share_factor,
    multifactor_priority,
)


def test_oracle1_classic_fair_share() -> None:
    assert fair_share_factor(0.0, 0.25) == 1.0
    assert fair_share_factor(0.25, 0.25) == 0.5
    assert fair_share_factor(0.5, 0.25) == 0.25
    assert fair_share_factor(0.5, 0.25, dampening=2.0) == 0.5


def test_oracle2_fair_tree_accounts_outrank() -> None:
    # account A: share 1, usage 10 ; account B: share 1, usage 30 -> LF_A = 0.5/0.25 = 2 > LF_B = 0.5/0.75
    a = Assoc(name="A", children=[Assoc(name="a1", usage=9), Assoc(name="a2", usage=1)])
    b = Assoc(name="B", children=[Assoc(name="b1", usage=0), Assoc(name="b2", usage=30)])
    root = Assoc(name="root", children=[a, b])
    assert level_fairshare(a, root.children) == pytest.approx(2.0)
    assert level_fairshare(b, root.children) == pytest.approx(2 / 3)
    f = fair_tree_factors(root)
    # b1 has no usage (LF infinite within B) but every user under A still outranks every user under B
    assert min(f["a1"], f["a2"]) > max(f["b1"], f["b2"])
    assert f["a2"] == 1.0  # a2: LF 0.5/0.1 = 5 ranks first of 4 -> 4/4
    assert sorted(f.values()) == [0.25, 0.5, 0.75, 1.0]


def test_oracle3_multifactor_defaults_and_billing() -> None:
    w = PriorityWeights()
    assert multifactor_priority(w, wait_s=1e9, fair_share=1.0, num_nodes=10, total_nodes=10) == 0.0
    assert age_factor(3.5 * 86400) == 0.5
    assert age_factor(30 * 86400) == 1.0  # saturates at PriorityMaxAge 7 days
    w2 = PriorityWeights(age=1000, fair_share=10000, job_size=100)
    p = multifactor_priority(w2, wait_s=7 * 86400, fair_share=0.5, num_nodes=5, total_nodes=10, nice=50)
    assert p == 1000 + 5000 + 50 - 50
    assert billing({"CPU": 1, "Mem": 60}, {"CPU": 1.0, "Mem": 0.25}) == 16
    assert billing({"CPU": 1, "Mem": 60}, {"CPU": 1.0, "Mem": 0.25}, max_tres=True) == 15
    assert decay(100.0, 7 * 86400) == 50.0  # PriorityDecayHalfLife 7 days
    ledger = FairShareLedger({"u1": 1, "u2": 1})
    ledger.charge("u1", 100.0)
    assert ledger.factor("u1") == 0.25 and ledger.factor("u2") == 1.0  # U = 1 with S = 0.5 -> 2^-2
    ledger.advance(7 * 86400)
    assert ledger.usage["u1"] == 50.0


def test_oracle4_backfill_defaults() -> None:
    p = BackfillParams()
    assert (p.bf_interval_s, p.bf_window_s, p.bf_resolution_s, p.bf_max_job_test, p.reserve_count) == (
        30.0,
        86400.0,
        60.0,
        500,
        0,
    )
    with pytest.raises(InputError, match="bf_window"):
        BackfillParams(bf_window_s=50 * 86400)


def _job(i: int, gpus: int, limit: float, prio: float = 0.0) -> PendingJob:
    return PendingJob(job_id=i, num_gpus=gpus, submit_s=0.0, time_limit_s=limit, priority=prio)


def test_oracle4_backfill_never_delays_a_reservation() -> None:
    # 64 GPUs; a running 48-GPU job ends at t=3600. Top job needs 64 (reserved at 3600).
    running = [RunningJob(job_id=0, num_gpus=48, start_s=0.0, time_limit_s=3600.0)]
    short = _job(2, 16, 1800.0, prio=1)  # ends before 3600: may backfill
    long = _job(3, 16, 7200.0, prio=0)  # would delay the top job: must wait
    top = _job(1, 64, 3600.0, prio=10)
    cap = CountCapacity(total_gpus=64, free_gpus=16)
    starts = BackfillPolicy().backfill(0.0, [top, short, long], running, cap)
    assert starts == [2]


def test_oracle4_conservative_vs_easy() -> None:
    # 64 GPUs; a running job holds 48 until 3600, so 16 are free. A(32) is reserved at 3600..7200 (32 left
    # free then); B(64) is reserved at 7200..10800 only by conservative backfill. C(16, 9000 s) fits now and
    # never delays A, but it would delay B: EASY (reserve_count=1) starts it, conservative does not.
    running = [RunningJob(job_id=0, num_gpus=48, start_s=0.0, time_limit_s=3600.0)]
    a, b, c = _job(1, 32, 3600.0, 3), _job(2, 64, 3600.0, 2), _job(3, 16, 9000.0, 1)
    conservative = BackfillPolicy(params=BackfillParams(reserve_count=0))
    easy = BackfillPolicy(params=BackfillParams(reserve_count=1))
    assert conservative.backfill(0.0, [a, b, c], running, CountCapacity(total_gpus=64, free_gpus=16)) == []
    assert easy.backfill(0.0, [a, b, c], running, CountCapacity(total_gpus=64, free_gpus=16)) == [3]
    # a job that would delay A starts under neither
    d = _job(4, 16, 9000.0, 1)
    big_a = _job(1, 64, 3600.0, 3)
    for pol in (conservative, easy):
        assert pol.backfill(0.0, [big_a, d], running, CountCapacity(total_gpus=64, free_gpus=16)) == []


def test_oracle4_reservations_beyond_bf_window_are_not_made() -> None:
    smap = SlotMap(np.full(4, 64, dtype=np.int64))
    smap.reserve(0, 2, 64)
    assert smap.earliest(64, 1) == 2
    assert smap.earliest(65, 1) == -1
    # with a 1-minute window C's conservative reservation (at 3600 s) is beyond it, so B's no longer blocks
    running = [RunningJob(job_id=0, num_gpus=48, start_s=0.0, time_limit_s=3600.0)]
    a, b, c = _job(1, 32, 3600.0, 3), _job(2, 64, 3600.0, 2), _job(3, 16, 9000.0, 1)
    short = BackfillPolicy(params=BackfillParams(bf_window_s=60.0))
    assert short.backfill(0.0, [a, b, c], running, CountCapacity(total_gpus=64, free_gpus=16)) == [3]


def test_oracle4_whole_nodes_are_reserved() -> None:
    # a 12-GPU job blocks 16 GPUs (two whole nodes of 8)
    pol = BackfillPolicy()
    cap = CountCapacity(total_gpus=16, free_gpus=16)
    assert pol.backfill(0.0, [_job(1, 12, 600.0, 2), _job(2, 4, 600.0, 1)], [], cap) == [1]
    assert cap.free_gpus == 0


def test_oracle4_bf_max_job_test_limits_the_cycle() -> None:
    jobs = [_job(i, 8, 600.0) for i in range(10)]
    cap = CountCapacity(total_gpus=80, free_gpus=80)
    pol = BackfillPolicy(params=BackfillParams(bf_max_job_test=3))
    assert pol.backfill(0.0, jobs, [], cap) == [0, 1, 2]


def test_oracle4_main_scheduler_blocks_at_head_of_line() -> None:
    pol = make_policy("slurm-backfill")
    cap = CountCapacity(total_gpus=16, free_gpus=16)
    plan = pol.schedule(0.0, [_job(1, 8, 60.0, 3), _job(2, 32, 60.0, 2), _job(3, 8, 60.0, 1)], [], cap)
    assert plan.starts == [1]  # job 3 would fit but strict priority order stops at job 2


def test_oracle5_preemption_victim_minimisation() -> None:
    assert select_victims(8, 0, [(1, 2), (2, 4), (3, 8)]) == [3]
    assert select_victims(8, 8, [(1, 2)]) == []
    assert select_victims(6, 0, [(1, 2), (2, 4), (3, 8)]) == [1, 2]  # 8-first would not be fewer


def test_unknown_policy_names_the_allowed() -> None:
    with pytest.raises(InputError, match="allowed: fifo, sjf, slurm-backfill"):
        make_policy("lottery")


def test_oracle4_reservation_map_starts_at_now_rounded_down_to_bf_resolution() -> None:
    # backfill.c: node_space[0].begin_time = sched_start / backfill_resolution * backfill_resolution. At now = 90 s
    # the map starts at 60 s: A (16 GPUs, 3,600 s = 60 slots) starts now and holds slots 0..59, i.e. until
    # 60 + 3,600 = 3,660 s; B (16 GPUs) is reserved at 3,660 s, not at now + 3,600 = 3,690 s. (Each case ends with
    # a small job that can start now: the cycle stops reserving once no remaining job could start.)
    pol = BackfillPolicy()
    resv: list[tuple[int, float]] = []
    jobs = [_job(1, 16, 3600.0, 3), _job(2, 16, 60.0, 2), _job(3, 8, 60.0, 1)]
    assert pol.backfill(90.0, jobs, [], CountCapacity(total_gpus=24, free_gpus=24), reservations=resv) == [1, 3]
    assert resv == [(2, 3660.0)]
    # a running job's GPUs come back at the slot boundary at or after its expected end: 3,630 s -> 3,660 s
    running = [RunningJob(job_id=0, num_gpus=16, start_s=0.0, time_limit_s=3630.0)]
    resv.clear()
    jobs = [_job(4, 16, 61.0, 2), _job(5, 8, 60.0, 1)]
    assert pol.backfill(90.0, jobs, running, CountCapacity(total_gpus=24, free_gpus=8), reservations=resv) == [5]
    assert resv == [(4, 3660.0)]
    # a job past its time limit is taken to end one slot after the map's start (at least one slot)
    late = [RunningJob(job_id=0, num_gpus=16, start_s=0.0, time_limit_s=30.0)]
    resv.clear()
    jobs = [_job(6, 16, 60.0, 2), _job(7, 8, 60.0, 1)]
    assert pol.backfill(90.0, jobs, late, CountCapacity(total_gpus=24, free_gpus=8), reservations=resv) == [7]
    assert resv == [(6, 120.0)]


def test_oracle4_map_ends_at_the_window() -> None:
    # bf_window 1 h: a job that could only start after the window's end gets no reservation ...
    pol = BackfillPolicy(params=BackfillParams(bf_window_s=3600.0))
    running = [RunningJob(job_id=0, num_gpus=16, start_s=0.0, time_limit_s=7200.0)]
    resv: list[tuple[int, float]] = []
    jobs = [_job(1, 16, 60.0, 2), _job(2, 8, 60.0, 1)]
    assert pol.backfill(0.0, jobs, running, CountCapacity(total_gpus=24, free_gpus=8), reservations=resv) == [2]
    assert resv == []
    # ... and one that starts in the map's last slot is reserved however long it runs
    running = [RunningJob(job_id=0, num_gpus=16, start_s=0.0, time_limit_s=3540.0)]
    jobs = [_job(3, 16, 86400.0, 2), _job(4, 8, 60.0, 1)]
    assert pol.backfill(0.0, jobs, running, CountCapacity(total_gpus=24, free_gpus=8), reservations=resv) == [4]
    assert resv == [(3, 3540.0)]
