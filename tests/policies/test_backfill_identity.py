"""The faster backfill cycle makes the reference cycle's decisions: same seed, byte-identical simulator JSON
(``BackfillPolicy(reference=True)`` runs the cycle as written before session 8); and the running jobs' arrays
that :class:`RunningSet` keeps match the jobs it holds after any sequence of starts and ends."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fmstack.catalog import Catalog
from fmstack.orchestration.policies import RunningJob
from fmstack.orchestration.policies.backfill import BackfillPolicy
from fmstack.orchestration.policies.base import RunningSet
from fmstack.sim.config import SimConfig
from fmstack.sim.export import to_json
from fmstack.sim.metrics import summarise
from fmstack.sim.recovery import RecoverySettings, parse_mode
from fmstack.sim.simulator import Simulator


def _json(cfg: SimConfig, catalog: Catalog, *, reference: bool) -> str:
    sim = Simulator(cfg, catalog)
    assert isinstance(sim.policy, BackfillPolicy)
    sim.policy = dataclasses.replace(sim.policy, reference=reference)
    return to_json(summarise(sim.run()))


@pytest.mark.parametrize(
    ("policy", "priority", "recovery", "seed"),
    [
        ("slurm-backfill", "fifo", "auto-resume", 1),
        ("slurm-backfill", "multifactor", "checkpoint-restart", 2),
        ("easy-backfill", "fifo", "elastic", 3),
        ("easy-backfill", "fairtree", "auto-resume", 4),
    ],
)
def test_fast_cycle_gives_the_reference_output(
    catalog: Catalog, policy: str, priority: str, recovery: str, seed: int
) -> None:
    # 64 nodes, 5 days, 1,500 jobs at load 0.95: a queue of hundreds, thousands of cycles, faults on
    cfg = SimConfig(nodes=64, days=5.0, jobs=1500, load=0.95, policy=policy, priority=priority, seed=seed,
                    spares=2, recovery=RecoverySettings(mode=parse_mode(recovery)))  # fmt: skip
    new = _json(cfg, catalog, reference=False)
    assert new == _json(cfg, catalog, reference=True)
    assert '"started": 0' not in new


@settings(max_examples=100, deadline=None)
@given(ops=st.lists(st.tuples(st.integers(0, 12), st.integers(1, 64), st.integers(0, 1000)), max_size=60))
def test_running_set_arrays_follow_starts_and_ends(ops: list[tuple[int, int, int]]) -> None:
    rs = RunningSet()
    rs.ends_and_gpus()  # kept up to date from the first call on
    for jid, gpus, t in ops:
        if gpus % 3 == 0:
            rs.pop(jid)
        else:
            rs[jid] = RunningJob(job_id=jid, num_gpus=gpus, start_s=float(t), time_limit_s=3600.0 + jid)
        ends, g = rs.ends_and_gpus()
        want = sorted((j.start_s + j.time_limit_s, j.num_gpus) for j in rs)
        assert sorted(zip(ends.tolist(), g.tolist(), strict=True)) == want
    fresh = RunningSet()
    for j in rs:
        fresh[j.job_id] = j
    assert np.array_equal(np.sort(fresh.ends_and_gpus()[0]), np.sort(rs.ends_and_gpus()[0]))
