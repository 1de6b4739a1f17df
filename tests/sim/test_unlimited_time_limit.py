"""A trace's ``time_limit_s`` of 0 is no limit, as Slurm's ``--time=0`` ("A time limit of zero requests that no time
limit be imposed", sbatch(1)); an empty cell or no column keeps the twin's default (twice the runtime, at least an
hour). Backfill plans an unlimited job as Slurm does: a year (``UNLIMITED_PLAN_S``).

Hand-made traces on 2 x p5.48xlarge (16 GPUs), no faults, so every start and end is computed by hand.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from fmstack.catalog import load_catalog
from fmstack.errors import InputError
from fmstack.orchestration.policies import BackfillParams, CountCapacity, PendingJob, RunningJob
from fmstack.orchestration.policies.backfill import BackfillPolicy
from fmstack.orchestration.policies.base import UNLIMITED_PLAN_S
from fmstack.sim.config import SimConfig
from fmstack.sim.metrics import summarise
from fmstack.sim.recovery import RecoverySettings
from fmstack.sim.simulator import Simulator
from fmstack.sim.workload import read_trace

H = 3600.0


def _run(trace: Path, **kw: object) -> Simulator:
    cfg = SimConfig(nodes=2, days=2.0, trace=trace, faults=None, **kw)  # type: ignore[arg-type]
    return Simulator(cfg, load_catalog()).run()


def test_zero_runs_past_twice_its_runtime_and_an_empty_cell_keeps_the_default(tmp_path: Path) -> None:
    """Both jobs need 7,200 s of compute and checkpoint every 300 s at 600 s a checkpoint (none after the last):
    7,200 + 23 x 600 = 21,000 s of wall time, past twice the runtime (14,400 s). Job 1 (limit 0: none) completes
    at 21,000 s; job 2 (empty cell: the default 14,400 s) is killed at 14,400 s."""
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_s,num_gpus,duration_s,time_limit_s\n1,0,8,7200,0\n2,0,8,7200,\n")
    sim = _run(trace, recovery=RecoverySettings(interval="5", ckpt_cost_s=600.0))
    unlimited, default = sim.jobs[1], sim.jobs[2]
    assert unlimited.time_limit_s == math.inf and default.time_limit_s == 2 * 7200.0
    assert (unlimited.timed_out, unlimited.end_s) == (False, 7200.0 + 23 * 600.0)
    assert unlimited.end_s > 2 * unlimited.work_s
    assert (default.timed_out, default.end_s) == (True, 14400.0)
    s = summarise(sim)
    assert (s["jobs"]["completed"], s["jobs"]["timed_out"]) == (1, 1)


def test_the_trace_reader_keeps_absent_and_zero_apart(tmp_path: Path) -> None:
    with_column = tmp_path / "a.csv"
    with_column.write_text("job_id,submit_s,num_gpus,duration_s,time_limit_s\n1,0,8,60,0\n2,0,8,60,\n3,0,8,60,90\n")
    limits = [j.time_limit_s for j in read_trace(with_column, fleet_gpus=16, gpus_per_node=8)]
    assert limits == [math.inf, 0.0, 90.0]  # 0.0: not given, the simulator's default follows
    without = tmp_path / "b.csv"
    without.write_text("job_id,submit_s,num_gpus,duration_s\n1,0,8,60\n")
    assert read_trace(without, fleet_gpus=16, gpus_per_node=8)[0].time_limit_s == 0.0
    negative = tmp_path / "c.csv"
    negative.write_text("job_id,submit_s,num_gpus,duration_s,time_limit_s\n1,0,8,60,-1\n")
    with pytest.raises(InputError, match=r"line 2: time_limit_s='-1' must be a finite number >= 0"):
        read_trace(negative, fleet_gpus=16, gpus_per_node=8)


def test_backfill_never_lets_an_unlimited_job_delay_the_head(tmp_path: Path) -> None:
    """Job 1 holds node A to 10 h (limit 10 h). The head, job 100 (16 GPUs, no limit, 1 h of work), is reserved
    from 10 h. Job 11 (8 GPUs, no limit) would hold node B for a year: not backfilled; job 10 (8 GPUs, 5 h limit)
    ends before 10 h: backfilled on node B at the first backfill cycle (150 s). Job 100 starts at 10 h and, with no
    limit, runs its hour; job 11 starts after it (11 h). Before session 16 a 0 meant 2 h, and job 11 took node B."""
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_s,num_gpus,duration_s,time_limit_s\n"
                     f"1,0,8,{10 * H:.0f},{10 * H:.0f}\n100,60,16,{H:.0f},0\n11,120,8,{H:.0f},0\n"
                     f"10,130,8,{4 * H:.0f},{5 * H:.0f}\n")  # fmt: skip
    for policy in ("slurm-backfill", "easy-backfill"):
        sim = _run(trace, policy=policy)
        head, unlimited, short = sim.jobs[100], sim.jobs[11], sim.jobs[10]
        assert head.first_start_s == 10 * H and head.end_s == 11 * H and not head.timed_out
        assert short.first_start_s == 150.0
        assert unlimited.first_start_s == 11 * H and unlimited.end_s == 12 * H
        assert summarise(sim)["warnings"] == []


def _pending(i: int, gpus: int, limit: float, prio: float) -> PendingJob:
    return PendingJob(job_id=i, num_gpus=gpus, submit_s=0.0, time_limit_s=limit, priority=prio)


def test_backfill_plans_an_unlimited_job_as_a_year() -> None:
    """The policy on its own, given inf (as a caller other than the twin might): a running job without a limit
    frees its 48 GPUs a year on, past the 1-day window, so the 64-GPU head gets no reservation and a 16-GPU job of
    any limit backfills (Slurm: nothing can be reserved behind it); a pending job without a limit holds every slot
    of the window, so it never backfills ahead of a reservation. Before session 16 inf cast to int64 released the
    GPUs in slot 1, and the head was reserved there."""
    forever = [RunningJob(job_id=0, num_gpus=48, start_s=0.0, time_limit_s=math.inf)]
    head, small = _pending(1, 64, 3600.0, 10), _pending(2, 16, 9000.0, 1)
    for reference in (False, True):
        pol = BackfillPolicy(reference=reference)
        reservations: list[tuple[int, float]] = []
        cap = CountCapacity(total_gpus=64, free_gpus=16)
        assert pol.backfill(0.0, [head, small], forever, cap, reservations=reservations) == [2]
        assert reservations == []
        # a running job with a 1-hour limit: the head is reserved at 3,600 s; a pending unlimited job would delay it
        hour = [RunningJob(job_id=0, num_gpus=48, start_s=0.0, time_limit_s=3600.0)]
        cap = CountCapacity(total_gpus=64, free_gpus=16)
        assert pol.backfill(0.0, [head, _pending(3, 16, math.inf, 1)], hour, cap, reservations=reservations) == []
        assert reservations == [(1, 3600.0)]
    assert UNLIMITED_PLAN_S == 365 * 86400.0  # Slurm's YEAR_SECONDS
    assert BackfillParams().bf_window_s < UNLIMITED_PLAN_S


def test_json_stays_valid_with_an_unlimited_job_starved_past_the_window(tmp_path: Path) -> None:
    """A job without a limit on one node: the 16-GPU job's earliest start is a year on, beyond the window; the
    warning says so without printing inf, and --json stays strict JSON (no Infinity)."""
    trace = tmp_path / "t.csv"
    trace.write_text(f"job_id,submit_s,num_gpus,duration_s,time_limit_s\n1,0,8,{30 * H:.0f},0\n2,60,16,{H:.0f},\n")
    proc = subprocess.run([sys.executable, "-m", "fmstack", "simulate", "--trace", str(trace), "--nodes", "2",
                           "--days", "1", "--faults", "none", "--json"], capture_output=True, text=True, check=True)  # fmt: skip
    data = json.loads(proc.stdout, parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))
    (warning,) = data["warnings"]
    assert "a job has no time limit, planned as a year" in warning and "inf" not in warning
    assert warning.endswith("compare with --bf-window 43200")
