"""The cross-pass placement-failure cache (``_Capacity.no_room``) changes no decision: runs with it disabled start,
end and place every job exactly as runs with it."""

from __future__ import annotations

import pytest

from fmstack.catalog import Catalog
from fmstack.orchestration.policies import PendingJob
from fmstack.sim import state
from fmstack.sim.config import SimConfig
from fmstack.sim.export import to_json
from fmstack.sim.metrics import summarise
from fmstack.sim.simulator import Simulator
from tests.sim.conftest import FlatSpeed


class _Uncached(state._Capacity):
    """Asks the fleet every time (the behaviour the cache must reproduce)."""

    def try_start(self, job: PendingJob) -> bool:
        alloc = self.fleet.place(job.num_gpus)
        if alloc is None:
            return False
        self.allocs[job.job_id] = alloc
        return True


def _run(catalog: Catalog, policy: str, priority: str) -> tuple[str, list[tuple[int, float, float, str, list[int]]]]:
    cfg = SimConfig(nodes=8, days=4.0, jobs=1000, policy=policy, priority=priority, spares=1, seed=5, load=0.9)
    sim = Simulator(cfg, catalog, speed=FlatSpeed()).run()
    return to_json(summarise(sim)), sim.segment_log


@pytest.mark.parametrize(
    ("policy", "priority"),
    [("fifo", "fifo"), ("slurm-backfill", "fifo"), ("easy-backfill", "multifactor"), ("kueue", "fifo")],
)
def test_no_room_cache_changes_no_decision(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch, policy: str, priority: str
) -> None:
    cached = _run(catalog, policy, priority)
    monkeypatch.setattr(state, "_Capacity", _Uncached)
    uncached = _run(catalog, policy, priority)
    assert len(cached[1]) > 50  # enough segments (starts, fault ends, preemptions) to exercise it
    assert cached == uncached
