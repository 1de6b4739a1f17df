"""The sbatch script's requeue on exit codes (``retry.requeue_exit_codes``): what it matches, when it stops.

- **A failed node's own code.** srun returns the highest task status, and a task killed by a signal (128 + signal)
  outranks every exit code (srun(1), RETURN VALUE; SchedMD slurm ``src/srun/launch.c``, ``_task_finish``). With
  ``--kill-on-bad-exit``, when one node's torchrun exits 1 srun terminates the other nodes' tasks and exits 143 or
  137, so ``requeue_exit_codes: [1]`` matched srun's status only when every node had failed before srun signalled
  any (on the test cluster a 2-node job whose worker died on one node ended FAILED in 2 of 3 tries). srun names
  each task's code on its stderr (``srun: error: n2: task 1: Exited with exit code 1``): the script sends srun's
  stderr to the log through an awk copier that keeps those codes, and matches them as well as srun's status.
- **Not after a cancel.** A batch shell that got SIGTERM (``scancel``, ``fmstack cancel --now``, preemption, the time
  limit without a warning) is ending: torchrun exits 1 on the SIGTERM it forwards, and with ``[1]`` the script
  requeued the job it was asked to cancel (PENDING again, ``restarts=1``, on the test cluster).
- **Failures only count.** ``SLURM_RESTART_COUNT`` counts every requeue, the time-limit ones too; those are counted
  in the job's log and taken off, so ``max_restarts`` bounds failures (a run requeued at 3 time limits with
  ``max_restarts: 3`` was no longer requeued on any failure).
"""

from __future__ import annotations

import shlex

TIME_LIMIT_REQUEUE = "fmstack: stopped for the time limit"
"""The log line of a time-limit requeue (``slurm._after_stop``); the exit-code requeue counts them back out."""

SRUN_TASK_EXIT = r"/ tasks? [0-9,-]+: Exited with exit code [0-9]+$/"
"""srun's message for tasks that exited with a code (``_task_finish``: ``"%s: %s %s: Exited with exit code %d"``,
hosts, "task" or "tasks", the task ids, the code), as an awk pattern."""

SRUN_STDERR = "2>&3"
"""srun's stderr redirection: fd 3 is the copier's FIFO (or the batch stderr when no FIFO could be made)."""


def before_srun() -> list[str]:
    """Start the copier: awk reads srun's stderr from a FIFO in ``$TMPDIR``, writes every line to the log and the
    codes of srun's task-exit lines to a file. It ignores SIGTERM and SIGINT, so the log keeps srun's last lines
    on a cancel. Without a FIFO (``mktemp`` failed) srun writes to the log directly and only its status is matched."""
    return [
        "# srun exits 128 + signal once it has killed the other nodes' tasks (--kill-on-bad-exit): the failing task's",
        "# own exit code is in srun's message 'task N: Exited with exit code C', kept here as srun's stderr goes to the log",
        "exec 3>&2",
        'if srun_msgs=$(mktemp -d "${TMPDIR:-/tmp}/fmstack-srun.XXXXXX") && mkfifo "$srun_msgs/stderr"; then',
        "  (trap '' TERM INT; exec awk -v f=\"$srun_msgs/codes\" '{ print; fflush() } "
        + SRUN_TASK_EXIT
        + ' { print $NF > f; fflush(f) }\' < "$srun_msgs/stderr" >&2) &',
        "  copier_pid=$!",
        '  exec 3> "$srun_msgs/stderr"',
        "fi",
    ]


def after_srun_started() -> list[str]:
    """Close the shell's own end of the FIFO, so the copier sees the end of it when srun exits."""
    return ["exec 3>&-"]


def after_srun_ended() -> list[str]:
    """Wait for the copier to drain (a trap interrupts ``wait``, hence the loop), read the codes, clean up."""
    return [
        'if [ -n "${copier_pid:-}" ]; then while kill -0 "$copier_pid" 2>/dev/null; do wait "$copier_pid"; done; fi',
        'task_codes=$(sort -un "${srun_msgs:-/nonexistent}/codes" 2>/dev/null | tr "\\n" " ")',
        '[ -n "${srun_msgs:-}" ] && rm -rf "$srun_msgs"',
    ]


def requeue_lines(codes: list[int], max_restarts: int, log_words: str | None) -> list[str]:
    """The end of the script: requeue when srun's status or a task's own exit code is one of ``codes``, while the
    failure requeues so far are fewer than ``max_restarts``; never after SIGTERM to the batch shell. With
    ``log_words`` (the job's log as shell words; a job with a time-limit warning) the time-limit requeues logged
    there are taken off ``SLURM_RESTART_COUNT``."""
    if not codes:
        return ['exit "$rc"']
    restarts = '"${SLURM_RESTART_COUNT:-0}"'
    count: list[str] = []
    if log_words is not None:
        restarts = '"$failures"'
        count = [
            "# time-limit requeues (above) are not failures: they do not count against retry.max_restarts",
            f"limit_requeues=$(grep -c {shlex.quote('^' + TIME_LIMIT_REQUEUE)} {log_words} 2>/dev/null)",
            "failures=$(( ${SLURM_RESTART_COUNT:-0} - ${limit_requeues:-0} ))",
        ]
    return [
        "# SIGTERM to this shell (scancel, preemption, the time limit): the job is ending, Slurm decides what follows",
        'if [ "$stop" = TERM ]; then',
        '  echo "fmstack: SIGTERM to the batch shell: the job ends here (exit $rc), not requeued"; exit "$rc"',
        "fi",
        *count,
        f"for code in {' '.join(str(c) for c in codes)}; do",
        '  case " $rc $task_codes " in *" $code "*)',
        f"    if [ {restarts} -lt {max_restarts} ]; then",
        '      echo "fmstack: task exit code $code asks for a requeue (srun exited $rc)"; scontrol requeue "$SLURM_JOB_ID"'
        "; exit 0",
        "    fi ;;",
        "  esac",
        "done",
        'exit "$rc"',
    ]
