"""NvmlBackend: unit-tested against a stand-in ``pynvml`` module, and against the real NVML on a GPU machine."""

from __future__ import annotations

import shutil
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

from fmstack.observability.exporter import Exporter
from fmstack.observability.gpu import GpuReadError, NvmlBackend
from fmstack.observability.gpu_source import GpuSource


class _Err(Exception):
    pass


NVML_CONSTS: dict[str, int] = dict(
    NVML_CLOCK_SM=1, NVML_CLOCK_MEM=2, NVML_TEMPERATURE_GPU=0, NVML_MEMORY_ERROR_TYPE_CORRECTED=0,
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1, NVML_VOLATILE_ECC=0, NVML_AGGREGATE_ECC=1, NVML_PERF_POLICY_POWER=0,
    NVML_PERF_POLICY_THERMAL=1, NVML_NVLINK_ERROR_DL_REPLAY=0, NVML_NVLINK_ERROR_DL_RECOVERY=1,
    NVML_NVLINK_ERROR_DL_CRC_FLIT=2, NVML_NVLINK_ERROR_DL_CRC_DATA=3, NVML_FEATURE_ENABLED=1,
    nvmlEventTypeXidCriticalError=8,
)  # fmt: skip
"""The pynvml constants NvmlBackend reads (values as in pynvml)."""


def _fake_pynvml(lost: set[int], events: list[tuple[int, int]]) -> types.ModuleType:
    """Only the calls NvmlBackend makes, answering like an 8-GPU H100 node (values made up)."""
    m = types.ModuleType("pynvml")
    for k, v in NVML_CONSTS.items():
        setattr(m, k, v)
    ns = types.SimpleNamespace

    def handle(i: int) -> int:
        if i in lost:
            raise _Err("GPU is lost")
        return i

    def wait(_evset: Any, _timeout: int) -> Any:
        if not events:
            raise _Err("timeout")
        gpu, xid = events.pop(0)
        return ns(eventType=8, device=gpu, eventData=xid)

    clock = [0]

    def gpm_sample(h: int, sample: Any) -> Any:
        clock[0] += 1
        sample.taken = clock[0]
        return sample

    def gpm_metrics(query: Any) -> Any:
        # SM busy 82 % of the interval on every GPU (the real call computes it from the two samples)
        assert query.metrics[0].metricId == 2 and query.sample2.taken > query.sample1.taken
        query.metrics[0].value = 82.0
        return query

    def unsupported(*_a: Any) -> Any:
        raise _Err("not supported")

    def field_values(h: int, ids: list[int]) -> Any:
        # HBM at 70 C as an unsigned int (valueType 1); GPU 5 answers NOT_SUPPORTED (3) for the field (GDDR boards)
        assert ids == [82]
        return [ns(fieldId=82, nvmlReturn=3 if h == 5 else 0, valueType=1, value=ns(uiVal=70))]

    funcs: dict[str, Any] = dict(
        NVMLError=_Err,
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlEventSetCreate=lambda: "evset",
        nvmlEventSetFree=lambda _e: None, nvmlDeviceRegisterEvents=lambda h, t, e: None,
        nvmlDeviceGetCount=lambda: 8, nvmlDeviceGetHandleByIndex=handle, nvmlDeviceGetIndex=lambda h: h,
        nvmlDeviceGetUUID=lambda h: f"GPU-{h}", nvmlDeviceGetPciInfo=lambda h: ns(busId=b"00000000:53:00.0"),
        nvmlDeviceGetName=lambda h: "NVIDIA H100 80GB HBM3",
        nvmlDeviceGetUtilizationRates=lambda h: ns(gpu=97, memory=41),
        nvmlDeviceGetClockInfo=lambda h, c: 1980 if c == 1 else 2619,
        nvmlDeviceGetMemoryInfo=lambda h: ns(used=2 * 2**30, free=78 * 2**30, total=80 * 2**30),
        nvmlDeviceGetPowerUsage=lambda h: 652500, nvmlDeviceGetTotalEnergyConsumption=lambda h: 123456789,
        nvmlDeviceGetTemperature=lambda h, s: 61, nvmlDeviceGetPcieReplayCounter=unsupported,
        nvmlDeviceGetTotalEccErrors=lambda h, kind, where: 3 if kind == 0 else 0,
        nvmlDeviceGetRemappedRows=lambda h: (1, 0, 1, 0),
        nvmlDeviceGetViolationStatus=lambda h, p: ns(violationTime=5000 if p == 1 else 0),
        nvmlDeviceGetCurrentClocksEventReasons=lambda h: 0,
        nvmlDeviceGetNvLinkState=lambda h, link: 1 if link < 2 else 0,
        nvmlDeviceGetNvLinkErrorCounter=lambda h, link, kind: 7 if kind == 2 else 0,
        nvmlEventSetWait_v2=wait,
        NVML_SUCCESS=0, NVML_GPM_METRICS_GET_VERSION=1, NVML_GPM_METRIC_SM_UTIL=2,
        nvmlGpmQueryDeviceSupport=lambda h: ns(isSupportedDevice=1 if h != 6 else 0),
        nvmlGpmSampleAlloc=lambda: ns(taken=None), nvmlGpmSampleGet=gpm_sample, nvmlGpmSampleFree=lambda s: None,
        c_nvmlGpmMetricsGet_t=lambda: ns(metrics=[ns(metricId=0, nvmlReturn=0, value=0.0)]),
        nvmlGpmMetricsGet=gpm_metrics,
        NVML_FI_DEV_MEMORY_TEMP=82, nvmlDeviceGetFieldValues=field_values,
    )  # fmt: skip
    for k, v in funcs.items():
        setattr(m, k, v)
    return m


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[set[int], list[tuple[int, int]]]]:
    lost: set[int] = set()
    events: list[tuple[int, int]] = []
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(lost, events))
    yield lost, events


