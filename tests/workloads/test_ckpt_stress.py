"""SIGKILL during checkpoint saves: every committed checkpoint is complete, resume takes the newest, the final loss
curve equals an uninterrupted run. The 100-kill version is benchmarks/bench_checkpoint_kill.py."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
from fmstack.workloads.metrics import read_loss_curve
from fmstack.workloads.stress import run_stress
from tests.workloads.conftest import prefix

pytestmark = pytest.mark.torch


def test_three_random_kills_during_saves(tmp_path: Path, reference_curve: dict[int, float]) -> None:
    steps, interval = 16, 2
    res = run_stress(tmp_path / "s", kills=3, steps=steps, interval=interval, seed=7)
    assert len(res.kills) == 3
    assert res.checkpoints_verified >= 3
    for k in res.kills:
        assert k.resumed_from >= k.last_committed_seen  # nothing committed is ever lost
        # one interval + the steps run while the newest save was in flight; the next save waits for it, so <= 2
        assert 0 <= k.lost_steps <= 2 * interval
    assert read_loss_curve(tmp_path / "s" / "metrics.jsonl") == prefix(reference_curve, steps)


def test_synchronous_commits_lose_at_most_one_interval(tmp_path: Path, reference_curve: dict[int, float]) -> None:
    steps, interval = 12, 2
    res = run_stress(tmp_path / "s", kills=2, steps=steps, interval=interval, seed=11, sync=True)
    assert len(res.kills) == 2
    for k in res.kills:
        assert k.resumed_from >= k.last_committed_seen
        assert 0 <= k.lost_steps <= interval
    assert read_loss_curve(tmp_path / "s" / "metrics.jsonl") == prefix(reference_curve, steps)
