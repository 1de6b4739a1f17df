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
from prometheus_client.samples import Sample

from fmstack.observability.sysfs import FileSystem

BASE = "sys/class/infiniband"

# 32 devices x 36 counters = 1,152 samples a scrape: build them with tuple.__new__ (half the cost of Sample(...),
# whose generated __new__ adds a Python call); fields after the value (timestamp, exemplar, ...) are None.
_new_tuple = tuple.__new__
_PAD = (None,) * (len(Sample._fields) - 3)


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
    out: dict[str, int] = {}
    errors = 0
    try:
        names = fs.listdir(path)
    except OSError:
        return out, 1
    read, prefix = fs.read_text, path + "/"
    for name in names:
        if not (name.isascii() and name.isidentifier()):
            continue  # not a usable metric-name suffix
        try:
            out[name] = int(read(prefix + name))  # int() ignores the trailing newline
        except (OSError, ValueError):
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


class EfaSource:
    """``node_amazonefa_*`` per device and port, the device count, and read errors since start."""

    name = "efa"

    def __init__(self, fs: FileSystem, hostname: str, expected_devices: int | None = None, base: str = BASE) -> None:
        self.fs, self.hostname, self.expected_devices, self.base = fs, hostname, expected_devices, base
        self.read_errors_total = 0

    def collect(self) -> Iterator[Metric]:
        scan = scan_efa(self.fs, self.base)
        self.read_errors_total += scan.read_errors
        families: dict[str, Metric] = {}
        info = GaugeMetricFamily("node_amazonefa_info", "EFA device present", labels=["device"])
        for dev in scan.devices:
            info.add_metric([dev.name], 1.0)
            for port, counters in dev.ports.items():
                labels = {"device": dev.name, "port": port}  # one dict shared by the port's samples
                for counter, value in counters.items():
                    fam = families.get(counter)
                    if fam is None:
                        metric = f"node_amazonefa_{counter}"
                        fam = families[counter] = Metric(metric, f"EFA port counter {counter}", "counter")
                    fam.samples.append(_new_tuple(Sample, (fam.name, labels, float(value), *_PAD)))
            dev_labels = {"device": dev.name}
            for counter, value in dev.device_counters.items():
                fam = families.get("device_" + counter)
                if fam is None:
                    metric = f"node_amazonefa_device_{counter}"
                    fam = families["device_" + counter] = Metric(metric, f"EFA device counter {counter}", "counter")
                fam.samples.append(_new_tuple(Sample, (fam.name, dev_labels, float(value), *_PAD)))
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
