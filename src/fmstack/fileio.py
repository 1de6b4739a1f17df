"""Atomic file writes: a temporary file in the same folder, then a rename.

A failed or interrupted write never leaves a half-written file over what the user had. Every layer that writes
a user-visible file (reports, profiles, snapshots) goes through :func:`atomic_write_text`.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from fmstack.errors import InputError


def atomic_write_text(path: str | os.PathLike[str], text: str, *, field: str = "path", mode: int | None = None) -> Path:
    """Write ``text`` to ``path`` atomically; InputError naming ``field`` when the folder is missing or read-only."""
    target = Path(path)
    folder = target.parent
    if not folder.is_dir():
        raise InputError(field, f"folder {folder} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise InputError(field, f"cannot write in {folder}: {exc.strerror}") from None
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
