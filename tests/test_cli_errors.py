"""Bad input across every command: one line on stderr naming the field, exit code 2, no traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fmstack.cli.common import print_json
from tests.bad_inputs import BAD_ARGV, BAD_FILES


def _materialise(argv: list[str], tmp: Path) -> list[str]:
    out = []
    for arg in argv:
        if arg.startswith("@dir:"):
            d = tmp / "cat"
            d.mkdir(exist_ok=True)
            (d / arg[5:]).write_text(BAD_FILES[arg[5:]])
            out.append(str(d))
        elif arg.startswith("@file:"):
            f = tmp / arg[6:]
            f.write_text(BAD_FILES[arg[6:]])
            out.append(str(f))
        else:
            out.append(arg)
    return out


@pytest.mark.parametrize(("argv", "expected"), BAD_ARGV, ids=[" ".join(a) for a, _ in BAD_ARGV])
def test_bad_input_is_one_line_exit_2(argv: list[str], expected: str, tmp_path: Path) -> None:
    args = _materialise(argv, tmp_path)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    proc = subprocess.run(
        [sys.executable, "-m", "fmstack", *args], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    err_lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2, proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr
    assert len(err_lines) == 1, proc.stderr
    assert err_lines[0].startswith("fmstack: error:")
    assert expected in err_lines[0]
    assert sorted(p.name for p in tmp_path.rglob("*")) == before, "bad input must not create or remove files"


def test_json_output_is_strict_json(capsys: pytest.CaptureFixture[str]) -> None:
    """NaN / inf (an empty side-check summary, a numpy scalar) print as null: `NaN` is not JSON and jq refuses it."""
    print_json({"a": float("nan"), "b": [1.5, float("inf")], "c": np.float32("nan"), "d": np.float64(2.0)})
    assert json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"non-JSON {c}")) == {
        "a": None, "b": [1.5, None], "c": None, "d": 2.0,
    }  # fmt: skip
