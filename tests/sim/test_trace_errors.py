"""Bad trace files: one line naming the column and row, exit 2, no traceback (file-based rows of
tests/bad_inputs.py live here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CASES = [
    (b"job_id,submit_s,num_gpus,duration_s\n1.5,0,8,100\n", "t.csv line 2: job_id='1.5' must be a whole number"),
    (b"job_id,submit_s,num_gpus,tokens\n1,0,8,1e9\n", "t.csv line 2: model is empty: a row with tokens and no"),
    (b"job_id,submit_s,num_gpus,duration_s\n1,0,8,abc\n", "t.csv line 2: duration_s='abc' is not a number"),
    (b"\xff\xfe garbage\x00job_id,submit_s\n", "t.csv is not UTF-8 text (byte 0)"),
]


@pytest.mark.parametrize(("content", "expected"), CASES, ids=["job_id-1.5", "tokens-no-model", "abc", "utf8"])
def test_bad_trace_is_one_line_exit_2(content: bytes, expected: str, tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_bytes(content)
    proc = subprocess.run(
        [sys.executable, "-m", "fmstack", "simulate", "--nodes", "2", "--days", "1", "--trace", str(trace)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("fmstack: error: trace: "), proc.stderr
    assert expected in lines[0]
