"""priority/multifactor in simulator runs: hand-calculated factors, and a light user overtaking a heavy one."""

from __future__ import annotations

import pytest

from fmstack.catalog.loader import Catalog
from fmstack.errors import InputError
from fmstack.orchestration.policies.priority import MultifactorPriority, MultifactorSettings
from fmstack.sim.config import SimConfig
from fmstack.sim.simulator import Simulator
from fmstack.sim.workload import Job
from tests.sim.conftest import FlatSpeed


def test_factors_by_hand() -> None:
    mf = MultifactorPriority(MultifactorSettings(), ["u1", "u2"], total_nodes=64)
    # 300 s of 8 GPUs for u1 only: U(u1) = 1, S = 0.5 -> F = 2^(-2) = 0.25; u2 has no usage -> F = 1
    mf.recalc(300.0, [("u1", 8, 0.0)])
    assert mf.ledger.usage["u1"] == 2400.0 and mf.fair == {"u1": 0.25, "u2": 1.0}
    # weights age 1000 (PriorityMaxAge 7 days), fair share 100000, size 1000 (1 of 64 nodes), site priority 5
    p = mf.priority(now_s=300.0, eligible_s=0.0, user="u1", num_nodes=1, site=5.0)
    assert p == pytest.approx(1000 * 300 / (7 * 86400) + 100000 * 0.25 + 1000 / 64 + 5)
    # one half-life later, with nothing running, the usage has halved (PriorityDecayHalfLife 7 days)
    mf.recalc(300.0 + 7 * 86400, [])
    assert mf.ledger.usage["u1"] == pytest.approx(1200.0)


def _run(catalog: Catalog, priority: str) -> dict[int, float]:
    jobs = [
        Job(job_id=0, submit_s=0.0, num_gpus=8, work_s=3600.0, time_limit_s=3600.0, user="u1"),
        Job(job_id=1, submit_s=10.0, num_gpus=8, work_s=600.0, time_limit_s=600.0, user="u1"),
        Job(job_id=2, submit_s=20.0, num_gpus=8, work_s=600.0, time_limit_s=600.0, user="u2"),
    ]
    cfg = SimConfig(nodes=1, days=1.0, faults=None, priority=priority, policy="slurm-backfill")
    sim = Simulator(cfg, catalog, speed=FlatSpeed(), jobs=jobs).run()
    return {j.job_id: j.first_start_s for j in sim.jobs.values()}


def test_light_user_overtakes_heavy_user(catalog: Catalog) -> None:
    # one 8-GPU node; u1's first job holds it until 3,600 s; u1's second job was submitted before u2's
    assert _run(catalog, "fifo") == {0: 0.0, 1: 3600.0, 2: 4200.0}
    # after the first PriorityCalcPeriod (300 s) u1 has all the usage: F(u1) = 0.25, F(u2) = 1, so u2's job
    # (fair-share term 100,000 vs 25,000) goes first when the node frees
    assert _run(catalog, "multifactor") == {0: 0.0, 2: 3600.0, 1: 4200.0}


def test_fair_tree_factors_by_hand() -> None:
    mf = MultifactorPriority(MultifactorSettings(), ["a", "b", "c"], total_nodes=64,
                             accounts={"a": "q0", "b": "q0", "c": "q1"})  # fmt: skip
    # 100 s x 1 GPU for a, 100 s x 3 GPUs for c: accounts q0 (S 0.5, U 0.25, LF 2) before q1 (S 0.5, U 0.75,
    # LF 0.67); in q0, b (no usage: LF infinite) before a; ranks b, a, c of 3 users -> 1, 2/3, 1/3
    mf.recalc(100.0, [("a", 1, 0.0), ("c", 3, 0.0)])
    assert mf.fair == pytest.approx({"b": 1.0, "a": 2 / 3, "c": 1 / 3})


def test_fair_tree_in_a_run(catalog: Catalog) -> None:
    # as multifactor above: u2 (no usage) ranks first once u1 has used the node
    assert _run(catalog, "fairtree") == {0: 0.0, 2: 3600.0, 1: 4200.0}


def test_bad_priority_is_one_line() -> None:
    with pytest.raises(InputError, match="allowed: fifo, multifactor, fairtree"):
        SimConfig(priority="lottery")
    with pytest.raises(InputError, match="kueue"):
        SimConfig(priority="multifactor", policy="kueue")
