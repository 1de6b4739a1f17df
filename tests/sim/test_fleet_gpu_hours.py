"""Where the fleet's GPU-hours go: allocated + idle + down + spare standby = (pool + spares) x GPUs per node x
hours, metered from the fleet's state between events, and allocated as metered = the jobs' own sum."""

from __future__ import annotations

from typing import Any

from fmstack.catalog import Catalog
from fmstack.sim.config import SimConfig
from fmstack.sim.metrics import summarise
from fmstack.sim.simulator import Simulator
from fmstack.sim.workload import Job
from tests.sim.conftest import FlatSpeed


class _OneHostFailure(Simulator):
    """One host failure at t = 3,600 s on the node of job 1, and no other fault."""

    def _next_fault(self) -> float:
        return 3600.0

    def _on_fault(self, _: Any) -> None:
        self._strike(self.jobs[1].alloc[0][0], "host", planned=False)


def test_gpu_hours_of_a_replaced_node_by_hand(catalog: Catalog) -> None:
    # 2 pool nodes + 1 spare, 8 GPUs each, one day; job 1 (8 GPUs, 2 h) starts at 0 on node a. At 1 h a host
    # failure: a is DOWN, the job holds it (hang) until detection D later; then a is replaced (out 3,600 s, held
    # by no job: down = 8 GPU x 1 h), the spare joins the pool and the job resumes on it; at repair node a goes
    # to standby. Spare standby: the spare until 1 h + D, node a from 2 h + D: 8 x (24 h - 1 h) = 184 GPU-h.
    # Allocated: 8 GPUs from 0 to the job's end E (hang included); idle: node b all day (192 GPU-h) + the
    # spare's 8 GPUs from E to the end of the day.
    cfg = SimConfig(nodes=2, days=1.0, spares=1, faults="llama3", planned=False)
    sim = _OneHostFailure(cfg, catalog, speed=FlatSpeed(),
                          jobs=[Job(job_id=1, submit_s=0.0, num_gpus=8, work_s=7200.0, time_limit_s=86400.0)])  # fmt: skip
    g = summarise(sim.run())["gpu_hours"]
    assert [f["action"] for f in sim.fault_log] == ["REPLACE_NODE"]
    end_s = sim.jobs[1].end_s
    assert 7200.0 < end_s < 86400.0
    assert g["down"] == 8.0
    assert g["spare_standby"] == 184.0
    assert g["spare_capacity"] == 192.0
    assert g["allocated"] == round(8 * end_s / 3600, 3)
    assert g["idle"] == round(192 + 8 * (86400 - end_s) / 3600, 3)


def test_gpu_hours_add_up_in_a_faulty_run(catalog: Catalog) -> None:
    # 32 nodes + 2 spares, 20 days, Llama 3 failure rates: every GPU-hour is in exactly one of the four
    for recovery in ("auto-resume", "checkpoint-restart", "elastic"):
        from fmstack.sim.recovery import RecoverySettings, parse_mode

        cfg = SimConfig(nodes=32, days=20.0, jobs=500, spares=2, seed=5,
                        recovery=RecoverySettings(mode=parse_mode(recovery)))  # fmt: skip
        sim = Simulator(cfg, catalog, speed=FlatSpeed()).run()
        g = summarise(sim)["gpu_hours"]
        assert sim.fault_log and g["down"] > 0
        assert abs(sim.fleet_gpu_s[0] / 3600 - g["allocated"]) < 1e-3  # metered = the jobs' sum
        total = g["allocated"] + g["idle"] + g["down"] + g["spare_standby"]
        assert abs(total - (g["capacity"] + g["spare_capacity"])) < 0.01, (recovery, g)
        assert min(g["idle"], g["down"], g["spare_standby"]) >= 0


def test_jobs_pending_at_the_horizon_count_in_wait_incl_pending(catalog: Catalog) -> None:
    # one node, fifo, no faults: job 1 holds the node all day; job 2 (submitted at 1 h) never starts. "wait" sees
    # job 1 alone (0 s); "wait_incl_pending" also job 2's 24 h - 1 h = 82,800 s so far: p50 = mean = 41,400 s,
    # p90 = 0.9 x 82,800, p99 = 0.99 x 82,800 (numpy linear percentiles of [0, 82,800])
    jobs = [
        Job(job_id=1, submit_s=0.0, num_gpus=8, work_s=2 * 86400.0, time_limit_s=3 * 86400.0),
        Job(job_id=2, submit_s=3600.0, num_gpus=8, work_s=600.0, time_limit_s=3600.0),
    ]
    cfg = SimConfig(nodes=1, days=1.0, policy="fifo", faults=None)
    s = summarise(Simulator(cfg, catalog, speed=FlatSpeed(), jobs=jobs).run())
    c = s["by_size_class"]["1-8"]
    assert c["wait"]["count"] == 1 and c["wait"]["mean_s"] == 0.0
    assert c["wait_incl_pending"] == {"count": 2, "p50_s": 41400.0, "p90_s": 74520.0, "p99_s": 81972.0,
                                      "mean_s": 41400.0}  # fmt: skip
    assert s["jobs"]["pending_at_end"] == 1
