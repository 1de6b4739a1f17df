"""The sbatch script's time-limit warning: ``--signal=B:USR1@N`` and what the batch shell does with USR1 and TERM.

The behaviour test runs the rendered script with stand-ins for srun, scancel and scontrol on PATH: "srun" runs a job
step that exits 143 on SIGTERM, as the workload does after its checkpoint; "scancel --signal=TERM" signals it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from fmstack.catalog import Catalog
from fmstack.errors import InputError
from fmstack.orchestration.jobspec import parse_jobspec, resolve
from fmstack.orchestration.launchers.slurm import (
    DEFAULT_STOP_WARNING_S,
    GRACEFUL_CANCEL_MARK,
    render_sbatch,
    stop_warning_s,
)


def _spec(**over: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": "stop",
        "workload": {"steps": 100},
        "nodes": 1,
        "gpus_per_node": 0,
        "time_limit_min": 60,
        "checkpoint": {"location": "/tmp/fmstack-stop-ckpt"},
    }
    spec.update(over)
    return spec


def _lead(catalog: Catalog, **over: Any) -> int:
    return stop_warning_s(resolve(parse_jobspec(_spec(**over)), catalog))


def test_warning_lead_default_override_cap_and_off(catalog: Catalog) -> None:
    assert DEFAULT_STOP_WARNING_S == 120
    assert _lead(catalog) == 120
    assert _lead(catalog, env={"FMSTACK_STOP_WARNING_S": "300"}) == 300
    assert _lead(catalog, time_limit_min=3) == 90  # half of 3 min
    assert _lead(catalog, env={"FMSTACK_STOP_WARNING_S": "0"}) == 0
    assert _lead(catalog, checkpoint=None) == 0  # nothing to save: stopping early would only lose work
    assert _lead(catalog, workload=None, command=["./train.sh"]) == 0  # a program that may not checkpoint
    with pytest.raises(InputError, match=r"env\.FMSTACK_STOP_WARNING_S: '2m'"):
        _lead(catalog, env={"FMSTACK_STOP_WARNING_S": "2m"})
    # the JobSpec field says the same as the env key
    ckpt = {"location": "/tmp/fmstack-stop-ckpt"}
    assert _lead(catalog, checkpoint={**ckpt, "stop_warning_s": 300}) == 300
    assert _lead(catalog, checkpoint={**ckpt, "stop_warning_s": 0}) == 0
    assert _lead(catalog, checkpoint={**ckpt, "stop_warning_s": 3000}, time_limit_min=60) == 1800  # half the limit
    with pytest.raises(InputError, match=r"checkpoint\.stop_warning_s: 300, and env\.FMSTACK_STOP_WARNING_S says '60'"):
        _lead(catalog, checkpoint={**ckpt, "stop_warning_s": 300}, env={"FMSTACK_STOP_WARNING_S": "60"})
    for bad in (-1, 70000, "2m"):
        with pytest.raises(InputError, match=r"checkpoint\.stop_warning_s"):
            parse_jobspec(_spec(checkpoint={**ckpt, "stop_warning_s": bad}))


def test_script_requests_the_signal_only_with_a_lead(catalog: Catalog) -> None:
    text = render_sbatch(resolve(parse_jobspec(_spec()), catalog))
    assert "#SBATCH --signal=B:USR1@120\n" in text
    assert "export TORCH_ELASTIC_SHUTDOWN_TIMEOUT=120\n" in text
    assert " USR1\n" in text
    assert GRACEFUL_CANCEL_MARK in text and " USR2\n" in text
    off = render_sbatch(resolve(parse_jobspec(_spec(checkpoint=None)), catalog))
    assert "--signal" not in off and "USR1" not in off and "TORCH_ELASTIC_SHUTDOWN_TIMEOUT" not in off
    assert "USR2" not in off and GRACEFUL_CANCEL_MARK not in off  # nothing saves: a cancel is a plain scancel
    no_lead = render_sbatch(resolve(parse_jobspec(_spec(env={"FMSTACK_STOP_WARNING_S": "0"})), catalog))
    assert "#SBATCH --signal" not in no_lead and " USR1\n" not in no_lead
    assert GRACEFUL_CANCEL_MARK in no_lead and " USR2\n" in no_lead  # the job still saves when cancelled
    assert "' TERM\n" in off  # the batch shell still outlives its steps on SIGTERM
    mine = render_sbatch(resolve(parse_jobspec(_spec(env={"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "600"})), catalog))
    assert "TORCH_ELASTIC_SHUTDOWN_TIMEOUT=600\n" in mine and "TORCH_ELASTIC_SHUTDOWN_TIMEOUT=120" not in mine


STUBS = {
    "srun": """#!/bin/bash
