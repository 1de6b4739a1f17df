"""End to end with the real thing: Prometheus scrapes the exporter (fake GPUs), Xid 79 fires an alert, the
health engine turns the firing alerts into a reboot."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from fmstack.observability.app_metrics import AppMetrics
from fmstack.observability.app_source import AppSource
from fmstack.observability.efa import EfaSource
from fmstack.observability.exporter import Exporter
from fmstack.observability.fake import FakeGpuBackend
from fmstack.observability.gpu_source import GpuSource
from fmstack.observability.health import Action, HealthEngine
from fmstack.observability.health_io import render_slurm, signals_from_alerts
from fmstack.observability.lustre import LustreSource
from fmstack.observability.sysfs import DictFs

PROMETHEUS = shutil.which("prometheus")
pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(PROMETHEUS is None, reason="prometheus not installed (Debian package prometheus)"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


def _poll(what: str, check: Callable[[], Any], timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = check()
            if result:
                return result
        except OSError as exc:  # server not up yet
            last = exc
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what} (last error: {last})")


@pytest.fixture
def stack(tmp_path: Path, fixtures: Path) -> Iterator[tuple[FakeGpuBackend, str]]:
    gpu = FakeGpuBackend(num_gpus=8)
    fs = DictFs.from_tree(fixtures / "p5-node")
    app = AppMetrics(job_id="e2e")
    app.record_step(1.0, 4096, loss=2.0)
    exporter = Exporter(
        [GpuSource(gpu, "n1", expected_gpus=8), EfaSource(fs, "n1", 2), LustreSource(fs), AppSource(app)]
    )
    server = exporter.serve("127.0.0.1", 0)
    try:
        with _prometheus(tmp_path, server.server_address[1]) as base:
            yield gpu, base
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def _prometheus(tmp_path: Path, exporter_port: int) -> Iterator[str]:
    """A real Prometheus with fmstack's rules scraping the exporter on ``exporter_port`` every second; its URL."""
    rules = tmp_path / "fmstack-rules.yml"
    rules.write_text(resources.files("fmstack.observability").joinpath("rules/fmstack-rules.yml").read_text())
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{rules}']\n"
        "scrape_configs:\n"
        f"  - job_name: fmstack\n    static_configs: [{{targets: ['127.0.0.1:{exporter_port}']}}]\n"
    )
    port = _free_port()
    assert PROMETHEUS is not None
    with (tmp_path / "prometheus.log").open("w") as log:
        proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL, stderr=log,
        )  # fmt: skip
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def test_xid79_fires_and_the_engine_reboots(stack: tuple[FakeGpuBackend, str]) -> None:
    gpu, base = stack
    _poll("prometheus ready", lambda: urllib.request.urlopen(f"{base}/-/ready", timeout=5).status == 200)

    def scraped() -> bool:
        data = _get(f"{base}/api/v1/query?query=fmstack_gpus")["data"]["result"]
        return bool(data) and data[0]["value"][1] == "8"

    _poll("first scrape of the exporter", scraped)
    rules = _get(f"{base}/api/v1/rules")["data"]["groups"]
    assert sum(len(g["rules"]) for g in rules) == 34  # 11 recording rules and 23 alerts (docs/observability.md)
    assert not [a for a in _get(f"{base}/api/v1/alerts")["data"]["alerts"] if a["state"] == "firing"]

    gpu.fall_off_bus(3)  # the driver reports Xid 79 and NVML can no longer read GPU 3

    def firing() -> list[dict[str, Any]]:
        # Xid 79 fires at once; the GPU count must stay low for 1m before FmstackGpuMissing fires (pending here)
        alerts = _get(f"{base}/api/v1/alerts")["data"]["alerts"]
        states = {a["labels"]["alertname"]: a["state"] for a in alerts}
        missing = states.get("FmstackGpuMissing") in ("pending", "firing")
        return alerts if states.get("FmstackGpuXidRebootRequired") == "firing" and missing else []

    alerts = _poll("Xid 79 alert firing", firing)
    xid = next(a for a in alerts if a["labels"]["alertname"] == "FmstackGpuXidRebootRequired")
    assert xid["labels"]["xid"] == "79" and xid["labels"]["gpu"] == "3" and xid["labels"]["Hostname"] == "n1"
    assert xid["labels"]["action"] == "reboot_node"

    signals = signals_from_alerts(alerts)["n1"]
    assert signals.xids == [79]
    decision = HealthEngine().decide(signals)
    assert decision.action is Action.REBOOT_NODE
    assert render_slurm("n1", decision)[0].startswith("scontrol reboot ASAP nextstate=resume reason=")


