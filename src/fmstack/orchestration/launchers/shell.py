"""The one seam to the operating system: every scheduler command goes through ``run`` (or ``spawn`` for a
background process). Tests patch these two names; nothing else in the launchers starts a process.

Arguments are always an argv list (never ``shell=True``), so user text reaches a program as one argument.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from fmstack.errors import InputError


def run(argv: Sequence[str], *, input_text: str | None = None, timeout_s: float = 60.0) -> str:
    """Run a command to completion and return stdout; a missing program or non-zero exit is one clear error."""
    try:
        proc = subprocess.run(
            list(argv), input=input_text, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except FileNotFoundError:
        raise InputError("launcher", f"{argv[0]!r} not found on PATH; is the scheduler's client installed?") from None
    except subprocess.TimeoutExpired:
        raise InputError("launcher", f"{argv[0]} did not answer within {timeout_s:g} s") from None
    if proc.returncode != 0:
        err = " ".join((proc.stderr or proc.stdout).split())[:300]
        raise InputError("launcher", f"{argv[0]} exited {proc.returncode}: {err}")
    return proc.stdout


def spawn(argv: Sequence[str], *, log_path: Path, env: Mapping[str, str] | None = None) -> int:
    """Start a detached background process (its own session) writing to ``log_path``; returns its PID."""
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            list(argv), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            env=dict(env) if env is not None else None,
        )  # fmt: skip
    return proc.pid
