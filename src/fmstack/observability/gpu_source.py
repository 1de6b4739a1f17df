"""GPU source: :class:`GpuBackend` readings -> dcgm-exporter metric names and labels, plus fmstack extras.

Names and types follow dcgm-exporter's ``etc/default-counters.csv`` and its opt-in ECC / NVLink / violation
fields (shared/reference/observability.md §1); labels ``gpu, UUID, pci_bus_id, device, modelName, Hostname``.
DCGM counters keep their names without ``_total`` (see :mod:`fmstack.observability.exposition`).
Extras (§2, §9): ``fmstack_gpu_xid_errors_total{xid}`` (a counter per Xid: DCGM_FI_DEV_XID_ERRORS holds only the
last value), ``fmstack_gpu_xid_last_seen_timestamp_seconds{xid}`` (what the Xid alerts use: it fires on the first
scrape after an event), ``fmstack_gpu_up``, ``fmstack_gpus`` / ``fmstack_gpus_expected``,
``fmstack_gpu_last_read_timestamp_seconds``, ``fmstack_gpu_row_remap_pending``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from operator import attrgetter

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from fmstack.observability.blocks import FamilyKey, LayoutCache, SeriesLayout, row_series
from fmstack.observability.exposition import value_texts
from fmstack.observability.gpu import GpuBackend, GpuReadError, GpuReading

LABELS = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"]

# (reading field, metric name, prometheus type, help, scale)
DCGM_FIELDS: tuple[tuple[str, str, str, str, float], ...] = (
    ("gpu_util_pct", "DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", 1.0),
    ("mem_copy_util_pct", "DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", 1.0),
    ("sm_clock_mhz", "DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", 1.0),
    ("mem_clock_mhz", "DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", 1.0),
    ("fb_used_mib", "DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", 1.0),
    ("fb_free_mib", "DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", 1.0),
    ("power_w", "DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", 1.0),
    ("energy_mj", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy since boot (in mJ).", 1.0),
    ("gpu_temp_c", "DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", 1.0),
    ("memory_temp_c", "DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", 1.0),
    ("pcie_replay_total", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.", 1.0),
    ("ecc_sbe_volatile_total", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Total single-bit volatile ECC errors.", 1),
    ("ecc_dbe_volatile_total", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total double-bit volatile ECC errors.", 1),
    ("ecc_sbe_aggregate_total", "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "counter", "Total single-bit persistent ECC errors.", 1),
    ("ecc_dbe_aggregate_total", "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "counter", "Total double-bit persistent ECC errors.", 1),
    ("remapped_rows_correctable", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Rows remapped for SBE.", 1.0),
    ("remapped_rows_uncorrectable", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Rows remapped for DBE.", 1),
    ("row_remap_failure", "DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed.", 1.0),
    ("row_remap_pending", "fmstack_gpu_row_remap_pending", "gauge", "1 if a row remap waits for a GPU reset.", 1.0),
    ("nvlink_crc_flit_errors_total", "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "counter", "NVLink CRC flit errors.", 1),
    ("nvlink_crc_data_errors_total", "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "counter", "NVLink CRC data errors.", 1),
    ("nvlink_replay_errors_total", "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "counter", "NVLink replay errors.", 1.0),
    ("nvlink_recovery_errors_total", "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "counter", "NVLink recoveries.", 1),
    ("power_violation_ns", "DCGM_FI_DEV_POWER_VIOLATION", "counter", "Throttling duration due to power (in us).", 1e-3),
    ("thermal_violation_ns", "DCGM_FI_DEV_THERMAL_VIOLATION", "counter", "Throttling duration due to thermal (in us).", 1e-3),
    ("clocks_event_reasons", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gauge", "Current clock throttle reasons (bitmask).", 1),
    ("sm_active_ratio", "DCGM_FI_PROF_SM_ACTIVE", "gauge", "Ratio of cycles an SM has at least 1 warp assigned.", 1.0),
)  # fmt: skip


_FIELD_VALUES = attrgetter(*(f[0] for f in DCGM_FIELDS))
_SCALES = tuple(f[4] for f in DCGM_FIELDS)
_SCALED = tuple((i, scale) for i, scale in enumerate(_SCALES) if scale != 1)
_FAMILY_KEYS = tuple((metric, metric, doc, mtype) for _f, metric, mtype, doc, _s in DCGM_FIELDS)
_RANK = {metric: i for i, (_f, metric, _t, _d, _s) in enumerate(DCGM_FIELDS)}


_UP = ("fmstack_gpu_up", "fmstack_gpu_up", "1 if the GPU was read in this scrape", "gauge")
_SEEN = ("fmstack_gpu_last_read_timestamp_seconds", "fmstack_gpu_last_read_timestamp_seconds", "Last successful read", "gauge")  # fmt: skip
_RANK = {**_RANK, _UP[0]: len(_RANK), _SEEN[0]: len(_RANK) + 1}

_Structure = tuple[
    tuple[tuple[tuple[str, ...], tuple[bool, ...] | None], ...],
    tuple[tuple[str, ...], ...],
    tuple[tuple[str, ...], ...],
]
"""(labels and supported fields of each GPU read, ``fmstack_gpu_up``'s labels, last-read timestamps' labels)"""


def _layout(structure: _Structure) -> SeriesLayout:
    """The DCGM families of the GPUs read, in DCGM_FIELDS order, then ``fmstack_gpu_up`` and the last reads."""
    rows: list[tuple[dict[str, str], tuple[FamilyKey, ...]]] = []
    read, up, seen = structure
    for labels, mask in read:
        keys = _FAMILY_KEYS if mask is None else tuple(k for k, has in zip(_FAMILY_KEYS, mask, strict=True) if has)
        rows.append((dict(zip(LABELS, labels, strict=True)), keys))
    rows += [(dict(zip(LABELS, labels, strict=True)), (_UP,)) for labels in up]
    rows += [(dict(zip(LABELS, labels, strict=True)), (_SEEN,)) for labels in seen]
    return SeriesLayout(row_series(rows), rank=_RANK.__getitem__)


class GpuSource:
    """Reads every GPU of a :class:`GpuBackend` at scrape time; one GPU failing does not hide the others."""

    name = "gpu"

    def __init__(
        self,
        backend: GpuBackend,
        hostname: str,
        expected_gpus: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.backend = backend
        self.hostname = hostname
        self.expected_gpus = expected_gpus
        self._clock = clock
        self._identity: dict[int, list[str]] = {}
        self._last_read: dict[int, float] = {}
        self.xid_counts: dict[tuple[int, int], int] = {}
        self._xid_last_seen: dict[tuple[int, int], float] = {}
        self._last_xid: dict[int, int] = {}
        self._layouts: LayoutCache[SeriesLayout] = LayoutCache()

    def _labels(self, r: GpuReading) -> list[str]:
        labels = [str(r.index), r.uuid, r.pci_bus_id, f"nvidia{r.index}", r.model_name, self.hostname]
        self._identity[r.index] = labels
        return labels

    def _id_labels(self, index: int) -> list[str]:
        return self._identity.get(index, [str(index), "", "", f"nvidia{index}", "", self.hostname])

    def collect(self) -> Iterator[Metric]:
        now = self._clock()
        count = self.backend.device_count()  # GpuReadError here (NVML lost) fails the whole source
        for gpu, xid in self.backend.poll_xids():
            self.xid_counts[(gpu, xid)] = self.xid_counts.get((gpu, xid), 0) + 1
            self._xid_last_seen[(gpu, xid)] = now
            self._last_xid[gpu] = xid
        ok = 0
        key: list[tuple[tuple[str, ...], tuple[bool, ...] | None]] = []
        values: list[float] = []
        up_labels: list[tuple[str, ...]] = []
        up: list[float] = []
        for index in range(count):
            try:
                r = self.backend.read(index)
            except GpuReadError:
                up_labels.append(tuple(self._id_labels(index)))
                up.append(0.0)
                continue
            ok += 1
            labels = tuple(self._labels(r))
            self._last_read[index] = now
            up_labels.append(labels)
            up.append(1.0)
            fields = _FIELD_VALUES(r)
            if None in fields:  # a field this GPU does not support is not exported
                mask: tuple[bool, ...] | None = tuple(v is not None for v in fields)
                values += [float(v) * scale for v, scale in zip(fields, _SCALES, strict=True) if v is not None]
            else:
                mask = None
                start = len(values)
                values += map(float, fields)
                for i, scale in _SCALED:
                    values[start + i] *= scale
            key.append((labels, mask))
        last_read = sorted(self._last_read.items())
        seen = tuple(tuple(self._id_labels(index)) for index, _ in last_read)
        structure = (tuple(key), tuple(up_labels), seen)
        layout = self._layouts.get(structure)
        if layout is None:
            layout = self._layouts.put(structure, _layout(structure))
        yield from layout.families(value_texts([*values, *up, *(t for _, t in last_read)]))
        yield from self._xid_families()
        yield from self._count_families(ok)

    def _xid_families(self) -> Iterator[Metric]:
        last = GaugeMetricFamily("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", labels=LABELS)
        for gpu, xid in sorted(self._last_xid.items()):
            last.add_metric(self._id_labels(gpu), float(xid))
        xl = [*LABELS, "xid"]
        total = CounterMetricFamily("fmstack_gpu_xid_errors", "Xid events seen by this exporter", labels=xl)
        when = GaugeMetricFamily("fmstack_gpu_xid_last_seen_timestamp_seconds", "Time of the last event", labels=xl)
        for (gpu, xid), n in sorted(self.xid_counts.items()):
            total.add_metric([*self._id_labels(gpu), str(xid)], float(n))
            when.add_metric([*self._id_labels(gpu), str(xid)], self._xid_last_seen[(gpu, xid)])
        yield from (last, total, when)

    def _count_families(self, ok: int) -> Iterator[Metric]:
        count = GaugeMetricFamily("fmstack_gpus", "GPUs read in this scrape", labels=["Hostname"])
        count.add_metric([self.hostname], float(ok))
        yield count
        if self.expected_gpus is not None:
            exp = GaugeMetricFamily("fmstack_gpus_expected", "GPUs this node should have", labels=["Hostname"])
            exp.add_metric([self.hostname], float(self.expected_gpus))
            yield exp
