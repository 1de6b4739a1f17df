"""Local launcher: torchrun on this machine (CPU gloo or the local GPUs), retried with exponential backoff.

The rendered bash script is the whole job: it loops over attempts (the workload auto-resumes from its newest
checkpoint), records the exit code, and runs detached so ``fmstack status local:ID`` can look at it later. Each
attempt gets ``FMSTACK_RESTART_COUNT`` (0, 1, ...: retries so far, as Slurm's ``SLURM_RESTART_COUNT``) in its
environment and in the job's ``restarts`` file, which ``status`` reports.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import time
from pathlib import Path

from fmstack.errors import InputError
from fmstack.orchestration.jobspec import ResolvedJob
from fmstack.orchestration.launchers import shell
from fmstack.orchestration.launchers.base import AlreadyEnded, JobStatus, Submission
from fmstack.orchestration.launchers.torchrun import job_env, program_argv, torchrun_prefix

__all__ = ["AlreadyEnded", "LocalLauncher", "backoff_delays_s", "state_root"]

STATE_ENV = "FMSTACK_STATE_DIR"
DEFAULT_GRACE_S = 30.0
"""Seconds between SIGTERM and SIGKILL on cancel: Slurm's KillWait default (slurm.conf) and Kubernetes'
terminationGracePeriodSeconds default are both 30 s."""


CHECKPOINT_FILE = "checkpoint_location"
"""In a job's state directory: the absolute checkpoint location, so a second job that would save there is refused."""


def state_root() -> Path:
    """Absolute: the job script changes into ``log_dir`` before it writes its state, and ``status`` matches the
    script's path in the process's command line."""
    return Path(os.environ.get(STATE_ENV) or Path.home() / ".local" / "state" / "fmstack" / "jobs").absolute()


def backoff_delays_s(base_s: float, max_restarts: int) -> list[float]:
    """Exponential backoff: base, 2*base, 4*base, ... capped at 300 s (one value per retry)."""
    return [min(base_s * 2**i, 300.0) for i in range(max_restarts)]


