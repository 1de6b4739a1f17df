"""Atomic file writes: a temporary file in the same folder, then a rename.

A failed or interrupted write never leaves a half-written file over what the user had. Every layer that writes
a user-visible file (reports, profiles, snapshots) goes through :func:`atomic_write_text`.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from fmstack.errors import InputError


def check_output_path(path: str | os.PathLike[str], *, field: str, example: str = "report.html") -> Path:
    """Refuse, before a long run rather than after it, an output path whose folder is missing or that is a folder
    (``example``: the file name the message suggests inside it)."""
    target = Path(path).expanduser()
    if target.is_dir():
        raise InputError(field, f"{target} is a directory; give a file name, e.g. {target / example}")
    if not target.parent.is_dir():
        raise InputError(field, f"folder {target.parent} does not exist")
    return target


def atomic_write_text(path: str | os.PathLike[str], text: str, *, field: str = "path", mode: int | None = None) -> Path:
    """Write ``text`` to ``path`` atomically; InputError naming ``field`` when the folder is missing or read-only, or
    the path is a folder. The file gets ``mode``, else the mode of the file it replaces, else the umask's default
    (as ``open`` would create it; a bare temporary file would be 0600)."""
    target = check_output_path(path, field=field)
    folder = target.parent
    if mode is None and target.exists():
        mode = stat.S_IMODE(target.stat().st_mode)
    try:
        fd, tmp = _create_temp(folder, target.name)
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


def _create_temp(folder: Path, name: str) -> tuple[int, str]:
    """A new file beside the target, created with mode 0o666 less the umask (what ``open`` gives a new file)."""
    for _ in range(100):
        tmp = folder / f".{name}.{secrets.token_hex(4)}.tmp"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), str(tmp)
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {folder / name}")
