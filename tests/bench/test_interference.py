"""The interference watch (bench.interference): /proc/stat arithmetic and a real neighbour."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from fmstack.bench import interference
from fmstack.bench.interference import BUSY_SHARE_LIMIT, CpuShare, CpuWatch

LINUX = Path("/proc/stat").exists()


def test_share_counts_other_processes_and_steal_against_capacity() -> None:
    # 10 s on 2 CPUs = 20 CPU-s of capacity; 6 busy of which 5 ours -> 1 other + 1 steal = 10 %
    share = CpuShare(wall_s=10.0, cpus=2, busy_s=6.0, own_s=5.0, steal_s=1.0)
    assert share.others_s == pytest.approx(1.0)
    assert share.others_share == pytest.approx(0.10)
    assert share.disturbed
    assert "10.0 % of capacity" in share.describe()
    # clock-tick rounding: own slightly above busy is no negative neighbour
    quiet = CpuShare(wall_s=10.0, cpus=2, busy_s=6.0, own_s=6.02, steal_s=0.0)
    assert quiet.others_s == 0.0 and not quiet.disturbed
    assert CpuShare(wall_s=10.0, cpus=2, busy_s=0.0, own_s=0.0, steal_s=20 * BUSY_SHARE_LIMIT).others_share == (
        pytest.approx(BUSY_SHARE_LIMIT)
    )


def test_read_stat_parses_the_cpu_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  100 10 50 900 7 3 2 40 0 0\ncpu0 50 5 25 450 3 1 1 20 0 0\ncpu1 50 5 25 450 4 2 1 20 0 0\n"
                    "intr 1\n")  # fmt: skip
    monkeypatch.setattr(interference, "PROC_STAT", stat)
    hz = interference.os.sysconf("SC_CLK_TCK")
    busy, steal, cpus = interference._read_stat() or (0.0, 0.0, 0)
    assert busy == pytest.approx((100 + 10 + 50 + 3 + 2) / hz)  # idle and iowait are not busy
    assert steal == pytest.approx(40 / hz)
    assert cpus == 2


@pytest.mark.parametrize("text", ["", "garbage\n", "cpu 1 2\n", "cpu a b c d e f g h\n"])
def test_unreadable_stat_measures_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    stat = tmp_path / "stat"
    stat.write_text(text)
    monkeypatch.setattr(interference, "PROC_STAT", stat)
    with CpuWatch() as watch:
        pass
    assert watch.result is None


def test_missing_stat_measures_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(interference, "PROC_STAT", tmp_path / "absent")
    with CpuWatch() as watch:
        pass
    assert watch.result is None


BUSY = "import time\nend = time.monotonic() + {s}\nwhile time.monotonic() < end: pass\n"
BURN = "import time\nend = time.process_time() + {s}\nwhile time.process_time() < end: pass\n"
"""Spins until it has used {s} CPU-seconds, however long a loaded machine makes that take."""


@pytest.mark.skipif(not LINUX, reason="/proc/stat is Linux")
def test_a_reaped_child_is_ours_a_running_neighbour_is_not() -> None:
    # a child that ends (and is waited for) inside the watch: its CPU time is the run's own
    with CpuWatch() as ours:
        subprocess.run([sys.executable, "-c", BURN.format(s=0.6)], check=True)
    assert ours.result is not None
    assert ours.result.own_s >= 0.4
    # a process that keeps running through the watch and is reaped after it: another tenant of the machine
    neighbour = subprocess.Popen([sys.executable, "-c", BUSY.format(s=5)])
    try:
        time.sleep(0.3)  # past its interpreter start
        with CpuWatch() as theirs:
            time.sleep(1.0)
    finally:
        neighbour.kill()
        neighbour.wait()
    assert theirs.result is not None
    assert theirs.result.others_s >= 0.5  # a busy loop on one of the CPUs for ~1 s
    assert theirs.result.disturbed
