"""The reference workload under torchrun marks its app-metrics snapshot finished when it ends normally, so
``fmstack exporter --app-dir`` stops serving the job (and ``FmstackTrainingStalled`` cannot fire for it); a crashed
run leaves it unfinished, served, and the stall alert fires. Before the fix nothing called ``AppMetrics.finish()``:
every job that had ended kept ``"finished": false`` and alerted as stalled 10 minutes later."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

pytestmark = pytest.mark.torch
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def _train(app_dir: Path, *extra: str) -> int:
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1",
            "-m", "fmstack.workloads.train", "--model", "tiny", "--batch-size", "2",
            "--app-metrics-dir", str(app_dir), "--job-id", "demo", *extra]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, env=ENV, timeout=300, check=False).returncode


def _scrape(app_dir: Path) -> dict[str, float]:
    """One exporter scrape (the CLI, as a node runs it): sample name with labels -> value, for the app series."""
    argv = [sys.executable, "-m", "fmstack", "exporter", "--backend", "none", "--no-efa", "--app-dir", str(app_dir),
            "--once"]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, env=ENV, timeout=120, check=True).stdout
    pairs = (line.rsplit(" ", 1) for line in out.splitlines() if line.startswith(("fmstack_train_", "fmstack_app_")))
    return {name: float(value) for name, value in pairs}


def _snapshot(app_dir: Path) -> dict[str, object]:
    data: dict[str, object] = json.loads((app_dir / "demo.json").read_text())
    return data


def test_a_run_that_ends_normally_is_finished_and_no_longer_served(tmp_path: Path) -> None:
    app = tmp_path / "app"
    assert _train(app, "--steps", "3") == 0
    snap = _snapshot(app)
    assert (snap["finished"], snap["steps_total"]) == (True, 3)
    samples = _scrape(app)
    assert samples['fmstack_app_skipped_files{reason="finished"}'] == 1
    assert not [k for k in samples if k.startswith("fmstack_train_")]  # no series left for the stall rule


def test_a_crashed_run_stays_unfinished_and_served(tmp_path: Path) -> None:
    app = tmp_path / "app"
    assert _train(app, "--steps", "5", "--crash-at-step", "2") != 0  # rank 0 SIGKILLed after step 2
    snap = _snapshot(app)
    assert (snap["finished"], snap["steps_total"]) == (False, 2)
    samples = _scrape(app)
    assert samples['fmstack_app_skipped_files{reason="finished"}'] == 0
    assert samples['fmstack_train_steps_total{job_id="demo"}'] == 2
    assert 'fmstack_train_last_step_timestamp_seconds{job_id="demo"}' in samples  # what the stall rule reads
