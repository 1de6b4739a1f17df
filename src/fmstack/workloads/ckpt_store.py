"""Checkpoint directories on any fsspec location: naming, the atomic commit marker, listing and retention.

Layout under a root (a local path or an fsspec URL such as ``s3://bucket/run``)::

    step_00000012/            torch.distributed.checkpoint files (.metadata, __0_0.distcp, ...)
    step_00000012/COMMITTED   written last, atomically; only directories with it are ever loaded

A save that is killed half-way leaves a directory without ``COMMITTED``; it is ignored and later pruned.
No torch here, so the launcher can check locations and tests can inspect checkpoints cheaply.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any

import fsspec

MARKER = "COMMITTED"
_STEP_DIR = re.compile(r"^step_(\d{8})$")


def step_dir(root: str, step: int) -> str:
    return f"{root.rstrip('/')}/step_{step:08d}"


def filesystem(root: str, storage_options: Mapping[str, Any] | None = None) -> tuple[Any, str]:
    """The fsspec filesystem and the protocol-less path for ``root``."""
    fs, path = fsspec.core.url_to_fs(root, **dict(storage_options or {}))
    return fs, str(path)


def _steps(fs: Any, path: str) -> dict[int, str]:
    if not fs.exists(path):
        return {}
    out: dict[int, str] = {}
    for entry in fs.ls(path, detail=False, refresh=True) if _is_remote(fs) else fs.ls(path, detail=False):
        m = _STEP_DIR.match(str(entry).rstrip("/").rsplit("/", 1)[-1])
        if m:
            out[int(m.group(1))] = str(entry).rstrip("/")
    return out


def _is_remote(fs: Any) -> bool:
    return "file" not in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,))


def committed_steps(root: str, storage_options: Mapping[str, Any] | None = None) -> list[int]:
    """Steps under ``root`` whose commit marker exists, oldest first."""
    fs, path = filesystem(root, storage_options)
    return sorted(s for s, d in _steps(fs, path).items() if fs.exists(f"{d}/{MARKER}"))


def all_steps(root: str, storage_options: Mapping[str, Any] | None = None) -> list[int]:
    """Every step directory under ``root``, committed or not, oldest first."""
    fs, path = filesystem(root, storage_options)
    return sorted(_steps(fs, path))


def read_marker(root: str, step: int, storage_options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    fs, path = filesystem(root, storage_options)
    with fs.open(f"{step_dir(path, step)}/{MARKER}", "r") as f:
        data: dict[str, Any] = json.load(f)
    return data


def write_marker(
    root: str, step: int, info: Mapping[str, Any], storage_options: Mapping[str, Any] | None = None
) -> None:
    """Write ``COMMITTED`` atomically: a temporary file renamed into place locally, one PUT on object stores."""
    fs, path = filesystem(root, storage_options)
    target = f"{step_dir(path, step)}/{MARKER}"
    body = json.dumps(dict(info), sort_keys=True)
    if _is_remote(fs):
        fs.pipe_file(target, body.encode())
        return
    tmp = f"{target}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(body)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target)
    dir_fd = os.open(os.path.dirname(target), os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def upload(local_root: str, step: int, durable_root: str, storage_options: Mapping[str, Any] | None = None) -> None:
    """Copy a committed local checkpoint to the durable tier: data files first, the marker last."""
    fs, path = filesystem(durable_root, storage_options)
    src = step_dir(local_root, step)
    dst = step_dir(path, step)
    if not _is_remote(fs):
        fs.makedirs(dst, exist_ok=True)
    for name in sorted(os.listdir(src)):
        if name.startswith(MARKER):
            continue
        fs.put_file(os.path.join(src, name), f"{dst}/{name}")
    with open(os.path.join(src, MARKER), encoding="utf-8") as f:
        info = json.load(f)
    write_marker(durable_root, step, info, storage_options)


def prune(
    root: str,
    keep_last: int,
    *,
    protect: frozenset[int] = frozenset(),
    storage_options: Mapping[str, Any] | None = None,
) -> list[int]:
    """Keep the newest ``keep_last`` committed checkpoints; delete older ones and partial ones older than the newest
    committed (a partial newer than that may still be being written). Returns the deleted steps."""
    if keep_last < 1:
        raise ValueError(f"keep_last({keep_last}) must be >= 1")
    fs, path = filesystem(root, storage_options)
    dirs = _steps(fs, path)
    done = sorted(s for s, d in dirs.items() if fs.exists(f"{d}/{MARKER}"))
    if not done:
        return []
    keep = set(done[-keep_last:]) | set(protect)
    newest = done[-1]
    doomed = [s for s in sorted(dirs) if s not in keep and s < newest]
    for s in doomed:
        # the marker goes first so a half-deleted directory is never taken for a complete one
        marker = f"{dirs[s]}/{MARKER}"
        if fs.exists(marker):
            fs.rm(marker)
        fs.rm(dirs[s], recursive=True)
    return doomed
