"""``fmstack cancel slurm:ID`` with stand-ins for scontrol and scancel on PATH (no Slurm daemons): an array with
tasks running and pending. slurmctld delivers no signal but SIGKILL to a pending job, so the graceful cancel's
``scancel --batch --signal=USR2`` alone left the pending tasks queued to start later; they are cancelled first.
Lines are shaped as ``scontrol show job -o`` prints them, trimmed to the keys fmstack reads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fmstack.orchestration.launchers.slurm import GRACEFUL_CANCEL_MARK

RUNNING_AND_PENDING = (
    "JobId=13 ArrayJobId=12 ArrayTaskId=0 JobName=arr JobState=RUNNING Reason=None Restarts=0 ExitCode=0:0\n"
    "JobId=12 ArrayJobId=12 ArrayTaskId=1-3 JobName=arr JobState=PENDING Reason=JobArrayTaskLimit Restarts=0 "
    "ExitCode=0:0\n"
)
RUNNING_ONLY = (
    "JobId=13 ArrayJobId=12 ArrayTaskId=0 JobName=arr JobState=RUNNING Reason=None Restarts=0 ExitCode=0:0\n"
    "JobId=14 ArrayJobId=12 ArrayTaskId=1 JobName=arr JobState=RUNNING Reason=None Restarts=0 ExitCode=0:0\n"
)
SCRIPT = f"#!/bin/bash\n{GRACEFUL_CANCEL_MARK}\n"


def _cancel(tmp_path: Path, show_job: str, *flags: str) -> tuple[str, list[str]]:
    """Run the CLI with scontrol answering ``show_job`` and the batch script, scancel recording its arguments;
    returns stdout and the scancel calls."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    (tmp_path / "show_job").write_text(show_job)
    (tmp_path / "script").write_text(SCRIPT)
    (bin_dir / "scontrol").write_text(
        '#!/bin/bash\nif [ "$1 $2" = "show job" ]; then cat "$FAKE/show_job"; '
        'elif [ "$1" = write ]; then cat "$FAKE/script"; else exit 1; fi\n'
    )
    (bin_dir / "scancel").write_text('#!/bin/bash\necho "scancel $*" >> "$FAKE/calls.log"\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "FAKE": str(tmp_path),
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "fmstack", "cancel", "slurm:12", *flags],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, log.read_text().splitlines() if log.exists() else []


def test_pending_array_tasks_are_cancelled_before_the_running_ones_checkpoint(tmp_path: Path) -> None:
    out, calls = _cancel(tmp_path, RUNNING_AND_PENDING)
    # before the fix: only the USR2, which slurmctld does not deliver to the pending tasks 1-3: they ran later
    assert calls == ["scancel --state=PENDING 12", "scancel --batch --signal=USR2 12"]
    assert out.strip() == (
        "slurm:12 cancel requested; pending array tasks 1-3 removed from the queue; the running tasks checkpoint "
        "the step they are at, then end CANCELLED"
    )


def test_an_array_with_no_pending_task_gets_the_signal_only(tmp_path: Path) -> None:
    out, calls = _cancel(tmp_path, RUNNING_ONLY)
    assert calls == ["scancel --batch --signal=USR2 12"]
    assert out.strip() == "slurm:12 cancel requested; the job checkpoints the step it is at, then ends CANCELLED"


@pytest.mark.parametrize("state", ["REQUEUE_HOLD", "REQUEUED"])
def test_requeued_tasks_count_as_pending(tmp_path: Path, state: str) -> None:
    # their base state is PENDING (a flag on it), which scancel --state=PENDING matches
    out, calls = _cancel(tmp_path, RUNNING_AND_PENDING.replace("JobState=PENDING", f"JobState={state}"))
    assert calls == ["scancel --state=PENDING 12", "scancel --batch --signal=USR2 12"]
    assert "pending array tasks 1-3 removed from the queue" in out


def test_now_is_one_plain_scancel_for_every_task(tmp_path: Path) -> None:
    out, calls = _cancel(tmp_path, RUNNING_AND_PENDING, "--now")
    assert calls == ["scancel 12"]  # without a signal option scancel cancels pending and running tasks alike
    assert out.strip() == "slurm:12 cancel requested; scancel sent"