exec bash -c 'trap "echo step-TERM >> \\"$LOG\\"; sleep 0.3; echo step-exit >> \\"$LOG\\"; exit 143" TERM
echo $$ > "$STEP_PID"; while :; do sleep 0.02; done'
""",
    "scancel": """#!/bin/bash
echo "scancel $*" >> "$LOG"; kill -TERM "$(cat "$STEP_PID")"
""",
    "scontrol": """#!/bin/bash
case "$1 $2" in
  "show hostnames") echo n1 ;;
  "show node") echo "NodeName=n1 NodeAddr=127.0.0.1" ;;
  *) echo "scontrol $*" >> "$LOG" ;;
esac
""",
}


def _start(tmp: Path, text: str) -> tuple[subprocess.Popen[str], Path, Path]:
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    for name, body in STUBS.items():
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    (tmp / "job.sh").write_text(text)
    log, step_pid = tmp / "calls.log", tmp / "step.pid"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LOG": str(log), "STEP_PID": str(step_pid)}
    env.update({"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "n1", "SLURM_NODEID": "0"})
    proc = subprocess.Popen(["bash", str(tmp / "job.sh")], env=env, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 10
    while not (step_pid.exists() and step_pid.read_text().strip()):
        assert proc.poll() is None and time.monotonic() < deadline, "the stand-in step did not start"
        time.sleep(0.02)
    return proc, log, step_pid


def test_usr1_stops_the_steps_then_requeues(tmp_path: Path, catalog: Catalog) -> None:
    text = render_sbatch(resolve(parse_jobspec(_spec(retry={"max_restarts": 0})), catalog))
    proc, log, _ = _start(tmp_path, text)
    proc.send_signal(signal.SIGUSR1)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0
    # the steps got SIGTERM through scancel (not srun, which would SIGKILL them), finished, and only then the requeue
    assert log.read_text().splitlines() == ["scancel --signal=TERM 42", "step-TERM", "step-exit", "scontrol requeue 42"]
    assert "time-limit warning" in out and "stopped for the time limit (exit 143); requeue" in out


def test_term_waits_for_the_steps_and_does_not_requeue(tmp_path: Path, catalog: Catalog) -> None:
    text = render_sbatch(resolve(parse_jobspec(_spec()), catalog))
    proc, log, step_pid = _start(tmp_path, text)
    proc.send_signal(signal.SIGTERM)  # scancel / preemption: Slurm signals the batch shell and the steps
    time.sleep(0.2)
    assert proc.poll() is None  # the shell is still waiting for its step
    os.kill(int(step_pid.read_text()), signal.SIGTERM)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 143  # the step's status: Slurm records the cancel or requeues a preempted job itself
    assert log.read_text().splitlines() == ["step-TERM", "step-exit"]
    assert "waiting for the steps to checkpoint" in out


def test_usr2_stops_the_steps_then_cancels_the_job(tmp_path: Path, catalog: Catalog) -> None:
    text = render_sbatch(resolve(parse_jobspec(_spec()), catalog))
    proc, log, _ = _start(tmp_path, text)
    proc.send_signal(signal.SIGUSR2)  # fmstack cancel: scancel --batch --signal=USR2
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 143  # the steps' status; the job's state is CANCELLED by its own scancel
    # the steps got SIGTERM through scancel --signal=TERM, saved and exited, and only then the job was cancelled
    assert log.read_text().splitlines() == ["scancel --signal=TERM 42", "step-TERM", "step-exit", "scancel 42"]
    assert "cancel requested: checkpoint and stop" in out and "stopped for cancel (exit 143)" in out
    assert "requeue" not in out
