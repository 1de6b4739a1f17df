"""The sbatch script's exit-code requeue (``retry.requeue_exit_codes``), run with stand-ins for srun, scancel and
scontrol on PATH.

- A multi-node step where one node fails: srun kills the other nodes' tasks (``--kill-on-bad-exit``) and then
  exits 128 + signal, not the failing task's code (SchedMD slurm ``src/srun/launch.c``, ``_task_finish``: a
  signalled task's status replaces the exit codes in srun's return value; srun(1), RETURN VALUE). The stand-in
  prints what srun 22.05.8 printed on the test cluster when one of two torchruns exited 1.
- A job whose batch shell got SIGTERM (``scancel``, ``fmstack cancel --now``, preemption, the time limit) is ending:
  torchrun exits 1 on the SIGTERM it forwards, which matched ``requeue_exit_codes: [1]`` and the script requeued
  the job it was asked to cancel (seen on the test cluster: PENDING again after ``fmstack cancel --now``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from fmstack.catalog import Catalog
from fmstack.orchestration.jobspec import parse_jobspec, resolve
from fmstack.orchestration.launchers.slurm import render_sbatch

SRUN_EXITS = {
    # one node's torchrun exited 1 (a worker died); srun terminated the other node's task: status 128 + SIGTERM
    "one_node_failed": ("srun: error: n2: task 1: Exited with exit code 1\nsrun: error: n1: task 0: Terminated\n"
                        "srun: Force Terminated StepId=42.0\n", 143),
    # the program's own "requeue me" code on one node, the other node's task killed
    "one_node_75": ("srun: error: n1: task 0: Exited with exit code 75\nsrun: error: n2: task 1: Killed\n", 137),
    # both nodes' torchruns exited 1 before srun signalled either (srun's status is then 1 itself)
    "both_failed": ("srun: error: n[1-2]: tasks 0-1: Exited with exit code 1\n", 1),
    # a task killed (the OOM killer, SIGKILL), no task exited with a code
    "killed": ("srun: error: n1: task 0: Killed\n", 137),
    "ok": ("", 0),
}  # fmt: skip

SRUN = """#!/bin/bash
printf '%s' "$SRUN_STDERR" >&2
exit "$SRUN_RC"
"""

SRUN_TERM = """#!/bin/bash
# a step that runs until SIGTERM, then exits 1 as torchrun does after forwarding it to its workers
exec bash -c 'trap "echo step-TERM >> \\"$LOG\\"; exit 1" TERM; echo $$ > "$STEP_PID"; while :; do sleep 0.02; done'
"""

OTHERS = {
    "scancel": '#!/bin/bash\necho "scancel $*" >> "$LOG"\n',
    "scontrol": """#!/bin/bash
case "$1 $2" in
  "show hostnames") echo n1 ;;
  "show node") echo "NodeName=n1 NodeAddr=127.0.0.1" ;;
  *) echo "scontrol $*" >> "$LOG" ;;
