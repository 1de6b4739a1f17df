"""EFA counters from sysfs: ``/sys/class/infiniband/<device>/ports/<port>/hw_counters/<counter>``.

Counter names are whatever the kernel's efa driver exposes (``efa_verbs.c`` ``EFA_DEFINE_PORT_STATS``: tx/rx
bytes and packets, rx_drops, send/recv, rdma_read/rdma_write bytes, work requests and errors; since Linux 6.17
the SRD network counters retrans_bytes, retrans_pkts, retrans_timeout_events, unresponsive_remote_events,
impaired_remote_conn_events) plus device-level counters in ``<device>/hw_counters/``. They are exported as the
aws-samples EFA node exporter does (the one SageMaker HyperPod uses): ``node_amazonefa_<counter>{device,port}``,
counter type, no ``_total`` (shared/reference/observability.md §4), plus the node's ``Hostname`` label as the GPU
series carry it (dashboards filter on ``$Hostname``; alerts name the node by it).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from fmstack.observability.blocks import FamilyKey, LayoutCache, SeriesLayout, row_series
from fmstack.observability.exporter import SourceDown
from fmstack.observability.exposition import BlockMetric, value_texts
from fmstack.observability.sysfs import FileSystem

BASE = "sys/class/infiniband"


@dataclass(slots=True)
class EfaDevice:
    """One device's counters: per port, and device-level."""

    name: str
    ports: dict[str, dict[str, int]] = field(default_factory=dict)
    device_counters: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class EfaScan:
    devices: list[EfaDevice]
    read_errors: int
    """Files or directories that vanished or did not parse during this scan."""


_Dir = tuple[str, str | None, tuple[str, ...] | None, list[str | bytes | None]]
"""One ``hw_counters`` directory as read: device, port (None: the device's own counters), the names listed (None:
the directory could not be read) and their contents."""


@dataclass(slots=True)
class _RawScan:
    """What one scrape read, before parsing: the directories in scan order and the listing failures."""

    dirs: list[_Dir]
    errors: int
    base_error: str = ""
    """Why ``base`` itself could not be listed ("" when it was)."""


def _read_tree(fs: FileSystem, base: str) -> _RawScan:
    """All the I/O of a scan, in :func:`scan_efa`'s order; failures to list a device count as errors."""
    try:
        names = fs.listdir(base)
    except OSError as exc:
        return _RawScan([], 0, f"cannot list /{base}: {exc.strerror or exc}")
    dirs: list[_Dir] = []
    errors = 0
    for name in names:
        device = f"{base}/{name}"
        try:
            ports = fs.listdir(device + "/ports")
        except OSError:
            errors += 1
            continue
        for port in ports:
            dirs.append(_read_one(fs, f"{device}/ports/{port}/hw_counters", name, port))
        try:
            if "hw_counters" in fs.listdir(device):
                dirs.append(_read_one(fs, device + "/hw_counters", name, None))
        except OSError:
            errors += 1
    return _RawScan(dirs, errors)


def _read_one(fs: FileSystem, path: str, device: str, port: str | None) -> _Dir:
    try:
        names, datas = fs.read_dir_columns(path)
    except OSError:
        return (device, port, None, [])
    return (device, port, names, datas)


def _parse_counters(names: tuple[str, ...] | None, datas: list[str | bytes | None]) -> tuple[dict[str, int], int]:
    """Counters of one directory and the files that could not be read or parsed (a missing directory: 1)."""
    out: dict[str, int] = {}
    if names is None:
        return out, 1
    errors = 0
    for name, data in zip(names, datas, strict=True):
        if not (name.isascii() and name.isidentifier()):
            continue  # not a usable metric-name suffix
        if data is None:
            errors += 1
            continue
        try:
            out[name] = int(data)  # int() ignores the trailing newline
        except ValueError:
            try:  # bytes from the real filesystem: parse as read_text's decoded text would
                out[name] = int(data.decode("utf-8", "replace")) if isinstance(data, bytes) else int(data)
            except ValueError:
                errors += 1
    return out, errors


