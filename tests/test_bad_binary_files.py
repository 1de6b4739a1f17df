"""A binary file where a text input is expected (an image or a gzip in the catalog folder, a profile saved as
something else): one line naming the input, exit code 2, no traceback. Before session 20 each of these raised
UnicodeDecodeError (a ValueError, not the OSError the readers caught) with a traceback.

The rows of tests/bad_inputs.py write their files as text, so these cases live here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

_BINARY = b"\xff\xfe\x00\x01\x89PNG\r\n\x1a\n"  # not UTF-8 from the first byte


def _fmstack(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fmstack", *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )


def _one_line_exit_2(proc: subprocess.CompletedProcess[str], expected: str) -> None:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("fmstack: error:")
    assert expected in lines[0], lines[0]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["catalog", "list", "--catalog", "@dir"], "bin.yaml: not UTF-8 text (byte 0); expected a catalog YAML file"),
        (["estimate", "train", "--model", "@file.yaml", "--instance", "p5.48xlarge"],
         "bin.yaml: not UTF-8 text (byte 0); expected a catalog YAML file"),
        (["launch", "@file.yaml", "--on", "slurm", "--dry-run"],
         "bin.yaml: not UTF-8 text (byte 0); expected a JobSpec in YAML or TOML"),
        (["launch", "@file.toml", "--on", "local", "--dry-run"],
         "bin.toml: not UTF-8 text (byte 0); expected a JobSpec in YAML or TOML"),
        (["estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--calibration", "@file.json"],
         "calibration: bin.json is not UTF-8 JSON text (byte 0); a binary file?"),
        (["estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--calibration", "@file.json"],
         "calibration: bin.json is not UTF-8 JSON text (byte 0); a binary file?"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)  # fmt: skip
def test_a_binary_input_file_is_one_line(argv: list[str], expected: str, tmp_path: Path) -> None:
    (tmp_path / "cat").mkdir()
    (tmp_path / "cat" / "bin.yaml").write_bytes(_BINARY)
    args = []
    for a in argv:
        if a == "@dir":
            args.append("cat")
        elif a.startswith("@file"):
            name = "bin" + a[len("@file") :]
            (tmp_path / name).write_bytes(_BINARY)
            args.append(name)
        else:
            args.append(a)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    _one_line_exit_2(_fmstack(*args, cwd=tmp_path), expected)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_a_binary_file_in_the_catalog_env_folder_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "logo.yaml").write_bytes(_BINARY)
    proc = subprocess.run(
        [sys.executable, "-m", "fmstack", "catalog", "list", "gpu"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**os.environ, "FMSTACK_CATALOG": str(tmp_path)},
    )  # fmt: skip
    _one_line_exit_2(proc, "logo.yaml: not UTF-8 text (byte 0)")
