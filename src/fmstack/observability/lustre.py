"""Lustre client (FSx for Lustre) statistics from ``llite.*.stats``.

Lines look like ``read_bytes 1234 samples [bytes] 4096 1048576 987654321 [sumsq]`` (name, count, "samples",
unit, min, max, sum, optional sum of squares; wiki.lustre.org/Lustre_IO_Monitoring). The file lives in
``/sys/kernel/debug/lustre/llite/<fs>-<id>/stats`` on Lustre >= 2.12 and ``/proc/fs/lustre/llite/...`` before;
both are tried. Names follow HPE's ``lustre_exporter`` (client component): ``lustre_read_bytes_total``,
``lustre_read_samples_total``, ``lustre_read_{minimum,maximum}_size_bytes`` (same for write) and
``lustre_stats_total{operation}`` (shared/reference/observability.md §5).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from fmstack.observability.sysfs import FileSystem

BASES = ("sys/kernel/debug/lustre/llite", "proc/fs/lustre/llite")


@dataclass(frozen=True, slots=True)
class StatLine:
    name: str
    count: int
    unit: str
    minimum: float | None
    maximum: float | None
    total: float | None


def parse_stats(text: str) -> dict[str, StatLine]:
    """Parse an llite stats file; lines without a ``samples`` column (snapshot_time, ...) are skipped."""
    out: dict[str, StatLine] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 3 or parts[2] != "samples" or not parts[1].isdigit():
            continue
        unit = parts[3].strip("[]") if len(parts) > 3 else ""
        nums = [float(p) for p in parts[4:7]] if len(parts) >= 7 else []
        lo, hi, total = (nums[0], nums[1], nums[2]) if nums else (None, None, None)
        out[parts[0]] = StatLine(parts[0], int(parts[1]), unit, lo, hi, total)
    return out


class LustreSource:
    """Client stats per Lustre mount; a node without Lustre exports nothing (and is not an error)."""

    name = "lustre"

    def __init__(self, fs: FileSystem, bases: tuple[str, ...] = BASES) -> None:
        self.fs, self.bases = fs, bases

    def collect(self) -> Iterator[Metric]:
        mounts: dict[str, dict[str, StatLine]] = {}
        for base in self.bases:
            try:
                targets = self.fs.listdir(base)
            except OSError:
                continue
            for target in targets:
                try:
                    mounts[target] = parse_stats(self.fs.read_text(f"{base}/{target}/stats"))
                except OSError:
                    continue  # unmounted between listdir and read
            break
        labels = ["component", "target"]
        fams: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}
        for direction in ("read", "write"):
            fams[f"{direction}_samples"] = CounterMetricFamily(
                f"lustre_{direction}_samples", f"{direction} calls", labels=labels
            )
            fams[f"{direction}_bytes"] = CounterMetricFamily(
                f"lustre_{direction}_bytes", f"Bytes {direction}", labels=labels
            )
            for which in ("minimum", "maximum"):
                fams[f"{direction}_{which}"] = GaugeMetricFamily(
                    f"lustre_{direction}_{which}_size_bytes", f"{which} {direction} size", labels=labels
                )
        ops = CounterMetricFamily("lustre_stats", "Operations by type", labels=[*labels, "operation"])
        for target, stats in sorted(mounts.items()):
            lv = ["client", target]
            for name, st in stats.items():
                if name in ("read_bytes", "write_bytes"):
                    d = name.split("_")[0]
                    fams[f"{d}_samples"].add_metric(lv, float(st.count))
                    if st.total is not None and st.minimum is not None and st.maximum is not None:
                        fams[f"{d}_bytes"].add_metric(lv, st.total)
                        fams[f"{d}_minimum"].add_metric(lv, st.minimum)
                        fams[f"{d}_maximum"].add_metric(lv, st.maximum)
                else:
                    ops.add_metric([*lv, name], float(st.count))
        yield from (f for f in fams.values() if f.samples)
        if ops.samples:
            yield ops