def _parse(raw: _RawScan) -> EfaScan:
    devices: dict[str, EfaDevice] = {}
    errors = raw.errors
    for device, port, names, datas in raw.dirs:
        dev = devices.get(device)
        if dev is None:
            dev = devices[device] = EfaDevice(device)
        counters, errs = _parse_counters(names, datas)
        errors += errs
        if port is None:
            dev.device_counters = counters
        elif counters:
            dev.ports[port] = counters
    return EfaScan([d for d in devices.values() if d.ports], errors)


def scan_efa(fs: FileSystem, base: str = BASE) -> EfaScan:
    """Read every EFA device under ``base``; missing files count as read errors, never raise.

    Only devices with ``hw_counters`` under their ports are EFA-like; a node without EFA returns no devices.
    """
    return _parse(_read_tree(fs, base))


_CANONICAL_MAX_DIGITS = 15
"""Counter text of at most 15 digits (< 10**15 < 2**53) is exactly a float: ``repr(float(n))`` is the digits + ".0"."""


def _fast_values(datas: list[str | bytes | None]) -> list[str] | None:
    """The files' counters as decimal text (``918273645123``), in bulk, when every file holds one canonical decimal
    (digits, no sign, no leading zero, at most 15 digits, then a newline): then the exposition's ``repr(float(n))``
    is that text followed by ``.0``. None otherwise (the caller parses file by file)."""
    try:
        joined = "".join(datas) if type(datas[0]) is str else b"".join(datas).decode("ascii")  # type: ignore[arg-type]
    except (TypeError, UnicodeDecodeError, IndexError):
        return None  # a file that could not be read (None), mixed types, or not ASCII
    parts = joined.split("\n")
    if len(parts) != len(datas) + 1 or parts.pop():
        return None  # a file without its newline, or with several lines
    digits = joined.replace("\n", "")
    if not digits.isdigit() or not digits.isascii() or "" in parts or max(map(len, parts)) > _CANONICAL_MAX_DIGITS:
        return None
    if _LEADING_ZERO.search(joined) is not None or (parts[0][0] == "0" and len(parts[0]) > 1):
        return None
    return parts


_LEADING_ZERO = re.compile("\n0[0-9]")


def _heads_key(dirs: list[_Dir]) -> tuple[object, ...]:
    return tuple((device, port, names) for device, port, names, _ in dirs)


