"""The local launcher for real (torchrun on this machine, retry with backoff) and the CLI around it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from fmstack.orchestration.launchers.local import backoff_delays_s

pytestmark = pytest.mark.torch


def test_backoff_doubles_and_caps() -> None:
    assert backoff_delays_s(5, 4) == [5, 10, 20, 40]
    assert backoff_delays_s(100, 4) == [100, 200, 300, 300]


def _fm(tmp: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FMSTACK_STATE_DIR": str(tmp / "state")}
    proc = subprocess.run(
        [sys.executable, "-m", "fmstack", *args], capture_output=True, text=True, env=env, timeout=120
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def _wait(tmp: Path, job_id: str, final: set[str], timeout_s: float = 120) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        out = _fm(tmp, "status", job_id).stdout
        if out.split()[1] in final or time.monotonic() > deadline:
            return out
        time.sleep(0.5)


def _spec(tmp: Path, command: list[str], **over: object) -> Path:
    pytest.importorskip("torch")
    spec = {"name": "local-job", "command": command, "python": sys.executable, "log_dir": str(tmp), **over}
    path = tmp / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_failed_attempt_is_retried_and_completes(tmp_path: Path) -> None:
    flaky = (
        'echo "restart-count=$FMSTACK_RESTART_COUNT"; '
        "if [ -e attempted ]; then echo second-try-ok; exit 0; else touch attempted; exit 3; fi"
    )
    spec = _spec(tmp_path, ["/bin/sh", "-c", flaky], retry={"max_restarts": 2, "backoff_s": 0.2})
    job_id = _fm(tmp_path, "launch", str(spec), "--on", "local").stdout.strip()
    assert job_id.startswith("local:local-job-")
    out = _wait(tmp_path, job_id, {"COMPLETED", "FAILED"})
    assert out.split()[1] == "COMPLETED", out
    log = (tmp_path / "state" / job_id.split(":", 1)[1] / "output.log").read_text()
    assert "fmstack: attempt 1 exited 1; retrying in 0.2 s" in log  # torchrun reports a failed worker as 1
    assert "second-try-ok" in log
    # each attempt sees how many retries came before it (as SLURM_RESTART_COUNT), and status reports them
    assert "restart-count=0" in log and "restart-count=1" in log
    assert "restarts=1 " in out, out


def test_cancel_stops_the_job(tmp_path: Path) -> None:
    spec = _spec(tmp_path, ["/bin/sleep", "120"])
    job_id = _fm(tmp_path, "launch", str(spec), "--on", "local").stdout.strip()
    assert _fm(tmp_path, "status", job_id).stdout.split()[1] == "RUNNING"
    assert _fm(tmp_path, "cancel", job_id).stdout.startswith(f"{job_id} cancel requested; stopped by SIG")
    out = _wait(tmp_path, job_id, {"CANCELLED", "FAILED", "COMPLETED"}, 60)
    assert out.split()[1] == "CANCELLED", out


def test_dry_run_prints_and_submits_nothing(tmp_path: Path) -> None:
    spec = _spec(tmp_path, ["/bin/true"])
    out = _fm(tmp_path, "launch", str(spec), "--on", "slurm", "--dry-run").stdout
    assert out.startswith("#!/bin/bash\n#SBATCH --job-name=local-job\n")
    out = _fm(tmp_path, "launch", str(spec), "--on", "local", "--dry-run").stdout
    assert "--nproc-per-node=1 --no-python --standalone /bin/true" in out
    assert not (tmp_path / "state").exists()
    assert "Example:" in _fm(tmp_path, "launch", "--help").stdout


def test_cancel_of_an_ended_job_keeps_its_state(tmp_path: Path) -> None:
    spec = _spec(tmp_path, ["/bin/false"], retry={"max_restarts": 0, "backoff_s": 0.1})
    job_id = _fm(tmp_path, "launch", str(spec), "--on", "local").stdout.strip()
    assert _wait(tmp_path, job_id, {"FAILED", "COMPLETED"}).split()[1] == "FAILED"
    out = _fm(tmp_path, "cancel", job_id).stdout.strip()  # exit 0: nothing to do
    assert out == f"{job_id} already ended (FAILED); nothing to cancel"
    assert _fm(tmp_path, "status", job_id).stdout.split()[1] == "FAILED"  # before the fix: CANCELLED
    assert not (tmp_path / "state" / job_id.split(":", 1)[1] / "cancelled").exists()


@pytest.mark.parametrize("location", ["/proc/fmstack-x", "/sys/fmstack-x"])
def test_checkpoint_location_on_a_virtual_file_system_is_refused(tmp_path: Path, location: str) -> None:
    # os.access says writable to root; the check really creates (and removes) a directory there
    spec = _spec(tmp_path, ["/bin/true"], checkpoint={"location": location, "interval_steps": 5})
    proc = _fm(tmp_path, "launch", str(spec), "--on", "local", check=False)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"fmstack: error: checkpoint.location: '{location}': cannot create a directory in ")
    assert not (tmp_path / "state").exists()


def test_a_second_job_saving_into_a_running_jobs_checkpoint_is_refused(tmp_path: Path) -> None:
    # two runs of one spec both saved step_000000NN into the same directory, overwriting each other's shards
    # (launch review, session 8): the second launch is refused while the first runs, and allowed once it ended
    ck = {"location": str(tmp_path / "ckpt"), "interval_steps": 5}
    spec = _spec(tmp_path, ["/bin/sleep", "120"], checkpoint=ck)
    first = _fm(tmp_path, "launch", str(spec), "--on", "local").stdout.strip()
    try:
        proc = _fm(tmp_path, "launch", str(spec), "--on", "local", check=False)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip() == (
            f"fmstack: error: checkpoint.location: {tmp_path / 'ckpt'} is in use by running job {first}: two jobs "
            "saving into one directory overwrite each other's checkpoints and a resume may load a mix of both; "
            "cancel that job or give this one another location"
        )
        assert len(list((tmp_path / "state").iterdir())) == 1  # nothing was started
        assert _fm(tmp_path, "launch", str(spec), "--on", "local", "--dry-run").returncode == 0  # submits nothing
    finally:
        for d in (tmp_path / "state").iterdir():  # no job outlives the test, whatever failed
            _fm(tmp_path, "cancel", f"local:{d.name}", "--grace-s", "5", check=False)
    assert _wait(tmp_path, first, {"CANCELLED", "FAILED"}, 60).split()[1] == "CANCELLED"
    second = _fm(tmp_path, "launch", str(spec), "--on", "local").stdout.strip()
    _fm(tmp_path, "cancel", second, "--grace-s", "5")
