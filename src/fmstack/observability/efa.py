"""EFA counters from sysfs: ``/sys/class/infiniband/<device>/ports/<port>/hw_counters/<counter>``.

Counter names are whatever the kernel's efa driver exposes (``efa_verbs.c`` ``EFA_DEFINE_PORT_STATS``: tx/rx
bytes and packets, rx_drops, send/recv, rdma_read/rdma_write bytes, work requests and errors; since Linux 6.17
the SRD network counters retrans_bytes, retrans_pkts, retrans_timeout_events, unresponsive_remote_events,
impaired_remote_conn_events) plus device-level counters in ``<device>/hw_counters/``. They are exported as the
aws-samples EFA node exporter does (the one SageMaker HyperPod uses): ``node_amazonefa_<counter>{device,port}``,
counter type, no ``_total`` (shared/reference/observability.md §4).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from fmstack.observability.exposition import PrerenderedMetric, render_labels
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


def _read_counters(fs: FileSystem, path: str) -> tuple[dict[str, int], int]:
    """One ``fs.read_dir`` for the directory (a listing and every file), not a listdir plus a read per file."""
    out: dict[str, int] = {}
    errors = 0
    try:
        entries = fs.read_dir(path)
    except OSError:
        return out, 1
    for name, data in entries:
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


def scan_efa(fs: FileSystem, base: str = BASE) -> EfaScan:
    """Read every EFA device under ``base``; missing files count as read errors, never raise.

    Only devices with ``hw_counters`` under their ports are EFA-like; a node without EFA returns no devices.
    """
    try:
        names = fs.listdir(base)
    except OSError:
        return EfaScan([], 0)
    devices, errors = [], 0
    for name in names:
        dev = EfaDevice(name)
        try:
            ports = fs.listdir(f"{base}/{name}/ports")
        except OSError:
            errors += 1
            continue
        for port in ports:
            counters, errs = _read_counters(fs, f"{base}/{name}/ports/{port}/hw_counters")
            errors += errs
            if counters:
                dev.ports[port] = counters
        try:
            if "hw_counters" in fs.listdir(f"{base}/{name}"):
                dev.device_counters, errs = _read_counters(fs, f"{base}/{name}/hw_counters")
                errors += errs
        except OSError:
            errors += 1
        if dev.ports:
            devices.append(dev)
    return EfaScan(devices, errors)


_MAX_CACHED = 4096
"""Cached (device, port) prefix sets before the cache is dropped and rebuilt (a p5 has 32 devices)."""


class _Heads(dict[str, tuple[str, dict[str, str]]]):
    """counter -> (``<metric>{labels} ``, labels) for one series' label set; the key is the counter alone, and the
    labels are this object's own, so a prefix can only ever carry the labels it was built from."""

    def __init__(self, metric_prefix: str, labels: dict[str, str]) -> None:
        super().__init__()
        self.metric_prefix, self.labels, self.text = metric_prefix, labels, render_labels(labels)

    def __missing__(self, counter: str) -> tuple[str, dict[str, str]]:
        head = self[counter] = (f"{self.metric_prefix}{counter}{self.text} ", self.labels)
        return head


def _add_all(
    families: dict[str, PrerenderedMetric], heads: _Heads, counters: dict[str, int], key_prefix: str, help_prefix: str
) -> None:
    for counter, value in counters.items():
        key = key_prefix + counter
        fam = families.get(key)
        if fam is None:
            fam = families[key] = PrerenderedMetric(heads.metric_prefix + counter, help_prefix + counter, "counter")
        fam.heads.append(heads[counter])
        fam.values.append(float(value))


class EfaSource:
    """``node_amazonefa_*`` per device and port, the device count, and read errors since start."""

    name = "efa"

    def __init__(self, fs: FileSystem, hostname: str, expected_devices: int | None = None, base: str = BASE) -> None:
        self.fs, self.hostname, self.expected_devices, self.base = fs, hostname, expected_devices, base
        self.read_errors_total = 0
        # Rendered ``name{device=..,port=..} `` prefixes per (device, port) and per device, kept across scrapes.
        self._port_heads: dict[tuple[str, str], _Heads] = {}
        self._device_heads: dict[str, _Heads] = {}

    def collect(self) -> Iterator[Metric]:
        scan = scan_efa(self.fs, self.base)
        self.read_errors_total += scan.read_errors
        families: dict[str, PrerenderedMetric] = {}
        port_heads, device_heads = self._port_heads, self._device_heads
        if len(port_heads) + len(device_heads) > _MAX_CACHED:  # device churn cannot grow it forever
            port_heads.clear()
            device_heads.clear()
        info = GaugeMetricFamily("node_amazonefa_info", "EFA device present", labels=["device"])
        for dev in scan.devices:
            info.add_metric([dev.name], 1.0)
            for port, counters in dev.ports.items():
                heads = port_heads.get((dev.name, port))
                if heads is None:
                    heads = port_heads[dev.name, port] = _Heads("node_amazonefa_", {"device": dev.name, "port": port})
                _add_all(families, heads, counters, "", "EFA port counter ")
            if dev.device_counters:
                heads = device_heads.get(dev.name)
                if heads is None:
                    heads = device_heads[dev.name] = _Heads("node_amazonefa_device_", {"device": dev.name})
                _add_all(families, heads, dev.device_counters, "device_", "EFA device counter ")
        yield from families.values()
        yield info
        count = GaugeMetricFamily("fmstack_efa_device_count", "EFA devices found in this scrape", labels=["Hostname"])
        count.add_metric([self.hostname], float(len(scan.devices)))
        yield count
        if self.expected_devices is not None:
            exp = GaugeMetricFamily("fmstack_efa_expected_device_count", "EFA devices expected", labels=["Hostname"])
            exp.add_metric([self.hostname], float(self.expected_devices))
            yield exp
        errs = CounterMetricFamily("fmstack_efa_read_errors", "sysfs reads that failed", labels=["Hostname"])
        errs.add_metric([self.hostname], float(self.read_errors_total))
        yield errs
