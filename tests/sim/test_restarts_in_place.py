"""``jobs.restarts`` counts requeues only; ``jobs.restarts_in_place`` the restarts without one (auto-resume on a
spare, an elastic job dropping a node). One host failure on the job's node, counted by hand."""

from __future__ import annotations

from typing import Any

import pytest

from fmstack.catalog import Catalog
from fmstack.sim.config import SimConfig
from fmstack.sim.metrics import summarise
from fmstack.sim.recovery import RecoverySettings, parse_mode
from fmstack.sim.simulator import Simulator
from fmstack.sim.workload import Job
from tests.sim.conftest import FlatSpeed


class _OneHostFailure(Simulator):
    """One host failure at t = 3,600 s on the first node of job 1, and no other fault."""

    def _next_fault(self) -> float:
        return 3600.0 if not self.fault_log else 1e12

    def _on_fault(self, _: Any) -> None:
        self._strike(self.jobs[1].alloc[0][0], "host", planned=False)


@pytest.mark.parametrize(
    ("recovery", "gpus", "requeues", "in_place"),
    [
        # the failed node is replaced, the spare joins the pool, the job restarts on it without a requeue
        ("auto-resume", 8, 0, 1),
        # Slurm: the allocation ends and the job is requeued with the same id (SLURM_RESTART_COUNT 1)
        ("checkpoint-restart", 8, 1, 0),
        # a 2-node job drops the failed node and goes on with one node: no requeue
        ("elastic", 16, 0, 1),
    ],
)
def test_one_failure_is_one_restart_of_the_right_kind(
    catalog: Catalog, recovery: str, gpus: int, requeues: int, in_place: int
) -> None:
    cfg = SimConfig(nodes=2, days=1.0, spares=1, faults="llama3", planned=False,
                    recovery=RecoverySettings(mode=parse_mode(recovery)))  # fmt: skip
    job = Job(job_id=1, submit_s=0.0, num_gpus=gpus, work_s=7200.0, time_limit_s=86400.0)
    sim = _OneHostFailure(cfg, catalog, speed=FlatSpeed(), jobs=[job]).run()
    s = summarise(sim)
    assert len(sim.fault_log) == 1 and s["failures"]["job_interruptions"] == 1
    assert s["jobs"]["restarts"] == requeues
    assert s["jobs"]["restarts_in_place"] == in_place
    assert s["jobs"]["completed"] == 1


def _two_nodes(recovery: str) -> tuple[SimConfig, int]:
    """Two nodes and a spare under ``recovery``, and the job size that recovers in place there (elastic: two nodes,
    so one can drop)."""
    cfg = SimConfig(nodes=2, days=1.0, spares=1, faults="llama3", planned=False,
                    recovery=RecoverySettings(mode=parse_mode(recovery)))  # fmt: skip
    return cfg, 16 if recovery == "elastic" else 8


@pytest.mark.parametrize("recovery", ["auto-resume", "elastic"])
def test_a_restart_in_place_keeps_the_allocations_time_limit(catalog: Catalog, recovery: str) -> None:
    """Slurm counts a time limit from the allocation's start; auto-resume and an elastic shrink re-run the step
    inside the same job, so the limit does not restart with them (review, 2026-11-24). 8,800 s of work under a
    9,000 s limit would finish without the failure; after a restart at 3,600 s it cannot, so it times out at 9,000 s
    (a fresh limit would have let it finish by 12,600 s). A requeue (checkpoint-restart) gets a new allocation and
    a new limit."""
    cfg, gpus = _two_nodes(recovery)
    job = Job(job_id=1, submit_s=0.0, num_gpus=gpus, work_s=8800.0, time_limit_s=9000.0)
    sim = _OneHostFailure(cfg, catalog, speed=FlatSpeed(), jobs=[job]).run()
    s = summarise(sim)
    assert s["jobs"]["restarts_in_place"] == 1
    assert s["jobs"]["timed_out"] == 1 and s["jobs"]["completed"] == 0
    assert sim.jobs[1].deadline_s == 9000.0
    # a requeue gets a new allocation and its own limit: its deadline counts from the new start
    requeued = Job(job_id=1, submit_s=0.0, num_gpus=8, work_s=8800.0, time_limit_s=9000.0)
    cfg_rq, _ = _two_nodes("checkpoint-restart")
    again = _OneHostFailure(cfg_rq, catalog, speed=FlatSpeed(), jobs=[requeued]).run().jobs[1]
    assert again.restarts == 1 and again.deadline_s > 3600.0 + 9000.0  # started again after the failure at 3,600 s


class _LateHostFailure(_OneHostFailure):
    """The same host failure at t = 8,950 s, 50 s before a 9,000 s limit."""

    def _next_fault(self) -> float:
        return 8950.0 if not self.fault_log else 1e12


@pytest.mark.parametrize("recovery", ["auto-resume", "elastic", "checkpoint-restart"])
def test_a_job_that_hangs_past_its_limit_ends_at_the_detection(catalog: Catalog, recovery: str) -> None:
    """Review, 2026-11-24: the strike cancelled the job's TIMEOUT and the detection restarted it in place on a spare
    after its limit. Slurm kills it at the limit, so nothing restarts it and no spare is taken; the simulator ends it
    at the detection, at most the detection time late."""
    cfg, gpus = _two_nodes(recovery)
    job = Job(job_id=1, submit_s=0.0, num_gpus=gpus, work_s=20000.0, time_limit_s=9000.0)
    sim = _LateHostFailure(cfg, catalog, speed=FlatSpeed(), jobs=[job]).run()
    s = summarise(sim)
    assert s["jobs"]["timed_out"] == 1 and s["jobs"]["restarts_in_place"] == 0 and s["jobs"]["restarts"] == 0
    assert sim.jobs[1].end_s == 8950.0 + sim.times.detection_s
    gh = s["gpu_hours"]
    assert gh["allocated"] == pytest.approx(gh["lost_work"] + gh["hang_until_detected"], abs=1e-3)
