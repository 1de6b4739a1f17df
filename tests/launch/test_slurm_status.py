"""``fmstack status slurm:ID`` for an array (one ``scontrol show job -o`` line per task record) and for a job
slurmctld has forgotten (MinJobAge), through a fake of the one shell seam. Lines are shaped as
``scontrol show job -o`` prints them, trimmed to the keys fmstack reads."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fmstack.errors import InputError
from fmstack.orchestration.launchers import shell
from fmstack.orchestration.launchers.slurm import SlurmLauncher

ARRAY = (
    "JobId=43 ArrayJobId=42 ArrayTaskId=0 JobName=gpt JobState=COMPLETED Reason=None Restarts=0 ExitCode=0:0\n"
    "JobId=44 ArrayJobId=42 ArrayTaskId=1 JobName=gpt JobState=RUNNING Reason=None Restarts=1 ExitCode=0:0\n"
    "JobId=42 ArrayJobId=42 ArrayTaskId=2-3 JobName=gpt JobState=PENDING Reason=Resources Restarts=0 ExitCode=0:0\n"
)


def _fake(replies: dict[str, str | Exception]) -> Callable[..., str]:
    def run(argv: list[str], *, input_text: str | None = None, timeout_s: float = 60.0) -> str:
        reply = replies[argv[0]]
        if isinstance(reply, Exception):
            raise reply
        return reply

    return run


def test_an_array_reports_every_task_not_only_the_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shell, "run", _fake({"scontrol": ARRAY}))
    st = SlurmLauncher().status("42")
    # before the fix: COMPLETED (the first line's JobState), while task 1 runs and tasks 2-3 wait
    assert st.state == "RUNNING"
    assert st.detail == "array tasks 0:COMPLETED 1:RUNNING 2-3:PENDING"
    assert st.restarts == 1


def test_an_array_with_one_failed_task_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    done = ARRAY.replace("RUNNING", "FAILED").replace("PENDING", "COMPLETED")
    monkeypatch.setattr(shell, "run", _fake({"scontrol": done}))
    assert SlurmLauncher().status("42").state == "FAILED"


def test_a_forgotten_job_is_looked_up_in_accounting(monkeypatch: pytest.MonkeyPatch) -> None:
    gone = InputError("launcher", "scontrol exited 1: slurm_load_jobs error: Invalid job id specified")
    monkeypatch.setattr(shell, "run", _fake({"scontrol": gone, "sacct": "42|CANCELLED by 1000|0:15\n"}))
    st = SlurmLauncher().status("42")  # before the fix: the scontrol error, exit 2
    assert (st.state, st.detail) == ("CANCELLED", "CANCELLED ExitCode=0:15 (from sacct)")


def test_a_forgotten_job_without_accounting_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    gone = InputError("launcher", "scontrol exited 1: slurm_load_jobs error: Invalid job id specified")
    no_db = InputError("launcher", "sacct exited 1: Slurm accounting storage is disabled")
    monkeypatch.setattr(shell, "run", _fake({"scontrol": gone, "sacct": no_db}))
    with pytest.raises(InputError, match=r"slurm:42 is not known to slurmctld .*MinJobAge.*accounting storage"):
        SlurmLauncher().status("42")


def test_one_job_reads_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    line = "JobId=7 JobName=gpt JobState=RUNNING Reason=None Restarts=2 ExitCode=0:0 StdOut=/fsx/logs/gpt-7.out\n"
    monkeypatch.setattr(shell, "run", _fake({"scontrol": line}))
    st = SlurmLauncher().status("7")
    assert (st.state, st.restarts) == ("RUNNING", 2)
    assert st.detail == "RUNNING ExitCode=0:0 Reason=None log=/fsx/logs/gpt-7.out"