class EfaSource:
    """``node_amazonefa_*`` per device and port, the device count, and read errors since start.

    A missing ``/sys/class/infiniband`` is a source error (the source is down), never "zero devices": a node
    whose EFA driver is gone must not look like a node that has no EFA. ``fmstack_efa_devices_expected`` (the
    configured count, not a reading) is served while the source is down, so ``FmstackEfaSourceDown`` can tell a node
    that should have EFA (reboot, as for missing devices) from one that need not.

    A scrape reads every counter directory (:func:`_read_tree`). When every file listed holds a plain counter and
    the directories list the same names as in a scrape seen before, the values go straight into that structure's
    :class:`~fmstack.observability.blocks.SeriesLayout`; otherwise they are parsed file by file as
    :func:`scan_efa` does, and the layout of what was parsed is used (built once per structure). Both give the
    same families and the same text (tests/observability/test_layouts.py, test_exposition.py).
    """

    name = "efa"

    def __init__(self, fs: FileSystem, hostname: str, expected_devices: int | None = None, base: str = BASE) -> None:
        self.fs, self.hostname, self.expected_devices, self.base = fs, hostname, expected_devices, base
        self.read_errors_total = 0
        self.fast_scrapes = 0
        """Scrapes whose counters went into a known layout in bulk (the rest were parsed file by file)."""
        self._layouts: LayoutCache[_EfaLayout] = LayoutCache()
        self._fast: tuple[tuple[object, ...], _EfaLayout] | None = None
        """The structure key of the last clean scrape and its layout."""

    def collect(self) -> Iterator[Metric]:
        raw = _read_tree(self.fs, self.base)
        self.fs.sweep(self.base)  # close the files of directories gone since the last scrape
        if raw.base_error:
            # no /sys/class/infiniband: the driver is not loaded (or sysfs is not there), which is not "0 devices";
            # the source is down (fmstack_exporter_source_up{source="efa"} 0). A node without EFA: --no-efa.
            raise SourceDown(f"EFA: {raw.base_error}", list(self._expected()))
        families, ndevices = self._fast_families(raw)
        if families is None:
            scan = _parse(raw)
            self.read_errors_total += scan.read_errors
            families, ndevices = self._scan_families(scan), len(scan.devices)
        yield from families
        count = GaugeMetricFamily("fmstack_efa_devices", "EFA devices found in this scrape", labels=["Hostname"])
        count.add_metric([self.hostname], float(ndevices))
        yield count
        yield from self._expected()
        errs = CounterMetricFamily("fmstack_efa_read_errors", "sysfs reads that failed", labels=["Hostname"])
        errs.add_metric([self.hostname], float(self.read_errors_total))
        yield errs

    def _expected(self) -> Iterator[Metric]:
        if self.expected_devices is not None:
            exp = GaugeMetricFamily("fmstack_efa_devices_expected", "EFA devices expected", labels=["Hostname"])
            exp.add_metric([self.hostname], float(self.expected_devices))
            yield exp

    def _fast_families(self, raw: _RawScan) -> tuple[list[BlockMetric] | None, int]:
        fast = self._fast
        if fast is None or raw.errors or fast[0] != _heads_key(raw.dirs):
            return None, 0
        datas: list[str | bytes | None] = []
        for _, _, _, contents in raw.dirs:
            datas += contents
        values = _fast_values(datas)
        if values is None:
            return None, 0
        layout = fast[1]
        self.fast_scrapes += 1
        return layout.families([*values, *layout.constant_values], integral=True), layout.devices

    def _scan_families(self, scan: EfaScan) -> list[BlockMetric]:
        rows: list[tuple[dict[str, str], list[FamilyKey]]] = []
        values: list[float] = []
        key: list[object] = []
        for dev in scan.devices:
            for port, counters in dev.ports.items():
                labels = {"device": dev.name, "port": port, "Hostname": self.hostname}
                rows.append((labels, _keys("", counters, "EFA port counter ")))
                values += counters.values()
                key.append((dev.name, port, tuple(counters)))
            if dev.device_counters:
                labels = {"device": dev.name, "Hostname": self.hostname}
                rows.append((labels, _keys("device_", dev.device_counters, "EFA device counter ")))
                values += dev.device_counters.values()
                key.append((dev.name, None, tuple(dev.device_counters)))
        info = ("", "node_amazonefa_info", "EFA device present", "gauge")
        rows += [({"device": dev.name, "Hostname": self.hostname}, [info]) for dev in scan.devices]
        structure = tuple(key)
        layout = self._layouts.get(structure)
        if layout is None:
            layout = self._layouts.put(structure, _EfaLayout(rows, len(scan.devices)))
        self._fast = (structure, layout) if scan.read_errors == 0 else self._fast
        return layout.families([*value_texts(values), *(v + ".0" for v in layout.constant_values)])


SETTINGS = {
    "lifespan": "milliseconds the kernel keeps a read of the hardware counters before reading them again "
    "(rdma hw_counters attribute, writable; a setting, not a count)",
}
"""Files of a ``hw_counters`` directory that are not counters: exported as gauges with their meaning as help (typed
as a counter, a lowered ``lifespan`` reads to ``rate()`` as a counter reset)."""


def _keys(key_prefix: str, counters: dict[str, int], help_prefix: str) -> list[FamilyKey]:
    metric_prefix = "node_amazonefa_" + key_prefix
    return [
        (key_prefix + c, metric_prefix + c, SETTINGS[c], "gauge")
        if c in SETTINGS
        else (key_prefix + c, metric_prefix + c, help_prefix + c, "counter")
        for c in counters
    ]


class _EfaLayout(SeriesLayout):
    """The layout of one EFA structure, with its device count and the info series' constant values."""

    def __init__(self, rows: list[tuple[dict[str, str], list[FamilyKey]]], devices: int) -> None:
        super().__init__(row_series(rows))
        self.devices = devices
        self.constant_values = ["1"] * devices
