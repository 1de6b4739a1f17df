"""The launcher interface and its registry: one file per launcher, one line here to add one."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Protocol

from fmstack.errors import InputError
from fmstack.orchestration.jobspec import ResolvedJob


@dataclass(frozen=True, kw_only=True, slots=True)
class Submission:
    """What a submit produced: the job id (``<launcher>:<native id>``) and the rendered text."""

    job_id: str
    rendered: str
    dry_run: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class JobStatus:
    """A scheduler's view of one job, normalised: PENDING, RUNNING, COMPLETED, FAILED, CANCELLED or UNKNOWN."""

    job_id: str
    state: str
    detail: str = ""
    restarts: int = 0


ENDED = ("COMPLETED", "FAILED", "CANCELLED")
"""Final states: a cancel has nothing to stop."""


class AlreadyEnded(Exception):
    """Cancel of a job that has already ended (its final state in ``state``): the CLI says so and exits 0."""

    def __init__(self, state: str) -> None:
        super().__init__(state)
        self.state = state


class Launcher(Protocol):
    """Render a resolved job to text, submit it through the one seam, query and cancel it."""

    name: str

    def render(self, job: ResolvedJob) -> str: ...

    def submit(self, job: ResolvedJob, *, dry_run: bool = False) -> Submission: ...

    def status(self, native_id: str) -> JobStatus: ...

    def cancel(self, native_id: str) -> None: ...


# name -> "module:class"; imported on use so `--on local` never imports the kubernetes client
LAUNCHERS: dict[str, str] = {
    "local": "fmstack.orchestration.launchers.local:LocalLauncher",
    "slurm": "fmstack.orchestration.launchers.slurm:SlurmLauncher",
    "kubernetes": "fmstack.orchestration.launchers.kubernetes:KubernetesLauncher",
    "pytorchjob": "fmstack.orchestration.launchers.pytorchjob:PyTorchJobLauncher",
}


def get_launcher(name: str) -> Launcher:
    target = LAUNCHERS.get(name)
    if target is None:
        raise InputError("--on", f"unknown launcher {name!r}; allowed: {', '.join(sorted(LAUNCHERS))}")
    module, cls = target.split(":")
    launcher: Launcher = getattr(importlib.import_module(module), cls)()
    return launcher


def split_job_id(job_id: str) -> tuple[Launcher, str]:
    """``slurm:123`` -> (the Slurm launcher, "123")."""
    kind, sep, native = job_id.partition(":")
    if not sep or not native or kind not in LAUNCHERS:
        raise InputError(
            "ID", f"{job_id!r} is not a job id like slurm:123, local:NAME-..., kubernetes:ns/name or pytorchjob:ns/name"
        )
    return get_launcher(kind), native
