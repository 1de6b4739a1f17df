"""Graceful stop: SIGTERM mid-run on 2 gloo ranks under torchrun checkpoints the step every rank stopped at, exits
143, and a relaunch resumes from exactly that step with the loss curve of an uninterrupted run (CPU, bitwise)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
from fmstack.workloads import ckpt_store
from fmstack.workloads.metrics import read_loss_curve
from fmstack.workloads.stop import exit_status

pytestmark = pytest.mark.torch
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
STEPS = 14
INTERVAL = 5  # without the stop step's own save a SIGTERM would lose up to 5 steps (10 with a save in flight)
ARGS = ["--steps", str(STEPS), "--ckpt-interval", str(INTERVAL), "--batch-size", "4", "--dropout", "0.1"]


def _argv(tmp: Path, run: str, port: int, *extra: str) -> list[str]:
    head = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", f"--master-port={port}"]
    files = ["--ckpt-dir", str(tmp / run / "ckpt"), "--metrics-file", str(tmp / run / "m.jsonl")]
    return [*head, "-m", "fmstack.workloads.train", *ARGS, *files, *extra]


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, env=ENV, timeout=120, check=False)


def _workers(agent_pid: int) -> list[int]:
    """torchrun's worker processes (its children), by local rank order of their pids."""
    out = subprocess.run(["pgrep", "-P", str(agent_pid)], capture_output=True, text=True, check=False).stdout
    return sorted(int(p) for p in out.split())


def _done(stdout: str) -> dict[str, object]:
    line = next(x for x in stdout.splitlines() if x.startswith("done "))
    data: dict[str, object] = json.loads(line[5:])
    return data


def test_sigterm_to_one_rank_checkpoints_the_agreed_step_and_resume_is_exact(tmp_path: Path) -> None:
    port = 29500 + os.getpid() % 500
    ref = _run(_argv(tmp_path, "ref", port))
    assert ref.returncode == 0, ref.stderr[-3000:]

    # slow steps so the signal lands mid-run; only rank 1 is signalled: rank 0 must learn it through the collective
    app = ["--app-metrics-dir", str(tmp_path / "run" / "app"), "--job-id", "stopjob"]
    proc = subprocess.Popen(
        _argv(tmp_path, "run", port + 1, "--step-sleep-s", "0.1", *app),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    metrics = tmp_path / "run" / "m.jsonl"
    deadline = time.monotonic() + 60
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 6):
        assert proc.poll() is None and time.monotonic() < deadline, "the run did not reach step 6"
        time.sleep(0.05)
    workers = _workers(proc.pid)
    assert len(workers) == 2
    os.kill(workers[1], signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert "exitcode  : 143" in err  # torchrun reports the worker's 128 + SIGTERM(15)
    assert exit_status(signal.SIGTERM) == 143
    summary = _done(out)
    stop = summary["stopped_at_step"]
    assert isinstance(stop, int) and 6 <= stop < STEPS
    assert f"stop signal=SIGTERM step={stop} ranks_signalled=1/2" in out
    # the stop step is committed and complete: both ranks' shards, DCP's metadata, the marker written last
    ckpt = str(tmp_path / "run" / "ckpt")
    assert ckpt_store.committed_steps(ckpt)[-1] == stop
    files = sorted(os.listdir(ckpt_store.step_dir(ckpt, stop)))
    assert files == [".metadata", "COMMITTED", "__0_0.distcp", "__1_0.distcp"]
    assert ckpt_store.read_marker(ckpt, stop)["world_size"] == 2
    # no step ran past the stop step on any rank (rank 0 logs the mean over both)
    assert max(read_loss_curve(metrics)) == stop
    # a clean stop ends the run: the app snapshot says finished, so no stall alert while it waits to be requeued
    snap = json.loads((tmp_path / "run" / "app" / "stopjob.json").read_text())
    assert (snap["finished"], snap["steps_total"]) == (True, stop)

    resumed = _run(_argv(tmp_path, "run", port + 2, *app))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"ckpt resumed step={stop} " in resumed.stdout
    assert _done(resumed.stdout)["resumed_from_step"] == stop
    assert f"step={stop + 1} loss=" in resumed.stdout and f"step={stop} loss=" not in resumed.stdout
    # exact float equality with the uninterrupted 2-rank run, every step 1..14
    assert read_loss_curve(metrics) == read_loss_curve(tmp_path / "ref" / "m.jsonl")
    # the resumed run's own snapshot (a new process counts from zero): its steps, finished again at the end
    snap = json.loads((tmp_path / "run" / "app" / "stopjob.json").read_text())
    assert (snap["finished"], snap["steps_total"]) == (True, STEPS - stop)
