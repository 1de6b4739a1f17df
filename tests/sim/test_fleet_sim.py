"""The fleet twin end to end on small fleets: oracle 6 (requeue), determinism, invariants, Llama 3 count."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fmstack.catalog import Catalog
from fmstack.errors import InputError
from fmstack.perfmodel.goodput import RecoveryMode
from fmstack.sim.config import SimConfig
from fmstack.sim.export import to_json
from fmstack.sim.metrics import summarise
from fmstack.sim.recovery import RecoverySettings
from fmstack.sim.simulator import Simulator
from fmstack.sim.workload import Job
from tests.sim.conftest import FlatSpeed


def _sim(catalog: Catalog, jobs: list[Job] | None = None, **kw: object) -> Simulator:
    cfg = SimConfig(**{"nodes": 8, "days": 2.0, "jobs": 200, **kw})  # type: ignore[arg-type]
    return Simulator(cfg, catalog, speed=FlatSpeed(), jobs=jobs).run()


def test_same_seed_same_bytes_other_seed_differs(catalog: Catalog) -> None:
    a = to_json(summarise(_sim(catalog, seed=3, spares=1)))
    b = to_json(summarise(_sim(catalog, seed=3, spares=1)))
    c = to_json(summarise(_sim(catalog, seed=4, spares=1)))
    assert a == b and a != c


def test_job_larger_than_the_fleet_is_refused(catalog: Catalog) -> None:
    with pytest.raises(InputError, match="asks 128 GPUs > fleet 64"):
        _sim(catalog, jobs=[Job(job_id=1, submit_s=0, num_gpus=128, work_s=10, time_limit_s=10)])


def test_oracle6_requeue_same_id_restart_count_and_delays(catalog: Catalog) -> None:
    """Slurm: node failure detected after SlurmdTimeout 300 s, whole allocation ends, requeued with the same id,
    eligible 120 s later, SLURM_RESTART_COUNT + 1."""
    rec = RecoverySettings(mode=RecoveryMode.checkpoint_restart, interval="1")
    job = Job(job_id=42, submit_s=0.0, num_gpus=16, work_s=20000.0, time_limit_s=86400.0)
    sim = Simulator(SimConfig(nodes=2, days=1.0, faults="llama3", planned=False, recovery=rec, spares=1), catalog,
                    speed=FlatSpeed(), jobs=[job])  # fmt: skip
    sim.env.schedule(1000.0, 99)  # a hand-placed fault at t = 1000 s on node 0
    handlers = {99: lambda: sim._strike(0, "gpu", planned=False)}
    orig = sim._next_fault
    sim._next_fault = lambda: 1e12  # type: ignore[method-assign]
    try:
        env = sim.env
        for j in sim.jobs.values():
            env.schedule(j.submit_s, 0, j.job_id)
        table = {0: sim._on_eligible, 1: sim._on_finish, 4: sim._on_detect, 5: sim._on_repaired,
                 6: sim._on_eligible, 7: sim._on_tick}  # fmt: skip
        starts: list[float] = []
        real_start = sim._start

        def spy(j: Job, alloc: list[tuple[int, int]], *, startup_s: float) -> None:
            starts.append(sim.env.now_s)
            real_start(j, alloc, startup_s=startup_s)

        sim._start = spy  # type: ignore[method-assign]
        env.run(86400.0, lambda k, d: handlers[k]() if k == 99 else table[k](d))
    finally:
        sim._next_fault = orig  # type: ignore[method-assign]
    j = sim.jobs[42]
    assert sim.times.detection_s == 300.0
    assert starts == [0.0, 1000.0 + 300.0 + 120.0]
    assert j.restarts == 1 and j.job_id == 42
    # 1000 s ran: no startup, 8 cycles of 60 s compute + 60 s checkpoint = 960 s (480 s of work saved), 40 s lost
    assert j.lost_gpu_s == pytest.approx(40 * 16) and j.hang_gpu_s == pytest.approx(300 * 16)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 10_000),
    policy=st.sampled_from(["fifo", "sjf", "slurm-backfill", "easy-backfill", "kueue"]),
    mode=st.sampled_from(list(RecoveryMode)),
    spares=st.integers(0, 2),
    multifactor=st.booleans(),
)
def test_invariants(
    catalog: Catalog, seed: int, policy: str, mode: RecoveryMode, spares: int, multifactor: bool
) -> None:
    rec = RecoverySettings(mode=mode)
    priority = "multifactor" if multifactor and policy != "kueue" else "fifo"
    cfg = SimConfig(nodes=4, days=1.0, jobs=60, seed=seed, policy=policy, recovery=rec, spares=spares,
                    sample_s=600.0, priority=priority)  # fmt: skip
    sim = Simulator(cfg, catalog, speed=FlatSpeed())
    # faults 200x the Llama 3 rate so that small runs see some
    assert sim.failures is not None
    sim.failures = type(sim.failures)(**{**{f: getattr(sim.failures, f) for f in sim.failures.__dataclass_fields__},
                                         "failures_per_node_hour": 200 * sim.failures.failures_per_node_hour})  # fmt: skip
    peak = [0]
    real_run_on = sim._run_on

    def checked_run_on(job: Job, alloc: list[tuple[int, int]], startup_s: float) -> None:
        assert sim.env.now_s >= job.submit_s, "no job starts before it is submitted"
        assert sum(g for _, g in alloc) in (job.num_gpus, job.cur_gpus) or mode == RecoveryMode.elastic
        if mode != RecoveryMode.elastic:
            assert sum(g for _, g in alloc) == job.num_gpus, "gang: all or nothing"
        real_run_on(job, alloc, startup_s)
        peak[0] = max(peak[0], sim.fleet.allocated_gpus)
        assert sim.fleet.allocated_gpus <= len(sim.fleet.state) * sim.gpn
        assert all(0 <= f <= sim.gpn for f in sim.fleet.free)

    sim._run_on = checked_run_on  # type: ignore[method-assign]
    sim.run()
    s = summarise(sim)
    for j in sim.jobs.values():
        parts = j.productive_gpu_s + j.ckpt_gpu_s + j.lost_gpu_s + j.restart_gpu_s + j.hang_gpu_s
        assert parts == pytest.approx(j.alloc_gpu_s, rel=1e-9, abs=1e-6), "GPU-hours are conserved"
    assert all(r[1] <= (cfg.nodes + spares) * 8 for r in sim.samples)
    assert 0.0 <= s["utilization"] <= (cfg.nodes + spares) / cfg.nodes
    for j in sim.jobs.values():
        assert j.done_s <= j.work_s + 1e-6
        if j.end_s >= 0:
            assert j.end_s >= j.submit_s
            # an ended job completed its work, or was killed at its time limit (Slurm TIMEOUT) short of it
            assert j.done_s == j.work_s or (j.timed_out and j.done_s < j.work_s)


@pytest.mark.slow
def test_llama3_interruptions_within_10_percent_of_466(catalog: Catalog) -> None:
    """16,384 H100 for 54 days: 419 unexpected + 47 planned interruptions (Llama 3, Table 5)."""
    counts = []
    for seed in range(1, 6):
        job = Job(job_id=0, submit_s=0.0, num_gpus=16384, work_s=1e9, time_limit_s=1e9, model="llama3.1-405b")
        sim = Simulator(SimConfig(nodes=2048, days=54, spares=16, seed=seed), catalog, speed=FlatSpeed(),
                        jobs=[job]).run()  # fmt: skip
        counts.append(sim.interruptions)
    mean = sum(counts) / len(counts)
    assert abs(mean - 466) / 466 < 0.10, counts
