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
    (b"job_id,submit_s,num_gpus,duration_s\n1,0,8,0.5\n", "t.csv line 2: duration_s=0.5 is below 1 s, the shortest"),
]


@pytest.mark.parametrize(("content", "expected"), CASES,
                         ids=["job_id-1.5", "tokens-no-model", "abc", "utf8", "half-second"])  # fmt: skip
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


def test_a_byte_order_mark_is_not_part_of_the_first_column(tmp_path: Path) -> None:
    # Excel's "CSV UTF-8" starts the file with EF BB BF; until 2026-11-24 the header's first column read
    # "\ufeffjob_id" and the trace was refused for lacking job_id (review)
    from fmstack.sim.workload import read_trace

    trace = tmp_path / "bom.csv"
    trace.write_bytes(b"\xef\xbb\xbfjob_id,submit_s,num_gpus,duration_s\n7,0,8,3600\n")
    (job,) = read_trace(trace, fleet_gpus=16, gpus_per_node=8)
    assert (job.job_id, job.num_gpus, job.work_s) == (7, 8, 3600.0)


def test_a_one_second_job_runs_without_warnings(tmp_path: Path) -> None:
    # the shortest job allowed: 1 s on 8 GPUs = 8 GPU-s allocated, all of it productive (no checkpoint, no fault)
    trace = tmp_path / "one.csv"
    trace.write_text("job_id,submit_s,num_gpus,duration_s\n1,0,8,1\n")
    proc = subprocess.run(
        [sys.executable, "-W", "error", "-m", "fmstack", "simulate", "--nodes", "2", "--days", "1", "--faults", "none",
         "--trace", str(trace), "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    import json

    out = json.loads(proc.stdout)
    assert out["gpu_hours"]["allocated"] == round(8 / 3600, 3) and out["jobs"]["completed"] == 1
