"""Engine, accounting and recovery settings: hand-checked numbers."""

from __future__ import annotations

import math

import pytest

from fmstack.errors import InputError
from fmstack.perfmodel.goodput import RecoveryMode
from fmstack.sim.accounting import close_segment, wall_to_finish_s
from fmstack.sim.engine import Environment
from fmstack.sim.recovery import RecoverySettings, parse_mode
from fmstack.sim.workload import Job


def test_events_in_time_then_fifo_order_and_no_shared_state() -> None:
    a, b = Environment(1), Environment(1)
    seen: list[str] = []
    a.schedule(5.0, 0, "late")
    a.schedule(1.0, 0, "first")
    a.schedule(1.0, 0, "second")
    a.run(10.0, lambda k, d: seen.append(d))
    assert seen == ["first", "second", "late"] and a.now_s == 10.0
    assert b.now_s == 0.0 and len(b) == 0
    assert a.next_id("job") == 0 and a.next_id("job") == 1 and b.next_id("job") == 0
    assert Environment(7).rng.random() == Environment(7).rng.random()


def test_young_interval_via_shared_goodput_module() -> None:
    s = RecoverySettings(interval="young", ckpt_cost_s=60.0)
    assert s.interval_s(185.6 * 60) / 60 == pytest.approx(19.3, abs=0.05)
    assert RecoverySettings(interval="30").interval_s(1.0) == 1800.0


def test_recovery_parsing() -> None:
    assert parse_mode("auto-resume") is RecoveryMode.auto_resume
    with pytest.raises(InputError, match="allowed: checkpoint-restart, auto-resume"):
        parse_mode("pray")
    with pytest.raises(InputError, match="ckpt_interval"):
        RecoverySettings(interval="often")


def _job() -> Job:
    j = Job(job_id=1, submit_s=0.0, num_gpus=8, work_s=1000.0, time_limit_s=2000.0, cur_gpus=8)
    j.ckpt_interval_s, j.ckpt_cost_s, j.startup_s = 100.0, 10.0, 50.0
    return j


def test_wall_time_counts_startup_and_checkpoints() -> None:
    # 50 s startup + 1000 s compute + 9 checkpoints of 10 s (none after the last interval)
    assert wall_to_finish_s(_job()) == 50 + 1000 + 90


def test_failure_loses_work_since_last_checkpoint_and_gpu_hours_add_up() -> None:
    j = _job()
    close_segment(j, 50 + 2 * 110 + 40, graceful=False)  # two cycles saved, 40 s of compute lost
    assert j.done_s == 200.0
    assert j.productive_gpu_s == 200 * 8 and j.ckpt_gpu_s == 20 * 8
    assert j.lost_gpu_s == 40 * 8 and j.restart_gpu_s == 50 * 8
    assert j.alloc_gpu_s == j.productive_gpu_s + j.ckpt_gpu_s + j.lost_gpu_s + j.restart_gpu_s
    k = _job()
    close_segment(k, 50 + 2 * 110 + 40, graceful=True)  # peer recovery / planned: nothing lost
    assert k.done_s == 240.0 and k.lost_gpu_s == 0.0
    n = _job()
    n.ckpt_interval_s, n.ckpt_cost_s = math.inf, 0.0
    close_segment(n, 30.0, graceful=False)
    assert n.restart_gpu_s == 30 * 8 and n.done_s == 0.0
