"""Auto-resume: a run killed and resumed gives exactly the loss curve of an uninterrupted run (CPU, bitwise)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
from fmstack.workloads import ckpt_store
from fmstack.workloads.metrics import read_loss_curve
from tests.workloads.conftest import REF_ARGS, prefix

pytestmark = pytest.mark.torch
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
ARGS = ["--steps", "10", "--ckpt-interval", "3", *REF_ARGS]


def _train(tmp: Path, run: str, *extra: str, torchrun: int = 0) -> subprocess.CompletedProcess[str]:
    head = [sys.executable, "-m", "fmstack.workloads.train"]
    if torchrun:
        port = str(29400 + os.getpid() % 1000)
        head = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={torchrun}", f"--master-port={port}"]
        head += ["-m", "fmstack.workloads.train"]
    argv = [*head, *ARGS, "--ckpt-dir", str(tmp / run / "ckpt"), "--metrics-file", str(tmp / run / "m.jsonl"), *extra]
    return subprocess.run(argv, capture_output=True, text=True, env=ENV, timeout=300, check=False)


def test_killed_and_resumed_equals_uninterrupted(tmp_path: Path, reference_curve: dict[int, float]) -> None:
    killed = _train(tmp_path, "run", "--crash-at-step", "7")
    assert killed.returncode == -9  # SIGKILL
    assert ckpt_store.committed_steps(str(tmp_path / "run" / "ckpt"))[-1] in (3, 6)
    resumed = _train(tmp_path, "run")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "ckpt resumed step=" in resumed.stdout
    # exact float equality with the uninterrupted run, every step 1..10
    assert read_loss_curve(tmp_path / "run" / "m.jsonl") == prefix(reference_curve, 10)
    # retention: the last 3 committed checkpoints (default keep) of steps 3, 6, 9
    assert ckpt_store.committed_steps(str(tmp_path / "run" / "ckpt")) == [3, 6, 9]


def test_fsdp2_two_ranks_killed_and_resumed(tmp_path: Path) -> None:
    ref = _train(tmp_path, "ref", "--parallel", "fsdp", torchrun=2)
    assert ref.returncode == 0, ref.stderr[-3000:]
    killed = _train(tmp_path, "run", "--parallel", "fsdp", "--crash-at-step", "8", torchrun=2)
    assert killed.returncode != 0
    resumed = _train(tmp_path, "run", "--parallel", "fsdp", torchrun=2)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert '"world_size": 2' in resumed.stdout
    assert read_loss_curve(tmp_path / "run" / "m.jsonl") == read_loss_curve(tmp_path / "ref" / "m.jsonl")
