"""Paths a job names that its container does not mount: warnings before submission.

A containerised task (Slurm with ``image`` through pyxis/enroot, every Kubernetes pod) sees the host's file systems
only where they are mounted. A path in ``env`` (``HF_HOME: /fsx/hf``) or in the program's arguments
(``--metrics-file /fsx/m.jsonl``) that no mount covers resolves in the container's own file system: the cache is
rebuilt on every start and the metrics file is lost with the container, without an error. Warnings, not errors: the
path may be meant to live in the image.
"""

from __future__ import annotations

import os
import re

from fmstack.orchestration.jobspec import JobSpec, ResolvedJob
from fmstack.orchestration.launchers.slurm import container_mount_entries

URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
"""A value that starts with a URL scheme (RFC 3986: ``scheme "://"``)."""

IMAGE_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc", "/opt", "/proc", "/sys", "/dev")
"""Paths that belong to the image or the kernel (FHS), not to a host file system: never warned about."""


def named_paths(spec: JobSpec) -> list[tuple[str, str]]:
    """(field, absolute path) for each path in ``env`` values (``:``-separated lists too) and in the program's
    arguments (``workload.extra_args``; a ``command``'s arguments after the executable), ``--flag=/path`` too."""
    out: list[tuple[str, str]] = []
    for key, value in sorted(spec.env.items()):
        if URL.match(value):  # a URL (http://proxy:3128, s3://bucket/x) is no path, and its ':' splits nothing
            continue
        out += [(f"env.{key}", part) for part in value.split(":") if part.startswith("/") and not part.startswith("//")]
    if spec.workload is not None:
        field, args = "workload.extra_args", spec.workload.extra_args
    else:
        field, args = "command", (spec.command or [])[1:]
    for arg in args:
        value = arg if arg.startswith("/") else arg.partition("=")[2]
        if value.startswith("/") and not value.startswith("//"):
            out.append((field, value))
    return [(f, p) for f, p in dict.fromkeys(out) if not _under(p, IMAGE_DIRS)]


def _under(path: str, dirs: tuple[str, ...] | list[str]) -> bool:
    path = os.path.normpath(path)
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in (os.path.normpath(d) for d in dirs))


def container_paths(job: ResolvedJob, target: str) -> list[str] | None:
    """The paths mounted into the job's container on ``target``, or None where the job runs on the host (local;
    Slurm without ``image``). Kubernetes pods get ``/dev/shm`` and, with ``checkpoint.pvc``, the claim at
    ``checkpoint.location`` (``k8s_manifests``); nothing else of the host."""
    spec = job.spec
    if target == "slurm":
        entries = container_mount_entries(job)
        return [dst for _, dst, _ in entries] if entries else None
    if target in ("kubernetes", "pytorchjob"):
        ck = spec.checkpoint
        return ["/dev/shm", *([ck.location] if ck is not None and ck.pvc is not None else [])]
    return None


def mount_warnings(job: ResolvedJob, target: str) -> list[str]:
    """One line per path the container does not mount, and one if ``container_mounts`` is set where it does nothing."""
    spec = job.spec
    lines = []
    if spec.container_mounts and not (target == "slurm" and spec.image):
        where = "Slurm without image runs on the host" if target == "slurm" else f"--on {target} ignores it"
        lines.append(f"warning: container_mounts is for Slurm containers (image, pyxis); {where}")
    mounts = container_paths(job, target)
    if mounts is None:
        return lines
    if target == "slurm":
        fix = "add it (or a parent) to container_mounts"
    else:
        fix = "the pods mount only /dev/shm and checkpoint.pvc at checkpoint.location: put it under one of them"
    for field, path in named_paths(spec):
        if not _under(path, mounts):
            lines.append(
                f"warning: {field} {path!r} is not under a container mount ({', '.join(mounts)}): it is written to "
                f"the container's own file system and lost when the container ends; {fix}"
            )
    return lines
