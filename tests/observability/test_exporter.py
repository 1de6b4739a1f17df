"""Exporter: names and labels as dcgm-exporter / EFA exporter, isolation, and a failing source never breaks a scrape."""

from __future__ import annotations

import random
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import prometheus_client
import pytest
from prometheus_client.parser import text_string_to_metric_families

from fmstack.observability.app_metrics import AppMetrics
from fmstack.observability.app_source import AppSource
from fmstack.observability.efa import EfaSource
from fmstack.observability.exporter import DEFAULT_BIND, Exporter
from fmstack.observability.fake import FakeGpuBackend, RandomFaults
from fmstack.observability.gpu_source import GpuSource
from fmstack.observability.lustre import LustreSource
from fmstack.observability.sysfs import DictFs
from tests.observability.conftest import efa_tree_32

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def _values(text: bytes) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Samples by (name, labels), names verbatim (prometheus_client's parser would add _total to counters)."""
    out = {}
    for line in text.decode().splitlines():
        if line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        assert m, f"not an exposition line: {line!r}"
        out[(m.group(1), frozenset(_LABEL.findall(m.group(2) or "")))] = float(m.group(3))
    return out


def _get(values: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> list[float]:
    return [v for (n, ls), v in values.items() if n == name and set(labels.items()) <= ls]


class FlakyApp:
    name = "app"

    def __init__(self, metrics: AppMetrics) -> None:
        self.inner = AppSource(metrics)
        self.fail = False

    def collect(self) -> Iterator[prometheus_client.Metric]:
        if self.fail:
            raise RuntimeError("app snapshot unreadable")
        return self.inner.collect()


def _node(fixtures: Path) -> tuple[Exporter, FakeGpuBackend, DictFs, FlakyApp]:
    gpu = FakeGpuBackend.from_json(fixtures / "nvml-h100x8.json")
    fs = DictFs.from_tree(fixtures / "p5-node")
    app = AppMetrics(job_id="j1", model_name="m", clock=lambda: 1000.0)
    app.record_step(step_time_s=2.0, tokens=8192, loss=3.25, mfu=0.41)
    flaky = FlakyApp(app)
    exp = Exporter(
        [GpuSource(gpu, "n1", expected_gpus=8, clock=lambda: 500.0), EfaSource(fs, "n1", 2), LustreSource(fs), flaky]
    )
    return exp, gpu, fs, flaky


def test_dcgm_names_labels_and_counter_types(fixtures: Path) -> None:
    exp, gpu, _fs, _app = _node(fixtures)
    gpu.inject_xid(1, 31)
    text = exp.render().decode()
    for fam in text_string_to_metric_families(text):  # the client library's parser accepts the whole text
        assert fam.samples
    line = (
        'DCGM_FI_DEV_GPU_TEMP{gpu="5",UUID="GPU-00000000-0000-0000-0000-000000000005",pci_bus_id="00000000:A3:00.0",'
        'device="nvidia5",modelName="NVIDIA H100 80GB HBM3",Hostname="n1"} 88.0'
    )
    assert line in text.splitlines()
    # dcgm-exporter and the EFA exporter declare these counters without a _total suffix
    assert "# TYPE DCGM_FI_DEV_ECC_SBE_VOL_TOTAL counter" in text
    assert "# TYPE node_amazonefa_tx_bytes counter" in text
    assert "# TYPE fmstack_gpu_xid_errors_total counter" in text
    v = _values(exp.render())
    # 4e9 ns of thermal violation = 4e6 us (DCGM reports microseconds)
    assert _get(v, "DCGM_FI_DEV_THERMAL_VIOLATION", gpu="5") == [4e6]
    assert _get(v, "node_amazonefa_tx_bytes", device="rdmap16s27", port="1") == [918273645123.0]
    assert _get(v, "node_amazonefa_device_keep_alive_rcvd", device="rdmap32s27") == [86400.0]
    assert _get(v, "lustre_read_bytes_total", target="fsx-ffff9a2b3c4d5000") == [10737418240.0]
    assert _get(v, "lustre_stats_total", operation="open") == [1500.0]
    assert _get(v, "fmstack_train_tokens_per_second", job_id="j1") == [4096.0]
    assert _get(v, "fmstack_gpus") == [8.0]
    assert _get(v, "fmstack_efa_devices") == [2.0]
    assert sorted(_get(v, "fmstack_exporter_source_up")) == [1.0, 1.0, 1.0, 1.0]


def test_scripted_xid_and_injected_faults(fixtures: Path) -> None:
    exp, gpu, fs, app = _node(fixtures)
    exp.render()
    exp.render()
    v = _values(exp.render())  # third poll: the script raises Xid 13 on GPU 2
    assert _get(v, "fmstack_gpu_xid_errors_total", gpu="2", xid="13") == [1.0]
    assert _get(v, "DCGM_FI_DEV_XID_ERRORS", gpu="2") == [13.0]
    assert _get(v, "fmstack_gpu_xid_last_seen_timestamp_seconds", gpu="2", xid="13") == [500.0]

    gpu.fall_off_bus(3)
    v = _values(exp.render())
    assert _get(v, "fmstack_gpu_up", gpu="3") == [0.0]
    assert _get(v, "fmstack_gpus") == [7.0]
    assert _get(v, "fmstack_gpu_xid_errors_total", gpu="3", xid="79") == [1.0]
    assert _get(v, "DCGM_FI_DEV_GPU_TEMP", gpu="3") == []
    assert len(_get(v, "DCGM_FI_DEV_GPU_TEMP")) == 7

    gpu.lose_nvml()
    fs.break_file("sys/class/infiniband/rdmap16s27/ports/1/hw_counters/tx_bytes")
    app.fail = True
    v = _values(exp.render())
    assert _get(v, "fmstack_exporter_source_up", source="gpu") == [0.0]
    assert _get(v, "fmstack_exporter_source_up", source="app") == [0.0]
    assert _get(v, "fmstack_exporter_source_up", source="efa") == [1.0]
    assert _get(v, "fmstack_exporter_source_errors_total", source="gpu") == [1.0]
    assert _get(v, "node_amazonefa_tx_bytes", device="rdmap16s27") == []
    assert _get(v, "node_amazonefa_tx_bytes", device="rdmap32s27") == [918273646123.0]
    assert _get(v, "fmstack_efa_read_errors_total") == [1.0]
    assert exp.last_error["gpu"].startswith("GpuReadError")

    gpu.heal()
    app.fail = False
    v = _values(exp.render())
    assert sorted(_get(v, "fmstack_exporter_source_up")) == [1.0, 1.0, 1.0, 1.0]
    assert _get(v, "fmstack_gpu_xid_errors_total", gpu="3", xid="79") == [1.0]  # counters survive the outage


def test_random_faults_never_break_a_scrape() -> None:
    """CI-sized version of the benchmark's 10,000 scrapes: every scrape parses and reports every source."""
    gpu = FakeGpuBackend(num_gpus=8)
    fs = DictFs(efa_tree_32())
    app = FlakyApp(AppMetrics(job_id="j"))
    faults = RandomFaults(random.Random(7), gpu, fs, p=0.2)
    exp = Exporter([GpuSource(gpu, "n1", 8), EfaSource(fs, "n1", 32), LustreSource(fs), app])
    for _ in range(200):
        faults.step()
        app.fail = faults.app_should_fail
        text = exp.render().decode()
        assert text.endswith("\n")
        up = [ln for ln in text.splitlines() if ln.startswith("fmstack_exporter_source_up{")]
        assert len(up) == 4
        assert (f'fmstack_exporter_source_up{{source="gpu"}} {0.0 if gpu.nvml_lost else 1.0}') in up
    assert min(faults.injected.values()) > 20  # every fault kind was exercised (p=0.2 of 200 ~ 40 each)
    assert exp.scrapes == 200


def test_each_exporter_has_its_own_registry(fixtures: Path) -> None:
    before = set(prometheus_client.REGISTRY._collector_to_names)
    a, _, _, _ = _node(fixtures)
    b = Exporter([])
    a.render()
    assert a.registry is not b.registry
    assert "fmstack_gpus" not in b.render().decode()
    assert set(prometheus_client.REGISTRY._collector_to_names) == before


def test_duplicate_source_names_are_refused(fixtures: Path) -> None:
    fs = DictFs.from_tree(fixtures / "p5-node")
    with pytest.raises(ValueError, match="unique"):
        Exporter([LustreSource(fs), LustreSource(fs)])


def test_http_server_binds_loopback_by_default(fixtures: Path) -> None:
    assert DEFAULT_BIND == "127.0.0.1"
    exp, _, _, _ = _node(fixtures)
    server = exp.serve(port=0)
    try:
        host, port = server.server_address[:2]
        assert host == "127.0.0.1"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            assert resp.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
            assert b"fmstack_gpus" in resp.read()
    finally:
        server.shutdown()
        server.server_close()