class LocalLauncher:
    name = "local"

    def render(self, job: ResolvedJob, state_dir: str = "$FMSTACK_JOB_DIR") -> str:
        spec = job.spec
        if spec.nodes != 1:
            raise InputError("nodes", f"{spec.nodes}: the local launcher runs on this machine only; allowed: 1")
        env = job_env(job)
        cmd = [*torchrun_prefix(job), "--standalone", *program_argv(job)]
        delays = " ".join(f"{d:g}" for d in backoff_delays_s(spec.retry.backoff_s, spec.retry.max_restarts))
        state = state_dir if state_dir.startswith("$") else shlex.quote(state_dir)
        lines = [
            "#!/usr/bin/env bash",
            f"# fmstack local job {spec.name}: {spec.nodes} node(s) x {job.procs_per_node} process(es)",
            "set -u",
            f"cd {shlex.quote(job.log_dir)}",
            *(f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())),
            f"delays=({delays})",
            "attempt=0",
            "while :; do",
            f'  echo "$attempt" > {state}/restarts',
            "  export FMSTACK_RESTART_COUNT=$attempt",
            f"  {shlex.join(cmd)}",
            "  rc=$?",
            '  [ "$rc" -eq 0 ] && break',
            '  [ "$attempt" -ge "${#delays[@]}" ] && break',
            '  echo "fmstack: attempt $((attempt + 1)) exited $rc; retrying in ${delays[$attempt]} s" >&2',
            '  sleep "${delays[$attempt]}"',
            "  attempt=$((attempt + 1))",
            "done",
            f'echo "$rc" > {state}/exit_code',
            'exit "$rc"',
        ]
        return "\n".join(lines) + "\n"

    def submit(self, job: ResolvedJob, *, dry_run: bool = False) -> Submission:
        native = f"{job.spec.name}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        job_dir = state_root() / native
        text = self.render(job, str(job_dir))
        if dry_run:
            return Submission(job_id=f"local:{native}", rendered=text, dry_run=True)
        ck = job.spec.checkpoint
        ck_dir = os.path.abspath(ck.location) if ck is not None else None
        if ck_dir is not None and (other := self._running_with_checkpoint(ck_dir)):
            raise InputError(
                "checkpoint.location",
                f"{ck_dir} is in use by running job local:{other}: two jobs saving into one directory overwrite each "
                "other's checkpoints and a resume may load a mix of both; cancel that job or give this one another "
                "location",
            )
        job_dir.mkdir(parents=True, exist_ok=False)
        Path(job.log_dir).mkdir(parents=True, exist_ok=True)
        if ck_dir is not None:
            (job_dir / CHECKPOINT_FILE).write_text(ck_dir, encoding="utf-8")
        script = job_dir / "job.sh"
        script.write_text(text, encoding="utf-8")
        pid = shell.spawn(["bash", str(script)], log_path=job_dir / "output.log")
        (job_dir / "pid").write_text(str(pid), encoding="utf-8")
        return Submission(job_id=f"local:{native}", rendered=text, dry_run=False)

    def _running_with_checkpoint(self, ck_dir: str) -> str | None:
        """A running local job (under this state directory) whose checkpoint location is ``ck_dir``, if any."""
        root = state_root()
        if not root.is_dir():
            return None
        for d in sorted(root.iterdir()):
            try:
                if (d / CHECKPOINT_FILE).read_text(encoding="utf-8") != ck_dir:
                    continue
                if self.status(d.name).state == "RUNNING":
                    return d.name
            except (OSError, InputError):
                continue
        return None

    def _dir(self, native_id: str) -> Path:
        d = state_root() / native_id
        # a job's directory is one name under the state root holding the script submit wrote: `local:..` named the
        # root's parent and `local:.` the root itself (then a traceback on their missing pid file), and a name
        # longer than NAME_MAX raised ENAMETOOLONG from the stat
        try:
            found = native_id not in (".", "..") and "/" not in native_id and (d / "job.sh").is_file()
        except OSError:
            found = False
        if not found:
            shown = native_id if len(native_id) <= 80 else f"{native_id[:80]}..."
            raise InputError("ID", f"local:{shown} not found under {state_root()}")
        return d

    def status(self, native_id: str) -> JobStatus:
        d = self._dir(native_id)
        jid = f"local:{native_id}"
        restarts = _restarts(d)
        code_file = d / "exit_code"
        if code_file.exists():
            rc = int(code_file.read_text().strip() or "1")
            state = "COMPLETED" if rc == 0 else ("CANCELLED" if (d / "cancelled").exists() else "FAILED")
            return JobStatus(job_id=jid, state=state, detail=f"exit {rc}; log {d / 'output.log'}", restarts=restarts)
        pid = _pid(d)
        if _is_job_script(pid, d / "job.sh"):
            return JobStatus(job_id=jid, state="RUNNING", detail=f"pid {pid}", restarts=restarts)
        state = "CANCELLED" if (d / "cancelled").exists() else "FAILED"
        return JobStatus(job_id=jid, state=state, detail="exited without recording an exit code", restarts=restarts)

    def cancel(self, native_id: str) -> None:
        """Stop a running job; a job that has already ended raises :class:`AlreadyEnded` and keeps its state."""
        self.stop(native_id)

    def stop(self, native_id: str, grace_s: float = DEFAULT_GRACE_S, poll_s: float = 0.1) -> str:
        """SIGTERM to the job's process group and every descendant of its script (torchrun's workers run in
        sessions of their own), then SIGKILL to whatever of them is still alive ``grace_s`` later (as
        Slurm's KillWait, 30 s by default, and Kubernetes' terminationGracePeriodSeconds, 30 s by default, do: a
        process that ignores or traps SIGTERM cannot outlive a cancel). Returns what happened, in words."""
        d = self._dir(native_id)
        st = self.status(native_id)
        if st.state != "RUNNING":
            raise AlreadyEnded(st.state)
        pid = _pid(d)
        (d / "cancelled").touch()
        if not _is_job_script(pid, d / "job.sh"):
            return "it had already exited"
        # torchrun starts each worker in a session of its own (start_new_session=True in
        # torch/distributed/elastic/multiprocessing/subprocess_handler), out of the script's process group: signal
        # the group and every descendant, and keep the ones seen here even after their parent dies (re-parented)
        procs = _job_processes(pid)
        _signal(pid, procs, signal.SIGTERM)
        start = time.monotonic()
        while alive := _alive(pid, procs):
            waited = time.monotonic() - start
            if waited >= grace_s:
                _signal(pid, alive, signal.SIGKILL)
                return f"SIGKILL after {grace_s:g} s: SIGTERM did not stop it"
            time.sleep(min(poll_s, max(grace_s - waited, 0.0)))
            procs |= _job_processes(pid)  # workers a restart started meanwhile
        return f"stopped by SIGTERM in {time.monotonic() - start:.1f} s"


