"""Bad input to `fmstack exporter` / `fmstack health`: one line naming the field, exit 2, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BAD_FILES: dict[str, bytes] = {}

BAD_ARGV: list[tuple[list[str], str]] = [
    (["exporter", "--backend", "none", "--no-efa", "--expected-efa", "32", "--once"], "--expected-efa: not with --no-efa"),
]  # fmt: skip


def _materialise(argv: list[str], tmp: Path) -> list[str]:
    out = []
    for arg in argv:
        if arg.startswith("@file:"):
            (tmp / arg[6:]).write_bytes(BAD_FILES[arg[6:]])
            out.append(str(tmp / arg[6:]))
        else:
            out.append(arg)
    return out


@pytest.mark.parametrize(("argv", "expected"), BAD_ARGV, ids=[" ".join(a) for a, _ in BAD_ARGV])
def test_bad_input_is_one_line_exit_2(argv: list[str], expected: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "fmstack", *_materialise(argv, tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2, proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr and len(lines) == 1, proc.stderr
    assert expected in lines[0], lines[0]