def test_nvml_backend_reads_and_converts_units(fake_nvml: tuple[set[int], list[tuple[int, int]]]) -> None:
    lost, events = fake_nvml
    b = NvmlBackend()
    r = b.read(0)
    assert r.pci_bus_id == "00000000:53:00.0"
    assert (r.power_w, r.fb_used_mib, r.fb_free_mib) == (652.5, 2048.0, 78 * 1024.0)  # mW -> W, bytes -> MiB
    assert (r.ecc_sbe_volatile_total, r.ecc_dbe_volatile_total) == (3, 0)
    assert (r.remapped_rows_correctable, r.row_remap_pending, r.row_remap_failure) == (1, True, False)
    assert r.nvlink_crc_flit_errors_total == 14  # 7 on each of the 2 active links
    assert r.pcie_replay_total is None  # unsupported -> not exported
    assert r.thermal_violation_ns == 5000
    assert r.memory_temp_c == 70.0  # NVML_FI_DEV_MEMORY_TEMP through nvmlDeviceGetFieldValues
    assert b.read(5).memory_temp_c is None  # field not supported on that GPU: not exported
    assert r.sm_active_ratio is None  # GPM needs two samples: the first read has no interval
    assert b.read(0).sm_active_ratio == pytest.approx(0.82)  # NVML percent -> DCGM ratio
    assert b.read(6).sm_active_ratio is None and b.read(6).sm_active_ratio is None  # GPM unsupported on GPU 6
    events += [(2, 79), (2, 79), (5, 13)]
    assert b.poll_xids() == [(2, 79), (2, 79), (5, 13)]
    assert b.poll_xids() == []
    lost.add(4)
    with pytest.raises(GpuReadError, match="gpu 4"):
        b.read(4)
    b.close()


def test_nvml_backend_through_the_exporter(fake_nvml: tuple[set[int], list[tuple[int, int]]]) -> None:
    lost, events = fake_nvml
    events.append((1, 48))
    lost.add(7)
    text = Exporter([GpuSource(NvmlBackend(), "n1", expected_gpus=8)]).render().decode()
    assert 'fmstack_gpus{Hostname="n1"} 7.0' in text
    assert 'DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-0"' in text
    assert "DCGM_FI_DEV_PCIE_REPLAY_COUNTER" not in text
    assert 'xid="48"} 1.0' in text


@pytest.mark.gpu
@pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="no NVIDIA driver on this machine")
def test_real_nvml_on_a_gpu_machine() -> None:
    pytest.importorskip("pynvml")
    b = NvmlBackend()
    try:
        n = b.device_count()
        assert n >= 1
        r = b.read(0)
        assert r.uuid.startswith(("GPU-", "MIG-"))
        assert r.gpu_temp_c is not None and 10 <= r.gpu_temp_c <= 100
        assert r.fb_used_mib is not None and r.fb_free_mib is not None
        assert r.power_w is not None and r.power_w > 0
        second = b.read(0)  # GPM SM activity over the interval between the two reads (Hopper and newer)
        assert second.sm_active_ratio is None or 0.0 <= second.sm_active_ratio <= 1.0
        text = Exporter([GpuSource(b, "gpu-host", expected_gpus=n)]).render().decode()
        assert f'fmstack_gpus{{Hostname="gpu-host"}} {float(n)}' in text
        assert 'fmstack_exporter_source_up{source="gpu"} 1.0' in text
    finally:
        b.close()


def test_nvlink_error_totals_never_decrease(fake_nvml: tuple[set[int], list[tuple[int, int]]]) -> None:
    """A link going down (its counter no longer read) or a link counter reset must not lower the GPU's total."""
    import pynvml

    up = {0, 1}
    counts = {0: 7, 1: 7}
    pynvml.nvmlDeviceGetNvLinkState = lambda h, link: 1 if link in up else 0  # type: ignore[attr-defined]
    pynvml.nvmlDeviceGetNvLinkErrorCounter = lambda h, link, kind: counts[link] if kind == 2 else 0  # type: ignore[attr-defined]
    b = NvmlBackend()
    assert b.read(0).nvlink_crc_flit_errors_total == 14
    up.discard(1)  # link 1 down: its 7 errors stay counted
    assert b.read(0).nvlink_crc_flit_errors_total == 14
    counts[0] = 9
    assert b.read(0).nvlink_crc_flit_errors_total == 16
    counts[0] = 1  # link 0's counter reset (e.g. GPU reset): 9 before + 1 after + link 1's 7
    assert b.read(0).nvlink_crc_flit_errors_total == 17
    up.add(1)
    counts[1] = 8
    assert b.read(0).nvlink_crc_flit_errors_total == 18
    assert b.read(1).nvlink_crc_flit_errors_total == 9  # GPU 1 has its own links: 1 + 8
    b.close()