@pytest.fixture
def node_stack(tmp_path: Path, fixtures: Path) -> Iterator[str]:
    """The node exporter as ``fmstack exporter`` assembles it (fake GPUs, the p5 fixture tree, an app snapshot),
    scraped every second by a real Prometheus with the shipped rules."""
    from fmstack.observability.node import build_node_exporter

    app_dir = tmp_path / "app"
    app_dir.mkdir()
    app = AppMetrics(job_id="j1", model_name="m1")
    for i in range(3):
        app.record_step(1.0 + 0.1 * i, 4096, loss=2.0, mfu=0.4, grad_norm=1.0)
    app.record_checkpoint(3.0)
    app.record_request(0.1, [0.01, 0.02], 5, 2)
    app.write_snapshot(app_dir / "j1.json")
    exporter = build_node_exporter(
        hostname="n1", backend="fake", sysfs_root=fixtures / "p5-node", app_dir=app_dir,
        expected_gpus=8, expected_efa=2, gpu_poll_interval_s=0.5,
    )  # fmt: skip
    gpu = exporter.sources[0].inner.backend  # type: ignore[attr-defined]
    gpu.inject_xid(2, 79)
    server = exporter.serve("127.0.0.1", 0)
    try:
        with _prometheus(tmp_path, server.server_address[1]) as base:
            yield base
    finally:
        server.shutdown()
        server.server_close()
        exporter.sources[0].stop(join_s=5)  # type: ignore[attr-defined]  # no poll thread left for other tests


def test_every_dashboard_panel_and_variable_has_data(node_stack: str) -> None:
    """A panel whose metric or label nobody exports stays empty: on a fully populated node (GPUs, EFA, Lustre,
    training and serving metrics, one Xid) every panel query, with each variable set to the node's / job's / model's value, returns series, and every
    template variable's label has values. (test_rules.py checks names only; this checks names and labels.)"""
    from urllib.parse import urlencode

    from fmstack.observability.dashboards import _VARIABLE_QUERIES, all_queries, substitute_variables

    def query(expr: str) -> list[dict[str, Any]]:
        data = _get(f"{node_stack}/api/v1/query?" + urlencode({"query": expr}))["data"]
        return list(data["result"])

    _poll("prometheus ready", lambda: urllib.request.urlopen(f"{node_stack}/-/ready", timeout=5).status == 200)
    # rates and the recording rules need a few scrapes and evaluations: wait until the slowest panel has data
    _poll("recording rules evaluated", lambda: query("instance:node_amazonefa_tx_bytes:rate1m"))
    _poll("histogram rates", lambda: query("job_id:fmstack_train_step_duration_seconds:p50_5m"))
    values = {"$Hostname": "n1", "$job_id": "j1", "$model_name": "m1"}  # not ".*": that also matches a missing label

    def selected(expr: str) -> str:
        for var, value in values.items():
            expr = expr.replace(var, value)
        return substitute_variables(expr)

    empty = [f"{dash}: {title}" for dash, title, expr in all_queries() if not query(selected(expr))]
    assert not empty, f"panels without data: {empty}"
    for var, expr in _VARIABLE_QUERIES.items():
        metric, label = (x.strip() for x in expr.removeprefix("label_values(").removesuffix(")").split(","))
        assert [r["metric"][label] for r in query(f"count by ({label}) ({metric})")], var
