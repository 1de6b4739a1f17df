"""Local cancel: SIGTERM, then SIGKILL after a grace period, and the line says which stopped the job (operations
review, round 2, defect 4). Real processes, no torch: a job directory as the local launcher writes it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from fmstack.cli.main import cli
from fmstack.orchestration.launchers import shell
from fmstack.orchestration.launchers.local import DEFAULT_GRACE_S, LocalLauncher, _job_processes


def _start(root: Path, name: str, body: str) -> int:
    d = root / name
    d.mkdir(parents=True)
    (d / "job.sh").write_text(f"#!/usr/bin/env bash\n{body}\n", encoding="utf-8")
    pid = shell.spawn(["bash", str(d / "job.sh")], log_path=d / "output.log")
    (d / "pid").write_text(str(pid), encoding="utf-8")
    deadline = time.monotonic() + 10
    while not (d / "output.log").read_text() and time.monotonic() < deadline:  # the script has set up its traps
        time.sleep(0.05)
    return pid


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FMSTACK_STATE_DIR", str(tmp_path))
    return tmp_path


def test_default_grace_is_slurm_killwait() -> None:
    assert DEFAULT_GRACE_S == 30.0  # slurm.conf KillWait default; Kubernetes terminationGracePeriodSeconds default


def test_a_job_that_obeys_sigterm_stops_without_sigkill(state: Path) -> None:
    pid = _start(state, "obeys", "echo up; sleep 60")
    outcome = LocalLauncher().stop("obeys", grace_s=20)
    assert outcome.startswith("stopped by SIGTERM in "), outcome
    assert not _job_processes(pid)
    assert LocalLauncher().status("obeys").state == "CANCELLED"


def test_a_job_that_ignores_sigterm_is_killed_after_the_grace_period(state: Path) -> None:
    # the script and its child ignore SIGTERM (an ignored signal stays ignored across exec): SIGTERM alone used to
    # leave both running for good
    pid = _start(state, "stubborn", "trap '' TERM; echo up; sleep 60")
    t0 = time.monotonic()
    outcome = LocalLauncher().stop("stubborn", grace_s=0.5)
    assert outcome == "SIGKILL after 0.5 s: SIGTERM did not stop it"
    assert 0.5 <= time.monotonic() - t0 < 5
    deadline = time.monotonic() + 5
    while _job_processes(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _job_processes(pid)
    assert LocalLauncher().status("stubborn").state == "CANCELLED"


def test_cancel_cli_reports_which_signal_stopped_the_job(state: Path) -> None:
    _start(state, "cli-job", "trap '' TERM; echo up; sleep 60")
    result = CliRunner().invoke(cli, ["cancel", "local:cli-job", "--grace-s", "0.2"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert result.stdout == "local:cli-job cancel requested; SIGKILL after 0.2 s: SIGTERM did not stop it\n"


def test_workers_in_their_own_session_are_stopped_too(state: Path) -> None:
    """torchrun starts each worker in a new session (start_new_session=True), outside the script's process group: a
    worker that traps SIGTERM used to outlive the cancel while status said CANCELLED (review of session 7)."""
    import os
    import signal

    d = state / "workers"
    pidfile = state / "worker.pid"
    body = f"trap '' TERM; setsid bash -c 'trap \"\" TERM; echo $$ > {pidfile}; sleep 60' & echo up; wait"
    pid = _start(state, "workers", body)
    deadline = time.monotonic() + 10
    while not (pidfile.exists() and pidfile.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    worker = int(pidfile.read_text())
    assert os.getpgid(worker) != pid  # its own session and group
    outcome = LocalLauncher().stop("workers", grace_s=0.5)
    assert outcome.startswith("SIGKILL after 0.5 s"), outcome
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            break
        with open(f"/proc/{worker}/stat", encoding="utf-8") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                break
        time.sleep(0.05)
    else:
        os.kill(worker, signal.SIGKILL)
        raise AssertionError("the worker outlived the cancel")
    assert d.exists() and LocalLauncher().status("workers").state == "CANCELLED"


def test_a_job_started_with_a_relative_script_path_is_still_recognised(state: Path) -> None:
    """``bash job.sh`` run from its own directory (an older submission with a relative state dir): status still
    reads RUNNING, and cancel acts on it (it used to read FAILED and refuse; review of session 7)."""
    d = state / "rel"
    d.mkdir()
    (d / "job.sh").write_text("#!/usr/bin/env bash\necho up; sleep 60\n", encoding="utf-8")
    import subprocess

    proc = subprocess.Popen(["bash", "job.sh"], cwd=d, start_new_session=True, stdout=subprocess.DEVNULL)
    (d / "pid").write_text(str(proc.pid), encoding="utf-8")
    assert LocalLauncher().status("rel").state == "RUNNING"
    assert LocalLauncher().stop("rel", grace_s=5).startswith("stopped by SIGTERM")
    proc.wait(timeout=5)