def _restarts(job_dir: Path) -> int:
    """Retries so far, as the script last recorded them (0 before the first attempt starts)."""
    try:
        return int((job_dir / "restarts").read_text().strip() or "0")
    except (OSError, ValueError):
        return 0


def _pid(job_dir: Path) -> int:
    try:
        text = (job_dir / "pid").read_text(encoding="utf-8").strip()
    except OSError as exc:  # submit writes the pid just after starting the script: a damaged or half-written state
        raise InputError("pid", f"cannot read {job_dir / 'pid'}: {exc.strerror}; the job's state is damaged") from None
    if not text.isdigit() or int(text) <= 0:
        raise InputError("pid", f"{job_dir / 'pid'} holds {text!r}, not a process id; the job's state is damaged")
    return int(text)


def _proc_table() -> dict[int, tuple[str, int, int, str]]:
    """Every process now: pid -> (state, parent pid, process group, start time in clock ticks since boot)."""
    table: dict[int, tuple[str, int, int, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            table[int(entry)] = (fields[0], int(fields[1]), int(fields[2]), fields[19])
        except (OSError, IndexError, ValueError):
            continue
    return table


def _job_processes(pgid: int) -> set[tuple[int, str]]:
    """The job's live processes as (pid, start time): its process group and every descendant of its script, which
    may sit in other sessions; zombies left out (``kill -0`` would still count them)."""
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for p, (_, ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(p)
    found = {p for p, (_, _, grp, _) in table.items() if grp == pgid}
    todo = [pgid, *found]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in found:
                found.add(c)
                todo.append(c)
    return {(p, table[p][3]) for p in found if table[p][0] not in ("Z", "X")}


def _alive(pgid: int, procs: set[tuple[int, str]]) -> set[tuple[int, str]]:
    """Which of ``procs`` still run (the same pid with the same start time: not a reused pid), with the group's."""
    table = _proc_table()
    now = {(p, table[p][3]) for p in table if table[p][0] not in ("Z", "X")}
    return (procs & now) | _job_processes(pgid)


def _signal(pgid: int, procs: set[tuple[int, str]], sig: signal.Signals) -> None:
    """``sig`` to the process group and to each of ``procs``; one that has just exited is skipped."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)
    for p, _ in procs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, sig)


def _is_job_script(pid: int, script: Path) -> bool:
    """Whether ``pid`` is still this job's ``bash job.sh``: running, not a zombie (a zombie still answers kill -0),
    and running this job's script. A PID alone is not enough: once the script died without recording an exit code
    (SIGKILL, the OOM killer, a reboot; the state directory survives) its PID can belong to any other process, and
    ``cancel`` signals the whole process group of that PID. A process we cannot inspect is not ours."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                return False
        with open(f"/proc/{pid}/cmdline", "rb") as fb:
            argv = fb.read().split(b"\0")
    except (OSError, IndexError):
        return False
    if os.fsencode(str(script)) in argv:
        return True
    # the same file under another spelling (a relative FMSTACK_STATE_DIR of an older submission, a symlink)
    for arg in argv[1:]:
        path = os.path.join(f"/proc/{pid}/cwd", os.fsdecode(arg))  # an absolute arg replaces the cwd
        with contextlib.suppress(OSError):
            if arg and os.path.samefile(path, script):
                return True
    return False
