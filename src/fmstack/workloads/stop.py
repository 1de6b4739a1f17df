"""Graceful stop on SIGTERM / SIGUSR1: finish the step, agree on it across ranks, checkpoint it, exit.

Who sends what: ``fmstack cancel`` (local: SIGTERM to every process of the job, SIGKILL 30 s later), Slurm (SIGTERM
on ``scancel``, preemption and the time limit, SIGKILL ``KillWait`` later; the batch script turns the time-limit
warning ``--signal=B:USR1@N`` into a SIGTERM to the job steps), Kubernetes (SIGTERM on pod deletion, SIGKILL
``terminationGracePeriodSeconds`` later), torchrun (forwards SIGTERM to its workers and SIGKILLs them
``--shutdown-timeout`` later). The handler only records the signal; the training loop reads it once per step.

Ranks receive the signal at different times (one may be inside the step's all-reduce when it arrives), so the
decision is a collective: each rank adds its flag to the per-step loss all-reduce and every rank sees the same sum
after the same step; all stop there, save that step and exit. This is what torchtitan, Megatron-LM
(``--exit-signal-handler``: the flag is all-gathered each step) and NeMo / Lightning (SIGUSR1 on Slurm) do.

The exit status is ``128 + signal number`` (143 for SIGTERM, 138 for SIGUSR1), the shell's convention for "ended
by this signal": a retrying launcher (the local loop, Kubernetes ``restartPolicy: OnFailure``, the Kubeflow
``ExitCode`` policy that retries 128-255) restarts and resumes; a cancelled job is not restarted because its
launcher is stopping too.
"""

from __future__ import annotations

import signal
from types import FrameType, TracebackType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


def exit_status(signum: int) -> int:
    """The exit status of a run stopped by ``signum``: 128 + the signal number (bash(1), "EXIT STATUS")."""
    return 128 + signum


class StopRequest:
    """Records the first stop signal; a context manager that installs the handlers and restores the old ones.

    Idempotent: torchrun forwards the SIGTERM the launcher already sent to each worker, so a worker often gets two.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self._old: dict[int, object] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def __enter__(self) -> StopRequest:
        for sig in STOP_SIGNALS:
            self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)  # type: ignore[arg-type]
        self._old.clear()
