"""Lustre client (FSx for Lustre) statistics from ``llite.*.stats``.

Lines look like ``read_bytes 1234 samples [bytes] 4096 1048576 987654321 [sumsq]`` (name, count, "samples",
unit, min, max, sum, optional sum of squares; wiki.lustre.org/Lustre_IO_Monitoring). The file lives in
``/sys/kernel/debug/lustre/llite/<fs>-<id>/stats`` on Lustre >= 2.12 and ``/proc/fs/lustre/llite/...`` before;
both are tried. Names follow HPE's ``lustre_exporter`` (client component): ``lustre_read_bytes_total``,
``lustre_read_samples_total``, ``lustre_read_{minimum,maximum}_size_bytes`` (same for write) and
``lustre_stats_total{operation}`` (shared/reference/observability.md §5); with a ``hostname``, every series also
carries the node's ``Hostname`` label, as the GPU and EFA series do.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.core import Metric

from fmstack.observability.blocks import FamilyKey, LayoutCache, Series, SeriesLayout
from fmstack.observability.exposition import value_texts
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

    def __init__(self, fs: FileSystem, bases: tuple[str, ...] = BASES, hostname: str | None = None) -> None:
        self.fs, self.bases, self.hostname = fs, bases, hostname
        self._layouts: LayoutCache[SeriesLayout] = LayoutCache()

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
        key: list[tuple[str, tuple[tuple[str, bool | None], ...]]] = []
        values: list[float] = []
        for target, stats in sorted(mounts.items()):
            names: list[tuple[str, bool | None]] = []
            for name, st in stats.items():
                values.append(float(st.count))
                if name in ("read_bytes", "write_bytes"):
                    if st.total is not None and st.minimum is not None and st.maximum is not None:
                        names.append((name, True))
                        values += (st.total, st.minimum, st.maximum)
                    else:
                        names.append((name, False))
                else:
                    names.append((name, None))
            key.append((target, tuple(names)))
        structure = tuple(key)
        layout = self._layouts.get(structure)
        if layout is None:
            series = _series(structure, self.hostname)
            layout = self._layouts.put(structure, SeriesLayout(series, rank=_RANK.__getitem__))
        return iter(layout.families(value_texts(values)))


def _family(key: str, name: str, doc: str, typ: str) -> FamilyKey:
    return (key, name, doc, typ)


_BY_DIRECTION = {
    d: (
        _family(f"{d}_samples", f"lustre_{d}_samples", f"{d} calls", "counter"),
        _family(f"{d}_bytes", f"lustre_{d}_bytes", f"Bytes {d}", "counter"),
        _family(f"{d}_minimum", f"lustre_{d}_minimum_size_bytes", f"minimum {d} size", "gauge"),
        _family(f"{d}_maximum", f"lustre_{d}_maximum_size_bytes", f"maximum {d} size", "gauge"),
    )
    for d in ("read", "write")
}
_OPS = _family("ops", "lustre_stats", "Operations by type", "counter")
_RANK = {fk[0]: i for i, fk in enumerate((*_BY_DIRECTION["read"], *_BY_DIRECTION["write"], _OPS))}


def _series(
    structure: tuple[tuple[str, tuple[tuple[str, bool | None], ...]], ...], hostname: str | None = None
) -> list[Series]:
    """Per mount, in the stats file's order: read / write calls (and bytes, minimum and maximum size when the line
    has them) or the operation's count."""
    out: list[Series] = []
    for target, names in structure:
        labels = {"component": "client", "target": target}
        if hostname is not None:
            labels["Hostname"] = hostname
        for name, full in names:
            if full is None:
                out.append((_OPS, "lustre_stats_total", {**labels, "operation": name}))
                continue
            samples, nbytes, lo, hi = _BY_DIRECTION[name.split("_")[0]]
            out.append((samples, samples[1] + "_total", labels))
            if full:
                out += [(nbytes, nbytes[1] + "_total", labels), (lo, lo[1], labels), (hi, hi[1], labels)]
    return out
