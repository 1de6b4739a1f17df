"""One uninterrupted reference run shared by every exact-resume test of the session.

The learning rate is constant and batches depend only on (seed, step, rank), so a shorter run's loss curve is a
prefix of this one's; tests compare ``curve == {s: ref[s] for s in curve}`` and the full step range.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

REF_STEPS = 24
REF_ARGS = ["--batch-size", "4", "--dropout", "0.1"]


@pytest.fixture(scope="session")
def reference_curve(tmp_path_factory: pytest.TempPathFactory) -> dict[int, float]:
    pytest.importorskip("torch")
    from fmstack.workloads.metrics import read_loss_curve

    path = tmp_path_factory.mktemp("ref") / "ref.jsonl"
    argv = [sys.executable, "-m", "fmstack.workloads.train", "--steps", str(REF_STEPS), *REF_ARGS]
    subprocess.run(
        [*argv, "--metrics-file", str(path)],
        check=True,
        capture_output=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=300,
    )
    return read_loss_curve(path)


def prefix(curve: dict[int, float], steps: int) -> dict[int, float]:
    assert steps <= REF_STEPS
    return {s: curve[s] for s in range(1, steps + 1)}
