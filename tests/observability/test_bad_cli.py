"""Bad input to `fmstack exporter` / `fmstack health`: one line naming the field, exit 2, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BAD_FILES: dict[str, bytes] = {
    "signals_binary.json": b"\x89PNG\r\n\x1a\n\x00\xff\xfe",
    "signals_xid154.json": b'{"node": "n1", "xids": [154], "xid154_action": "drain_and_reset"}',
    "signals_nan_thermal.json": b'{"node": "n1", "thermal_violation_ratio": NaN}',
    "signals_nan_sbe.json": b'{"node": "n1", "sbe_rate_per_hour": NaN}',
    "signals_inf_sbe.json": b'{"node": "n1", "sbe_rate_per_hour": Infinity}',
    "nvml_power_text.json": b'{"gpus": [{"power_w": "abc"}]}',
    "nvml_remap_number.json": b'{"gpus": [{"row_remap_failure": 1}]}',
    "nvml_script_gpu.json": b'{"gpus": [{}], "script": [{"at_poll": 1, "gpu": 3, "xid": 79}]}',
}

BAD_ARGV: list[tuple[list[str], str]] = [
    (["exporter", "--backend", "none", "--no-efa", "--expected-efa", "32", "--once"], "--expected-efa: not with --no-efa"),
    (["exporter", "--backend", "fake", "--fake-script", "@file:nvml_power_text.json", "--once"],
     "gpus[0].power_w: expected float or null, got 'abc'"),
    (["exporter", "--backend", "fake", "--fake-script", "@file:nvml_remap_number.json", "--once"],
     "gpus[0].row_remap_failure: expected bool or null, got 1"),
    (["exporter", "--backend", "fake", "--fake-script", "@file:nvml_script_gpu.json", "--once"],
     "script[0].gpu: 3 is not one of the 1 GPUs"),
    (["health", "--signals", "@file:signals_binary.json"], "is not UTF-8 JSON text"),
    (["health", "--signals", "@file:signals_xid154.json"], "xid154_action: unknown Xid 154 recovery action 'drain_and_reset'; allowed"),
    (["health", "--signals", "@file:signals_nan_thermal.json"], "thermal_violation_ratio: must be a finite number, got nan"),
    (["health", "--signals", "@file:signals_nan_sbe.json"], "sbe_rate_per_hour: must be a finite number, got nan"),
    (["health", "--signals", "@file:signals_inf_sbe.json"], "sbe_rate_per_hour: must be a finite number, got inf"),
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
