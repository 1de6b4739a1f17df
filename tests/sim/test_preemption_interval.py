"""Checkpoint interval with preemptions (session 17): ``--ckpt-interval-rate failures+preemptions`` gives Young's /
Daly's interval the job's interrupt rate, failures plus the preemptions per job-hour seen so far for its queue and
priority (Young 1974 and Daly 2006 hold for any Poisson interrupt that loses the work since the last checkpoint)."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

from fmstack.catalog import Catalog
from fmstack.cli.sim_cmd import simulate
from fmstack.sim.config import SimConfig
from fmstack.sim.preemption_rate import PreemptionRate
from fmstack.sim.recovery import RecoverySettings
from fmstack.sim.simulator import Simulator
from fmstack.sim.workload import Job
from tests.sim.conftest import FlatSpeed


def test_rate_is_preemptions_over_job_hours_so_far() -> None:
    r = PreemptionRate()
    key = ("a", 0.0)
    r.start(1, key, 0.0)
    r.start(2, key, 1800.0)
    r.start(2, key, 2000.0)  # already running: no second count
    r.stop(1, 3600.0)
    assert r.per_s(key, 3600.0) == 0.0  # no preemption seen yet: the failures-only interval
    r.preempted(key)
    r.stop(2, 5400.0)
    r.stop(2, 6000.0)  # not running: nothing
    # job 1 ran 3,600 s and job 2 3,600 s: one preemption in 2 job-hours
    assert r.per_s(key, 7200.0) == pytest.approx(1 / 7200.0, rel=1e-12)
    assert r.per_job_hour(7200.0) == {"a/0": 0.5}
    assert r.per_s(("b", 0.0), 7200.0) == 0.0


def _reclaim(catalog: Catalog, rate: str) -> Simulator:
    # test_preempt_requeue's case: queue a's 16-GPU job borrows b's quota and is preempted at 1,000 s by b's 8-GPU
    # job, which runs 3,600 s; a's job starts again at 4,600 s
    jobs = [
        Job(job_id=1, submit_s=0.0, num_gpus=16, work_s=20000.0, time_limit_s=86400.0, queue="a"),
        Job(job_id=2, submit_s=1000.0, num_gpus=8, work_s=3600.0, time_limit_s=86400.0, queue="b"),
    ]
    cfg = SimConfig(nodes=2, days=1.0, policy="kueue", faults=None, recovery=RecoverySettings(interval_rate=rate))
    return Simulator(cfg, catalog, speed=FlatSpeed(), jobs=jobs).run()


def test_restart_after_a_preemption_uses_the_rate_seen(catalog: Catalog) -> None:
    sim = _reclaim(catalog, "failures+preemptions")
    a, b = sim.jobs[1], sim.jobs[2]
    assert sim.preemptions == 1 and a.first_start_s == 0.0 and a.start_s >= 4600.0
    # at a's restart queue a has seen 1 preemption in 1,000 job-seconds: M = 1,000 s, no faults, C = 60 s:
    # Young's interval sqrt(2 x 60 x 1,000) = 346.41 s (above one step of 32.8 s)
    assert a.ckpt_interval_s == pytest.approx(math.sqrt(2 * 60.0 * 1000.0), rel=1e-12)
    assert b.ckpt_interval_s == math.inf  # queue b was never preempted: no interrupt, no checkpoint (as before)
    # the default counts failures only: without faults Young's interval is infinite
    assert _reclaim(catalog, "failures").jobs[1].ckpt_interval_s == math.inf


def _json(*args: str) -> dict[str, object]:
    r = CliRunner().invoke(simulate, [*args, "--json"])
    assert r.exit_code == 0, r.output
    out: dict[str, object] = json.loads(r.stdout)
    return out


def test_without_preemptions_the_option_changes_nothing() -> None:
    base = ["--nodes", "32", "--days", "7", "--jobs", "300", "--policy", "slurm-backfill"]
    a = _json(*base)
    b = _json(*base, "--ckpt-interval-rate", "failures+preemptions")
    assert a["config"].pop("checkpoint_interval_rate") == "failures"  # type: ignore[attr-defined]
    assert b["config"].pop("checkpoint_interval_rate") == "failures+preemptions"  # type: ignore[attr-defined]
    assert a == b


def test_kueue_run_reports_its_rates_and_conserves_gpu_hours() -> None:
    s = _json("--nodes", "32", "--days", "7", "--jobs", "600", "--policy", "kueue", "--ckpt-interval-rate",
              "failures+preemptions")  # fmt: skip
    rates = s["jobs"]["preemptions_per_job_hour"]  # type: ignore[index]
    assert s["jobs"]["preemptions"] > 0  # type: ignore[index]
    assert set(rates) <= {"q0/0", "q1/0", "q2/0", "q3/0"} and any(v > 0 for v in rates.values())
    g = s["gpu_hours"]  # type: ignore[index]
    parts = g["productive"] + g["checkpoint"] + g["lost_work"] + g["restart"] + g["hang_until_detected"]
    assert parts == pytest.approx(g["allocated"], abs=0.01)
