"""GPU backends: the :class:`GpuBackend` interface, its NVML implementation (nvidia-ml-py), and the reading type.

NVML calls used (NVML API reference, https://docs.nvidia.com/deploy/nvml-api/, and
shared/reference/observability.md §1 "Other NVML mappings"): utilization rates, clock info, memory info (bytes ->
MiB as DCGM reports FB), power usage (mW -> W), total energy (mJ), temperature, memory (HBM) temperature through the field-values API
(``nvmlDeviceGetFieldValues`` with ``NVML_FI_DEV_MEMORY_TEMP`` = 82, what DCGM_FI_DEV_MEMORY_TEMP reports; boards
without it answer NOT_SUPPORTED and the series is not exported), PCIe replay counter, total ECC
errors (corrected / uncorrected, volatile / aggregate), remapped rows (correctable, uncorrectable, pending,
failure), NVLink error counters per active link (kept per link, so a link going down or its counter being reset
never makes the GPU's total go backwards), violation status (ns), clocks-event reasons, SM activity from
GPM samples taken at consecutive scrapes, and Xid events through an event set registered for
``nvmlEventTypeXidCriticalError``. A field the GPU does not support reads as
``None`` and is not exported (dcgm-exporter drops blank sentinels too).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Protocol


class GpuReadError(RuntimeError):
    """A GPU (or NVML itself) could not be read."""


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuReading:
    """One GPU at one instant; ``None`` where the device does not support a field."""

    index: int
    uuid: str
    pci_bus_id: str
    model_name: str
    gpu_util_pct: float | None = None
    mem_copy_util_pct: float | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    fb_used_mib: float | None = None
    fb_free_mib: float | None = None
    power_w: float | None = None
    energy_mj: float | None = None
    gpu_temp_c: float | None = None
    memory_temp_c: float | None = None
    pcie_replay_total: int | None = None
    ecc_sbe_volatile_total: int | None = None
    ecc_dbe_volatile_total: int | None = None
    ecc_sbe_aggregate_total: int | None = None
    ecc_dbe_aggregate_total: int | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    row_remap_pending: bool | None = None
    row_remap_failure: bool | None = None
    nvlink_crc_flit_errors_total: int | None = None
    nvlink_crc_data_errors_total: int | None = None
    nvlink_replay_errors_total: int | None = None
    nvlink_recovery_errors_total: int | None = None
    power_violation_ns: int | None = None
    thermal_violation_ns: int | None = None
    clocks_event_reasons: int | None = None
    sm_active_ratio: float | None = None


class GpuBackend(Protocol):
    """What the exporter needs from a GPU source; NVML and the fake both implement it."""

    def device_count(self) -> int:
        """GPUs enumerated; raises :class:`GpuReadError` when the library itself is unusable."""
        ...

    def read(self, index: int) -> GpuReading:
        """Read one GPU; raises :class:`GpuReadError` when that GPU cannot be read."""
        ...

    def poll_xids(self) -> list[tuple[int, int]]:
        """(gpu index, xid) events since the last poll, oldest first; never blocks."""
        ...


class NvmlBackend:
    """NVML through nvidia-ml-py (``import pynvml``), imported lazily so the module loads without it."""

    NVLINK_MAX_LINKS = 18

    def __init__(self) -> None:
        import pynvml

        self._nv: Any = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise GpuReadError(f"NVML init failed: {exc}") from None
        self._events: Any = None
        self._gpm_ok: dict[int, bool] = {}
        self._gpm_prev: dict[int, Any] = {}
        self._nvlink_seen: dict[tuple[int, int, int], tuple[int, int]] = {}
        """(gpu, link, error kind) -> (last value read, sum of the values before each counter reset)."""
        try:
            self._events = pynvml.nvmlEventSetCreate()
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError:
            self._events, count = None, 0
        for i in range(count):
            # one GPU already lost, or events unsupported (some VMs): the other GPUs still report Xids
            with contextlib.suppress(pynvml.NVMLError):
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, self._events)

    def close(self) -> None:
        for sample in self._gpm_prev.values():
            with contextlib.suppress(self._nv.NVMLError):
                self._nv.nvmlGpmSampleFree(sample)
        self._gpm_prev.clear()
        try:
            if self._events is not None:
                self._nv.nvmlEventSetFree(self._events)
            self._nv.nvmlShutdown()
        except self._nv.NVMLError:
            pass

    def device_count(self) -> int:
        try:
            return int(self._nv.nvmlDeviceGetCount())
        except self._nv.NVMLError as exc:
            raise GpuReadError(f"NVML device count: {exc}") from None

    def _opt(self, fn: Any, *args: Any) -> Any:
        """Call an NVML getter; ``None`` if the device does not support it (or the call fails)."""
        try:
            return fn(*args)
        except self._nv.NVMLError:
            return None

    def read(self, index: int) -> GpuReading:
        nv = self._nv
        try:
            h = nv.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(nv.nvmlDeviceGetUUID(h))
            bus = _text(nv.nvmlDeviceGetPciInfo(h).busId)
            name = _text(nv.nvmlDeviceGetName(h))
        except nv.NVMLError as exc:
            raise GpuReadError(f"gpu {index}: {exc}") from None
        util = self._opt(nv.nvmlDeviceGetUtilizationRates, h)
        mem = self._opt(nv.nvmlDeviceGetMemoryInfo, h)
        power_mw = self._opt(nv.nvmlDeviceGetPowerUsage, h)
        remap = self._opt(nv.nvmlDeviceGetRemappedRows, h)
        ecc = nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        power_v = self._opt(nv.nvmlDeviceGetViolationStatus, h, nv.NVML_PERF_POLICY_POWER)
        thermal_v = self._opt(nv.nvmlDeviceGetViolationStatus, h, nv.NVML_PERF_POLICY_THERMAL)
        links = self._nvlink_errors(index, h)
        return GpuReading(
            index=index,
            uuid=uuid,
            pci_bus_id=bus,
            model_name=name,
            gpu_util_pct=None if util is None else float(util.gpu),
            mem_copy_util_pct=None if util is None else float(util.memory),
            sm_clock_mhz=self._opt(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
            mem_clock_mhz=self._opt(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM),
            fb_used_mib=None if mem is None else mem.used / 2**20,
            fb_free_mib=None if mem is None else mem.free / 2**20,
            power_w=None if power_mw is None else power_mw / 1000.0,
            energy_mj=self._opt(nv.nvmlDeviceGetTotalEnergyConsumption, h),
            gpu_temp_c=self._opt(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU),
            memory_temp_c=self._memory_temp(h),
            pcie_replay_total=self._opt(nv.nvmlDeviceGetPcieReplayCounter, h),
            ecc_sbe_volatile_total=self._opt(nv.nvmlDeviceGetTotalEccErrors, h, ecc[0], nv.NVML_VOLATILE_ECC),
            ecc_dbe_volatile_total=self._opt(nv.nvmlDeviceGetTotalEccErrors, h, ecc[1], nv.NVML_VOLATILE_ECC),
            ecc_sbe_aggregate_total=self._opt(nv.nvmlDeviceGetTotalEccErrors, h, ecc[0], nv.NVML_AGGREGATE_ECC),
            ecc_dbe_aggregate_total=self._opt(nv.nvmlDeviceGetTotalEccErrors, h, ecc[1], nv.NVML_AGGREGATE_ECC),
            remapped_rows_correctable=None if remap is None else int(remap[0]),
            remapped_rows_uncorrectable=None if remap is None else int(remap[1]),
            row_remap_pending=None if remap is None else bool(remap[2]),
            row_remap_failure=None if remap is None else bool(remap[3]),
            nvlink_crc_flit_errors_total=links[0],
            nvlink_crc_data_errors_total=links[1],
            nvlink_replay_errors_total=links[2],
            nvlink_recovery_errors_total=links[3],
            power_violation_ns=None if power_v is None else int(power_v.violationTime),
            thermal_violation_ns=None if thermal_v is None else int(thermal_v.violationTime),
            clocks_event_reasons=self._opt(nv.nvmlDeviceGetCurrentClocksEventReasons, h),
            sm_active_ratio=self._sm_active(index, h),
        )

    _FIELD_VALUE_ATTRS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")
    """``c_nvmlValue_t`` member by ``NVML_VALUE_TYPE_*`` (0 double ... 6 unsigned short), as nvidia-ml-py has them."""

    def _memory_temp(self, h: Any) -> float | None:
        """HBM temperature (C) from ``NVML_FI_DEV_MEMORY_TEMP``; None where the board or binding lacks it."""
        nv = self._nv
        field_id = getattr(nv, "NVML_FI_DEV_MEMORY_TEMP", None)
        if field_id is None or not hasattr(nv, "nvmlDeviceGetFieldValues"):
            return None
        values = self._opt(nv.nvmlDeviceGetFieldValues, h, [field_id])
        if not values or values[0].nvmlReturn != nv.NVML_SUCCESS:
            return None
        kind = int(values[0].valueType)
        if not 0 <= kind < len(self._FIELD_VALUE_ATTRS):
            return None
        return float(getattr(values[0].value, self._FIELD_VALUE_ATTRS[kind]))

    def _sm_active(self, index: int, h: Any) -> float | None:
        """SM activity between this read and the previous one, 0-1, from NVML's GPM (Hopper and newer).

        ``NVML_GPM_METRIC_SM_UTIL`` is in percent; DCGM_FI_PROF_SM_ACTIVE is a 0-1 ratio
        (docs.nvidia.com/deploy/nvml-api/api/group__nvmlGpmEnums.html; shared/reference/observability.md §1).
        The first read of a GPU has no interval yet and returns ``None``.
        """
        nv = self._nv
        if self._gpm_ok.get(index) is False:
            return None
        try:
            if index not in self._gpm_ok:
                self._gpm_ok[index] = bool(nv.nvmlGpmQueryDeviceSupport(h).isSupportedDevice)
                if not self._gpm_ok[index]:
                    return None
            sample = nv.nvmlGpmSampleGet(h, nv.nvmlGpmSampleAlloc())
            prev = self._gpm_prev.pop(index, None)
            self._gpm_prev[index] = sample
            if prev is None:
                return None
            query = nv.c_nvmlGpmMetricsGet_t()
            query.version = nv.NVML_GPM_METRICS_GET_VERSION
            query.numMetrics = 1
            query.sample1, query.sample2 = prev, sample
            query.metrics[0].metricId = nv.NVML_GPM_METRIC_SM_UTIL
            result = nv.nvmlGpmMetricsGet(query)
            nv.nvmlGpmSampleFree(prev)
            metric = result.metrics[0]
            return float(metric.value) / 100.0 if metric.nvmlReturn == nv.NVML_SUCCESS else None
        except nv.NVMLError:
            self._gpm_ok[index] = False  # unsupported here (e.g. pre-Hopper, MIG): stop asking
            return None

    def _nvlink_errors(self, index: int, h: Any) -> tuple[int | None, int | None, int | None, int | None]:
        """Per error kind, the sum over every link ever read of its monotonic count.

        A link is read while it is up; a link that goes down keeps its last value in the sum (NVML stops answering
        for it), and a link whose counter drops (reset) adds its old value to an offset. The totals are counters
        and must never decrease while the exporter lives.
        """
        nv = self._nv
        kinds = (
            nv.NVML_NVLINK_ERROR_DL_CRC_FLIT,
            nv.NVML_NVLINK_ERROR_DL_CRC_DATA,
            nv.NVML_NVLINK_ERROR_DL_REPLAY,
            nv.NVML_NVLINK_ERROR_DL_RECOVERY,
        )
        totals: list[int | None] = [None] * 4
        for link in range(self.NVLINK_MAX_LINKS):
            if self._opt(nv.nvmlDeviceGetNvLinkState, h, link) != nv.NVML_FEATURE_ENABLED:
                continue
            for k, kind in enumerate(kinds):
                value = self._opt(nv.nvmlDeviceGetNvLinkErrorCounter, h, link, kind)
                if value is not None:
                    last, offset = self._nvlink_seen.get((index, link, k), (0, 0))
                    self._nvlink_seen[(index, link, k)] = (int(value), offset + last if int(value) < last else offset)
        for (gpu, _link, k), (last, offset) in self._nvlink_seen.items():
            if gpu == index:
                totals[k] = (totals[k] or 0) + last + offset
        return totals[0], totals[1], totals[2], totals[3]

    def poll_xids(self) -> list[tuple[int, int]]:
        nv = self._nv
        out: list[tuple[int, int]] = []
        if self._events is None:
            return out
        while True:
            try:
                data = nv.nvmlEventSetWait_v2(self._events, 0)
            except nv.NVMLError:
                return out  # NVML_ERROR_TIMEOUT: no (more) events
            if data.eventType != nv.nvmlEventTypeXidCriticalError:
                continue
            index = self._opt(nv.nvmlDeviceGetIndex, data.device)
            out.append((-1 if index is None else int(index), int(data.eventData)))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlWhenReady:
    """NVML on a node that should have GPUs but whose NVML does not initialise yet (driver not loaded, a GPU lost at
    boot): every call retries ``NvmlBackend()`` and raises :class:`GpuReadError` until it succeeds, so the GPU
    source reports down (``fmstack_exporter_source_up{source="gpu"} 0`` -> FmstackGpuSourceDown -> reboot) while
    the EFA and Lustre sources are still served. Nothing is made up meanwhile: no GPU series at all."""

    def __init__(self, first_error: str, factory: Any = None) -> None:
        self._factory: Any = factory or NvmlBackend
        self._inner: Any = None
        self.last_init_error = first_error

    def _backend(self) -> Any:
        if self._inner is None:
            try:
                self._inner = self._factory()
            except GpuReadError as exc:
                self.last_init_error = str(exc)
                raise
        return self._inner

    def device_count(self) -> int:
        return int(self._backend().device_count())

    def read(self, index: int) -> GpuReading:
        reading: GpuReading = self._backend().read(index)
        return reading

    def poll_xids(self) -> list[tuple[int, int]]:
        return [] if self._inner is None else list(self._inner.poll_xids())

    def close(self) -> None:
        if self._inner is not None:
            self._inner.close()
