"""CPU time that other processes and the hypervisor took while a measurement ran (Linux ``/proc/stat``).

A benchmark on a shared machine measures its neighbours too. Two signs of that, both counted over the run:
- **other processes**: the machine's busy CPU time (user, nice, system, irq, softirq over all CPUs) less this
  process's own and its reaped children's (``os.times``): a tenant of the same VM, a daemon, a rank left over
  from an earlier job;
- **steal**: time the hypervisor ran another guest on this VM's virtual CPUs (``/proc/stat`` field 8; proc(5)).
Both are reported as a share of the machine's capacity over the run (wall time x CPUs). A steady neighbour
slows calibration and measurement alike; an intermittent one makes them disagree, so a run that saw either is
not evidence about a model. Off Linux (no ``/proc/stat``) nothing is measured and the watch returns None.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

PROC_STAT = Path("/proc/stat")
BUSY_FIELDS = (0, 1, 2, 5, 6)
"""user, nice, system, irq, softirq in the ``cpu`` line of /proc/stat (guest time is already inside user)."""
STEAL_FIELD = 7
BUSY_SHARE_LIMIT = 0.05
"""Share of the machine's capacity that others (processes plus steal) may take before a run counts as disturbed
(fmstack default: quiet runs of the closing loop on the 2-vCPU CI VM measured -0.3..+0.2 %, with a one-core
busy loop beside it 33-39 %; 2026-11-23)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CpuShare:
    """What the machine's CPUs did during one measurement (seconds, all CPUs together)."""

    wall_s: float
    cpus: int
    busy_s: float
    own_s: float
    """This process and its reaped children (the ranks of a spawned job, once joined)."""
    steal_s: float

    @property
    def others_s(self) -> float:
        """Busy CPU time of every other process (clock-tick rounding can make the raw difference slightly < 0)."""
        return max(0.0, self.busy_s - self.own_s)

    @property
    def others_share(self) -> float:
        """Other processes plus steal, as a share of the capacity (wall x CPUs)."""
        capacity = self.wall_s * self.cpus
        return (self.others_s + self.steal_s) / capacity if capacity > 0 else 0.0

    @property
    def disturbed(self) -> bool:
        return self.others_share > BUSY_SHARE_LIMIT

    def describe(self) -> str:
        return (
            f"other processes {self.others_s:.1f} CPU-s and steal {self.steal_s:.1f} s over {self.wall_s:.1f} s on "
            f"{self.cpus} CPUs ({100 * self.others_share:.1f} % of capacity)"
        )


def _read_stat() -> tuple[float, float, int] | None:
    """(busy, steal) CPU seconds since boot over all CPUs and the number of CPUs, None where /proc/stat is
    missing or unreadable."""
    try:
        lines = PROC_STAT.read_text(encoding="ascii").splitlines()
        first = lines[0].split()
        if first[0] != "cpu" or len(first) < STEAL_FIELD + 2:
            return None
        ticks = [int(v) for v in first[1:]]
    except (OSError, IndexError, ValueError):
        return None
    cpus = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit())
    hz = float(os.sysconf("SC_CLK_TCK"))
    return sum(ticks[i] for i in BUSY_FIELDS) / hz, ticks[STEAL_FIELD] / hz, max(cpus, 1)


def _own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class CpuWatch:
    """``with CpuWatch() as w: ...`` then ``w.result`` (None off Linux)."""

    def __init__(self) -> None:
        self.result: CpuShare | None = None
        self._start: tuple[float, float, float, float] | None = None

    def __enter__(self) -> CpuWatch:
        stat = _read_stat()
        self._start = None if stat is None else (time.monotonic(), stat[0], stat[1], _own_cpu_s())
        return self

    def __exit__(self, *exc: object) -> None:
        stat = _read_stat()
        if self._start is None or stat is None:
            return
        t0, busy0, steal0, own0 = self._start
        self.result = CpuShare(
            wall_s=time.monotonic() - t0, cpus=stat[2], busy_s=stat[0] - busy0,
            own_s=_own_cpu_s() - own0, steal_s=stat[1] - steal0,
        )  # fmt: skip
