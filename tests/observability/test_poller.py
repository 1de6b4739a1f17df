"""A hung NVML read must not stall the scrape: the GPU source is polled in the background and goes down when late."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from fmstack.observability.efa import EfaSource
from fmstack.observability.exporter import Exporter
from fmstack.observability.fake import FakeGpuBackend
from fmstack.observability.gpu import GpuReading
from fmstack.observability.gpu_source import GpuSource
from fmstack.observability.poller import PolledSource
from fmstack.observability.sysfs import DictFs


class HangingBackend(FakeGpuBackend):
    """A fake whose reads block while ``hang`` is set (as NVML calls do around Xid 79 / 119)."""

    def __init__(self) -> None:
        super().__init__(num_gpus=2)
        self.hang = threading.Event()
        self.release = threading.Event()

    def read(self, index: int) -> GpuReading:
        if self.hang.is_set():
            self.release.wait(10)
        return super().read(index)


def _line(text: str, prefix: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith(prefix)]


def _render_within(exp: Exporter, seconds: float) -> str:
    out: list[bytes] = []
    t = threading.Thread(target=lambda: out.append(exp.render()), daemon=True)
    t.start()
    t.join(seconds)
    assert out, f"scrape did not return within {seconds} s"
    return out[0].decode()


def test_hung_gpu_read_does_not_stall_the_scrape(fixtures: Path) -> None:
    backend = HangingBackend()
    gpu = PolledSource(GpuSource(backend, "n1"), interval_s=0.05, deadline_s=0.1)
    exp = Exporter([gpu, EfaSource(DictFs.from_tree(fixtures / "p5-node"), "n1")], hostname="n1")
    gpu.start()
    try:
        deadline = time.monotonic() + 5
        while gpu.last_success_s is None and time.monotonic() < deadline:
            time.sleep(0.01)
        text = _render_within(exp, 2.0)
        assert 'fmstack_exporter_source_up{source="gpu",Hostname="n1"} 1.0' in text
        assert _line(text, "DCGM_FI_DEV_GPU_UTIL{")
        assert _line(text, 'fmstack_exporter_source_last_success_timestamp_seconds{source="gpu"')
        backend.hang.set()
        time.sleep(0.4)  # > interval + deadline: the read in flight is late
        start = time.monotonic()
        text = _render_within(exp, 2.0)
        assert time.monotonic() - start < 1.0
        assert 'fmstack_exporter_source_up{source="gpu",Hostname="n1"} 0.0' in text
        assert 'fmstack_exporter_source_up{source="efa",Hostname="n1"} 1.0' in text
        assert not _line(text, "DCGM_FI_DEV_GPU_UTIL{"), "stale GPU values must not be served"
        assert _line(text, "node_amazonefa_tx_bytes{")
        assert "in flight" in exp.last_error["gpu"]
        # the stale source keeps its last success time, older than the EFA one
        stamps = {ln.split('source="')[1].split('"')[0]: float(ln.split()[-1])
                  for ln in _line(text, "fmstack_exporter_source_last_success_timestamp_seconds{")}  # fmt: skip
        assert stamps["efa"] - stamps["gpu"] > 0.3
        assert [t.name for t in threading.enumerate()].count("fmstack-poll-gpu") == 1
        backend.hang.clear()
        backend.release.set()
        deadline = time.monotonic() + 5
        while "gpu" in exp.last_error and time.monotonic() < deadline:
            text = exp.render().decode()
            if 'fmstack_exporter_source_up{source="gpu",Hostname="n1"} 1.0' in text:
                break
            time.sleep(0.02)
        assert 'fmstack_exporter_source_up{source="gpu",Hostname="n1"} 1.0' in text
    finally:
        gpu.stop()
        backend.release.set()


def test_polled_source_serves_cache_and_reports_failures() -> None:
    now = [1000.0]
    backend = FakeGpuBackend(num_gpus=1)
    gpu = PolledSource(GpuSource(backend, "n1"), interval_s=10, deadline_s=5, clock=lambda: now[0])
    exp = Exporter([gpu])
    assert 'fmstack_exporter_source_up{source="gpu"} 0.0' in exp.render().decode()  # nothing read yet
    gpu.poll_once()
    backend.lose_nvml()
    now[0] += 14.9  # within interval + deadline: the cached read is served
    text = exp.render().decode()
    assert 'fmstack_exporter_source_up{source="gpu"} 1.0' in text
    assert 'fmstack_exporter_source_last_success_timestamp_seconds{source="gpu"} 1000.0' in text
    gpu.poll_once()  # fails: NVML lost
    now[0] += 0.2  # 15.1 s after the last good read
    text = exp.render().decode()
    assert 'fmstack_exporter_source_up{source="gpu"} 0.0' in text
    assert "NVML" in exp.last_error["gpu"]