esac
""",
}


def _script(catalog: Catalog, codes: list[int], max_restarts: int = 3, **over: Any) -> str:
    spec: dict[str, Any] = {
        "name": "rq",
        "command": ["./train.sh"],
        "nodes": 2,
        "gpus_per_node": 0,
        "retry": {"max_restarts": max_restarts, "requeue_exit_codes": codes},
    }
    spec.update(over)
    return render_sbatch(resolve(parse_jobspec(spec), catalog))


def _env(tmp: Path, srun: str, **extra: str) -> dict[str, str]:
    bin_dir = tmp / "bin"
    bin_dir.mkdir(parents=True)
    for name, body in {"srun": srun, **OTHERS}.items():
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LOG": str(tmp / "calls.log")}
    env.update({"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "n[1-2]", "TMPDIR": str(tmp)})
    env.update(extra)
    return env


def _run(tmp: Path, text: str, exit_name: str, restarts: int = 0) -> tuple[int, str, list[str]]:
    stderr, rc = SRUN_EXITS[exit_name]
    env = _env(tmp, SRUN, SRUN_STDERR=stderr, SRUN_RC=str(rc), SLURM_RESTART_COUNT=str(restarts))
    (tmp / "job.sh").write_text(text)
    proc = subprocess.run(["bash", str(tmp / "job.sh")], env=env, capture_output=True, text=True, timeout=30)
    log = tmp / "calls.log"
    return proc.returncode, proc.stdout + proc.stderr, log.read_text().splitlines() if log.exists() else []


def test_one_failed_node_requeues_on_its_exit_code(tmp_path: Path, catalog: Catalog) -> None:
    rc, out, calls = _run(tmp_path, _script(catalog, [1]), "one_node_failed")
    assert calls == ["scontrol requeue 42"], out
    assert rc == 0
    assert "fmstack: task exit code 1 asks for a requeue (srun exited 143)" in out
    # srun's messages still reach the job's log, and the temporary copy is gone
    assert "srun: error: n2: task 1: Exited with exit code 1" in out
    assert not list(tmp_path.glob("fmstack-srun.*"))


def test_a_programs_own_code_on_one_node_requeues(tmp_path: Path, catalog: Catalog) -> None:
    rc, out, calls = _run(tmp_path, _script(catalog, [75]), "one_node_75")
    assert (rc, calls) == (0, ["scontrol requeue 42"]), out


def test_srun_status_itself_still_matches(tmp_path: Path, catalog: Catalog) -> None:
    assert _run(tmp_path / "a", _script(catalog, [1]), "both_failed")[2] == ["scontrol requeue 42"]
    # a kill with no task exit code: srun's 128 + 9 matches only when listed
    assert _run(tmp_path / "b", _script(catalog, [1]), "killed")[:3:2] == (137, [])
    assert _run(tmp_path / "c", _script(catalog, [137]), "killed")[2] == ["scontrol requeue 42"]


def test_no_requeue_on_other_codes_success_or_spent_restarts(tmp_path: Path, catalog: Catalog) -> None:
    assert _run(tmp_path / "a", _script(catalog, [75]), "one_node_failed")[:3:2] == (143, [])
    assert _run(tmp_path / "b", _script(catalog, [1]), "ok")[:3:2] == (0, [])
    assert _run(tmp_path / "c", _script(catalog, [1], max_restarts=2), "one_node_failed", restarts=2)[:3:2] == (143, [])


def test_sigterm_to_the_batch_shell_is_not_requeued(tmp_path: Path, catalog: Catalog) -> None:
    (tmp_path / "job.sh").write_text(_script(catalog, [1]))
    step_pid = tmp_path / "step.pid"
    env = _env(tmp_path, SRUN_TERM, STEP_PID=str(step_pid), SLURM_RESTART_COUNT="0")
    proc = subprocess.Popen(["bash", str(tmp_path / "job.sh")], env=env, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 10
    while not (step_pid.exists() and step_pid.read_text().strip()):
        assert proc.poll() is None and time.monotonic() < deadline, "the stand-in step did not start"
        time.sleep(0.02)
    # scancel: Slurm signals the batch shell and the steps; the step exits 1, as torchrun does
    proc.send_signal(signal.SIGTERM)
    os.kill(int(step_pid.read_text()), signal.SIGTERM)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 1
    assert (tmp_path / "calls.log").read_text().splitlines() == ["step-TERM"]  # no "scontrol requeue 42"
    assert "not requeued" in out and "asks for a requeue" not in out


def test_scripts_without_requeue_codes_keep_srun_as_it_was(catalog: Catalog) -> None:
    text = _script(catalog, [])
    assert "fmstack-srun" not in text and "Exited with exit code" not in text
    with_codes = _script(catalog, [1, 75])
    assert "for code in 1 75; do" in with_codes and "mkfifo" in with_codes


def test_time_limit_requeues_do_not_spend_the_failure_retries(tmp_path: Path, catalog: Catalog) -> None:
    # a reference-workload job with a checkpoint is requeued at every time-limit warning; SLURM_RESTART_COUNT counts
    # those too, and compared with max_restarts it used to refuse the first failure after max_restarts time limits
    logs = tmp_path / "logs"
    logs.mkdir()
    spec = {"command": None, "workload": {"steps": 100}, "log_dir": str(logs),
            "checkpoint": {"location": str(tmp_path / "ckpt")}}  # fmt: skip
    text = _script(catalog, [1], max_restarts=1, **spec)
    assert "#SBATCH --signal=B:USR1@120" in text
    log = logs / "rq-42.out"  # --output=<log_dir>/%x-%j.out, appended to across requeues
    log.write_text("fmstack: stopped for the time limit (exit 143); requeue to resume\n" * 2)
    rc, out, calls = _run(tmp_path / "a", text, "one_node_failed", restarts=2)  # 2 time limits, no failure yet
    assert (rc, calls) == (0, ["scontrol requeue 42"]), out
    log.write_text("fmstack: stopped for the time limit (exit 143); requeue to resume\n")
    rc, out, calls = _run(tmp_path / "b", text, "one_node_failed", restarts=2)  # 1 time limit, 1 failure: spent
    assert (rc, calls) == (143, []), out
