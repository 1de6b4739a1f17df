"""Preemption in the fleet twin: a preempted job is requeued at once (no waitForPodsReady backoff, which is for
failures), and a fixed checkpoint interval holds without faults, so a preemption loses at most one interval."""

from __future__ import annotations

from fmstack.catalog import Catalog
from fmstack.observability.health import Action
from fmstack.sim.config import SimConfig
from fmstack.sim.faults import RepairTimes
from fmstack.sim.recovery import RecoverySettings
from fmstack.sim.simulator import Simulator
from fmstack.sim.state import REPAIRED
from fmstack.sim.workload import Job
from tests.sim.conftest import FlatSpeed


def _reclaim(catalog: Catalog, interval: str = "young") -> Simulator:
    # 2 nodes x 8 GPUs; kueue gives queues a and b 8 GPUs of nominal quota each. a's 16-GPU job borrows b's 8;
    # b's 8-GPU job at t = 1,000 s reclaims them: a's job is preempted, requeued, and starts again once b's ends
    jobs = [
        Job(job_id=1, submit_s=0.0, num_gpus=16, work_s=20000.0, time_limit_s=86400.0, queue="a"),
        Job(job_id=2, submit_s=1000.0, num_gpus=8, work_s=3600.0, time_limit_s=86400.0, queue="b"),
    ]
    cfg = SimConfig(nodes=2, days=1.0, policy="kueue", faults=None, recovery=RecoverySettings(interval=interval))
    return Simulator(cfg, catalog, speed=FlatSpeed(), jobs=jobs).run()


def test_preempted_job_is_requeued_without_backoff(catalog: Catalog) -> None:
    sim = _reclaim(catalog)
    a = sim.jobs[1]
    assert sim.preemptions == 1 and a.preemptions == 1 and a.fault_requeues == 0 and a.restarts == 1
    # requeued at the preemption itself (before the fix: 60 s later, the first step of Kueue's backoff)
    assert a.eligible_s == 1000.0


def test_fixed_checkpoint_interval_applies_without_faults(catalog: Catalog) -> None:
    # every 10 min (600 s) a 60 s checkpoint: in the 1,000 s before the preemption one full cycle (660 s) is
    # saved, so the loss is 340 s x 16 GPUs; without checkpoints (before the fix) all 1,000 s were lost
    sim = _reclaim(catalog, interval="10")
    a = sim.jobs[1]
    assert a.lost_gpu_s == 340.0 * 16
    # "young" with no failures: Young's optimum for an infinite MTBF is no checkpoint, so all 1,000 s are lost
    assert _reclaim(catalog).jobs[1].lost_gpu_s == 1000.0 * 16


def test_failure_requeues_keep_their_own_backoff(catalog: Catalog) -> None:
    # kueue: waitForPodsReady backoff 60 s doubling (oracle 11); others: Slurm's requeue delay 120 s
    for policy, delays in (("kueue", [60.0, 120.0, 240.0]), ("fifo", [120.0, 120.0, 120.0])):
        job = Job(job_id=1, submit_s=0.0, num_gpus=8, work_s=3600.0, time_limit_s=86400.0, queue="a")
        cfg = SimConfig(nodes=1, days=1.0, policy=policy, faults=None)
        sim = Simulator(cfg, catalog, speed=FlatSpeed(), jobs=[job])
        j = sim.jobs[1]
        j.preemptions = j.restarts = 5  # earlier preemptions do not grow the failure backoff
        got = []
        for _ in delays:
            sim._fault_requeue(j)
            got.append(j.eligible_s - sim.env.now_s)
        assert got == delays, policy
        assert j.fault_requeues == 3 and j.restarts == 8


def test_replaced_node_is_out_for_the_recovery_modes_replacement_time(catalog: Catalog) -> None:
    # one source of truth: RECOVERY_DEFAULTS' replacement_s (3,600 s); faults.py's docstring once said 4 h
    sim = Simulator(SimConfig(nodes=2, days=1.0, faults="llama3", planned=False), catalog, speed=FlatSpeed(),
                    jobs=[Job(job_id=1, submit_s=0.0, num_gpus=8, work_s=60.0, time_limit_s=600.0)])  # fmt: skip
    assert sim.times.replacement_s == 3600.0
    sim._strike(0, "host", planned=False)  # host hardware: no GPU signal, the node is replaced
    sim._on_detect((0, "host", 0))
    assert sim.fault_log[0]["action"] == "REPLACE_NODE"
    repaired = [at for at, _, kind, data in sim.env._heap if kind == REPAIRED and data[0] == 0]
    assert repaired == [3600.0]
    # RepairTimes has no replacement time of its own (it had a dead 4 h field)
    assert RepairTimes().out_s(Action.REPLACE_NODE, 3600.0) == 3600.0
    assert not hasattr(RepairTimes(), "replace_s")


def test_preemption_loss_is_not_reported_as_failure_loss(catalog: Catalog) -> None:
    # no faults at all: the one preemption loses 340 s x 16 GPUs = 5,440 GPU-s = 1.511 GPU-h (hand count above);
    # before the fix failures.lost_gpu_hours said 1.511 for a run without a single failure
    from fmstack.sim.metrics import summarise

    s = summarise(_reclaim(catalog, interval="10"))
    assert s["failures"]["events"] == 0
    assert s["failures"]["lost_gpu_hours"] == 0.0
    assert s["jobs"]["preemption_lost_gpu_hours"] == round(340 * 16 / 3600, 3) == 1.511
    assert s["gpu_hours"]["lost_work"] == 1.511  # all lost work, both causes


def test_failure_loss_is_what_the_fault_log_lost(catalog: Catalog) -> None:
    # faults and preemptions together (kueue, 64 nodes, 7 days): the failure loss is the sum over the fault log,
    # and failures + preemptions add up to all lost work
    from fmstack.sim.metrics import summarise

    cfg = SimConfig(nodes=64, days=7.0, jobs=600, policy="kueue", seed=7)
    sim = Simulator(cfg, catalog).run()
    s = summarise(sim)
    assert sim.preemptions > 0 and s["failures"]["events"] > 0
    from_log = sum(f["lost_gpu_h"] for f in sim.fault_log)
    assert abs(s["failures"]["lost_gpu_hours"] - from_log) < 1e-3
    total = s["failures"]["lost_gpu_hours"] + s["jobs"]["preemption_lost_gpu_hours"]
    assert abs(total - s["gpu_hours"]["lost_work"]) <= 2e-3  # three values rounded to 1e-3 each
