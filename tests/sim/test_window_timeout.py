"""Backfill window (bf_window), time-limit kills (TIMEOUT) and checkpointless rollback of the fleet twin.

Hand-made traces on 2 x p5.48xlarge (16 GPUs), no faults, so every start and end time is computed by hand.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fmstack.catalog import load_catalog
from fmstack.perfmodel.goodput import RecoveryMode
from fmstack.sim.accounting import close_segment
from fmstack.sim.config import SimConfig
from fmstack.sim.metrics import summarise
from fmstack.sim.recovery import RecoverySettings
from fmstack.sim.simulator import Simulator
from fmstack.sim.speed import PerfModelSpeed, step_tokens
from fmstack.sim.workload import Job

H = 3600.0
LIMIT_S = 40 * H
"""Every job's time limit: 2,400 minutes, above Slurm's default bf_window of 1,440."""


def _starvation_trace(path: Path) -> Path:
    """Two one-node jobs from t=0 (end 10 h and 15 h, limit 40 h); the whole-fleet job A (id 100) at 60 s; a
    stream of 18 one-node jobs of 10 h (limit 40 h) from 120 s on, enough to fill both nodes to the 4-day horizon. With a 1-day window A's earliest start (40 h, the
    running jobs' expected ends) is beyond the window: no reservation, and each freed node goes to a small job, so
    the fleet is never free at once. With a window >= 40 h A reserves [40 h, 80 h): no small job can start (it
    would hold its node to start + 40 h), so node 1 stays idle from 10 h and A starts when node 2 frees at 15 h."""
    rows = ["job_id,submit_s,num_gpus,duration_s,time_limit_s", f"1,0,8,{10 * H:.0f},{LIMIT_S:.0f}",
            f"2,0,8,{15 * H:.0f},{LIMIT_S:.0f}", f"100,60,16,{H:.0f},{LIMIT_S:.0f}"]  # fmt: skip
    rows += [f"{10 + k},{120 + 60 * k},8,{10 * H:.0f},{LIMIT_S:.0f}" for k in range(18)]
    path.write_text("\n".join(rows) + "\n")
    return path


def _run(trace: Path, **kw: object) -> Simulator:
    cfg = SimConfig(nodes=2, days=4.0, trace=trace, faults=None, **kw)  # type: ignore[arg-type]
    return Simulator(cfg, load_catalog()).run()


@pytest.mark.parametrize("policy", ["slurm-backfill", "easy-backfill"])
def test_whole_fleet_job_starves_under_a_short_window_and_starts_with_a_long_one(policy: str, tmp_path: Path) -> None:
    trace = _starvation_trace(tmp_path / "t.csv")
    short = _run(trace, policy=policy)
    assert short.jobs[100].first_start_s < 0
    (warning,) = summarise(short)["warnings"]
    assert "1 job never started and at the end of the run could get no reservation" in warning
    assert warning.endswith("compare with --bf-window 2400")
    long = _run(trace, policy=policy, bf_window_min=2400)
    assert long.jobs[100].first_start_s == 15 * H
    assert long.jobs[100].end_s == 16 * H
    assert summarise(long)["warnings"] == []


def test_cli_warns_on_stderr_and_keeps_stdout_json(tmp_path: Path) -> None:
    trace = _starvation_trace(tmp_path / "t.csv")
    base = [sys.executable, "-m", "fmstack", "simulate", "--nodes", "2", "--days", "4", "--faults", "none",
            "--trace", str(trace), "--json"]  # fmt: skip
    proc = subprocess.run(base, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.startswith("fmstack: warning: slurm-backfill: 1 job never started and at the end")
    assert '"bf_window_min": 1440' in proc.stdout
    proc = subprocess.run([*base, "--bf-window", "2400"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


def test_kueue_skips_the_inadmissible_whole_fleet_job(tmp_path: Path) -> None:
    """Kueue's BestEffortFIFO (its default queueing strategy) lets newer workloads past a head that does not fit
    and has no reservation, so A waits as under a short window; documented, no warning (no bf_window to raise)."""
    sim = _run(_starvation_trace(tmp_path / "t.csv"), policy="kueue")
    assert sim.jobs[100].first_start_s < 0
    assert summarise(sim)["warnings"] == []


def test_job_past_its_time_limit_is_killed_and_loses_work_since_its_checkpoint(tmp_path: Path) -> None:
    """Limit 600 s, duration 7,200 s, checkpoints every 5 min costing 60 s, 8 GPUs: at 600 s one cycle (300 s
    compute + 60 s write) is saved and the 240 s since are lost; the 1-hour job with a 2-hour limit completes."""
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_s,num_gpus,duration_s,time_limit_s\n1,0,8,7200,600\n2,0,8,3600,7200\n")
    sim = _run(trace, recovery=RecoverySettings(interval="5", ckpt_cost_s=60.0))
    j = sim.jobs[1]
    assert (j.timed_out, j.end_s, j.alloc_gpu_s) == (True, 600.0, 600.0 * 8)
    assert (j.productive_gpu_s, j.ckpt_gpu_s, j.lost_gpu_s) == (300.0 * 8, 60.0 * 8, 240.0 * 8)
    s = summarise(sim)
    assert s["jobs"]["timed_out"] == 1 and s["jobs"]["completed"] == 1
    assert s["jobs"]["timeout_lost_gpu_hours"] == round(240.0 * 8 / H, 3)
    assert s["failures"]["lost_gpu_hours"] == 0.0
    # job 2: 3,600 s of compute plus 11 checkpoints of 60 s (one per 300 s, none after the last) = 4,260 s < 7,200 s
    assert not sim.jobs[2].timed_out and sim.jobs[2].end_s == 3600.0 + 11 * 60.0


def test_trace_row_without_a_time_limit_gets_twice_its_runtime(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_s,num_gpus,duration_s\n1,0,8,7200\n2,0,8,60\n")
    sim = _run(trace)
    assert (sim.jobs[1].time_limit_s, sim.jobs[2].time_limit_s) == (14400.0, 3600.0)


def _job(**kw: float) -> Job:
    j = Job(job_id=1, submit_s=0.0, num_gpus=8, work_s=1e9, time_limit_s=1e9)
    j.cur_gpus, j.ckpt_interval_s, j.ckpt_cost_s = 8, 300.0, 60.0
    for k, v in kw.items():
        setattr(j, k, v)
    return j


def test_checkpointless_loses_the_step_in_progress() -> None:
    """1,000 s after the start with T = 300 s, C = 60 s: 2 cycles saved (720 s), 280 s of compute since. A
    checkpoint-based restart loses all 280 s; peer recovery with 30 s steps loses 280 mod 30 = 10 s (the step in
    progress, <= one step, fmstack.perfmodel.goodput's checkpointless rollback); planned maintenance loses none."""
    for graceful, step, lost in ((False, 0.0, 280.0), (True, 30.0, 10.0), (True, 0.0, 0.0)):
        j = _job()
        close_segment(j, 1000.0, graceful=graceful, rollback_step_s=step)
        assert j.lost_gpu_s == pytest.approx(lost * 8)
        assert j.productive_gpu_s == pytest.approx((600.0 + 280.0 - lost) * 8)
        assert j.alloc_gpu_s == j.productive_gpu_s + j.ckpt_gpu_s + j.lost_gpu_s + j.restart_gpu_s


def test_checkpointless_with_spares_loses_at_most_one_step_per_interruption() -> None:
    cfg = SimConfig(spares=4, recovery=RecoverySettings(mode=RecoveryMode.checkpointless))  # 64 nodes, 7 days
    sim = Simulator(cfg, load_catalog()).run()
    speed = PerfModelSpeed(load_catalog(), cfg.instance)
    s = summarise(sim)
    assert s["failures"]["job_interruptions"] > 0 and s["gpu_hours"]["lost_work"] > 0
    for f in sim.fault_log:  # a job runs at >= 0.9 of its packed speed (PerfModelSpeed.split_factor)
        bound = sum(sim.jobs[j].num_gpus * step_tokens(sim.jobs[j].num_gpus, 8)
                    / (0.9 * speed.tokens_per_s(sim.jobs[j].model, sim.jobs[j].num_gpus, True)) for j in f["jobs"])  # fmt: skip
        assert f["lost_gpu_h"] * 3600.0 <= bound * (1 + 1e-9)


def test_the_table_and_html_show_time_outs(tmp_path: Path) -> None:
    """Review, 2026-11-24: a run whose jobs hit their limits read '1 of 2 completed' with no reason."""
    trace = tmp_path / "to.csv"
    trace.write_text("job_id,submit_s,num_gpus,duration_s,time_limit_s\n1,0,8,7200,600\n2,0,8,600,1200\n")
    html = tmp_path / "r.html"
    proc = subprocess.run([sys.executable, "-m", "fmstack", "simulate", "--trace", str(trace), "--nodes", "2", "--days",
                           "1", "--faults", "none", "--html", str(html)], capture_output=True, text=True, check=True)  # fmt: skip
    header = next(line for line in proc.stdout.splitlines() if "utilization" in line)
    assert "timed out" in header
    assert "jobs completed 1 of 2 (1 job killed at the time limit)" in html.read_text()


def test_the_warning_counts_whole_free_nodes_for_a_multi_node_job(tmp_path: Path) -> None:
    """Review, 2026-11-24: 17 GPUs free over 4 partly used nodes are one whole node, not two; the 16-GPU job's
    earliest start (100 h, when the long jobs' limits end) lies beyond the 24 h window, so it is named."""
    trace = tmp_path / "frag.csv"
    trace.write_text("job_id,submit_s,num_gpus,duration_s,time_limit_s\n1,0,5,3000,3600\n2,0,5,300000,360000\n"
                     "3,0,5,300000,360000\n4,0,5,300000,360000\n5,60,16,3600,7200\n")  # fmt: skip
    proc = subprocess.run([sys.executable, "-m", "fmstack", "simulate", "--trace", str(trace), "--nodes", "4", "--days",
                           "3", "--faults", "none", "--json"], capture_output=True, text=True, check=True)  # fmt: skip
    (warning,) = json.loads(proc.stdout)["warnings"]
    assert warning.startswith("slurm-backfill: 1 job never started")
