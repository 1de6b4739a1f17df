"""The local launcher acts only on its own process: a PID recorded in a job's state directory can belong to
another process once the job's script has died without recording an exit code (SIGKILL, OOM killer, a reboot:
state survives in ~/.local/state, PIDs restart low and are reused)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fmstack.catalog import Catalog
from fmstack.errors import InputError
from fmstack.orchestration.jobspec import parse_jobspec, resolve
from fmstack.orchestration.launchers.local import AlreadyEnded, LocalLauncher


def _job_dir(root: Path, native: str, pid: int) -> Path:
    d = root / native
    d.mkdir(parents=True)
    (d / "job.sh").write_text("#!/usr/bin/env bash\nexit 0\n")
    (d / "pid").write_text(str(pid))
    return d


def test_a_reused_pid_is_not_the_job_and_is_never_signalled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FMSTACK_STATE_DIR", str(tmp_path))
    # an unrelated process leading its own process group, as any login shell or daemon does
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        _job_dir(tmp_path, "dead-job-20261123-000000-1", other.pid)
        launcher = LocalLauncher()
        st = launcher.status("dead-job-20261123-000000-1")
        assert st.state == "FAILED", st  # before the fix: RUNNING (pid alive, but not this job's script)
        with pytest.raises(AlreadyEnded):
            launcher.cancel("dead-job-20261123-000000-1")  # before the fix: os.killpg(other.pid, SIGTERM)
        assert other.poll() is None, "cancel signalled a process that is not the job"
    finally:
        other.kill()
        other.wait()


def test_the_jobs_own_script_is_recognised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FMSTACK_STATE_DIR", str(tmp_path))
    d = tmp_path / "live-job-20261123-000000-1"
    d.mkdir()
    (d / "job.sh").write_text("#!/usr/bin/env bash\nsleep 60\n")
    proc = subprocess.Popen(["bash", str(d / "job.sh")], start_new_session=True)
    try:
        (d / "pid").write_text(str(proc.pid))
        launcher = LocalLauncher()
        assert launcher.status("live-job-20261123-000000-1").state == "RUNNING"
        launcher.cancel("live-job-20261123-000000-1")
        assert proc.wait(timeout=30) != 0
        assert launcher.status("live-job-20261123-000000-1").state == "CANCELLED"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_corrupt_pid_file_is_one_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FMSTACK_STATE_DIR", str(tmp_path))
    d = _job_dir(tmp_path, "odd-job-20261123-000000-1", 1)
    (d / "pid").write_text("")
    with pytest.raises(InputError, match="pid"):
        LocalLauncher().status("odd-job-20261123-000000-1")


def test_a_relative_state_dir_is_made_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, catalog: Catalog
) -> None:
    # the script cds into log_dir before it writes restarts / exit_code: a relative state path would land there
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FMSTACK_STATE_DIR", "state")
    spec = {"name": "rel", "command": ["/bin/true"], "log_dir": "/tmp"}
    sub = LocalLauncher().submit(resolve(parse_jobspec(spec), catalog), dry_run=True)
    native = sub.job_id.split(":", 1)[1]
    assert f"> {tmp_path}/state/{native}/exit_code" in sub.rendered, sub.rendered
