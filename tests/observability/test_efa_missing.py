"""A missing /sys/class/infiniband is a source error (EFA source down), not zero EFA devices; with an expected count
the exporter still serves it, so FmstackEfaSourceDown reboots a node that should have EFA."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fmstack.observability.actions import Action
from fmstack.observability.efa import EfaSource
from fmstack.observability.exporter import Exporter
from fmstack.observability.health import HealthEngine
from fmstack.observability.health_io import signals_from_alerts
from fmstack.observability.lustre import LustreSource
from fmstack.observability.node import build_node_exporter
from fmstack.observability.sysfs import DictFs, OsFs


def test_missing_infiniband_dir_is_source_down(fixtures: Path) -> None:
    files = DictFs.from_tree(fixtures / "p5-node").files
    fs = DictFs({k: v for k, v in files.items() if not k.startswith("sys/class/infiniband/")})
    exp = Exporter([EfaSource(fs, "n1", expected_devices=32), LustreSource(fs)])
    text = exp.render().decode()
    assert 'fmstack_exporter_source_up{source="efa"} 0.0' in text
    assert 'fmstack_exporter_source_up{source="lustre"} 1.0' in text
    assert "fmstack_efa_devices{" not in text, "a missing driver must not read as 0 devices"
    assert "infiniband" in exp.last_error["efa"]
    # the configured count is served while the source is down, so FmstackEfaSourceDown can fire (before the fix
    # nothing EFA was left and the node got no action)
    assert 'fmstack_efa_devices_expected{Hostname="n1"} 32.0' in text
    assert "node_amazonefa_" not in text


def test_source_down_without_an_expected_count_serves_no_efa_series(fixtures: Path) -> None:
    files = DictFs.from_tree(fixtures / "p5-node").files
    fs = DictFs({k: v for k, v in files.items() if not k.startswith("sys/class/infiniband/")})
    text = Exporter([EfaSource(fs, "n1")]).render().decode()
    assert 'fmstack_exporter_source_up{source="efa"} 0.0' in text
    assert "fmstack_efa_" not in text and "node_amazonefa_" not in text


def test_driver_not_loaded_with_expected_efa_reboots_through_the_cli(tmp_path: Path) -> None:
    """The exporter CLI on a node without /sys/class/infiniband, --expected-efa 32: the scrape has what the
    FmstackEfaSourceDown rule needs, and that alert makes the health engine reboot the node."""
    argv = [sys.executable, "-m", "fmstack", "exporter", "--backend", "none", "--sysfs-root", str(tmp_path),
            "--expected-efa", "32", "--hostname", "n1", "--once"]  # fmt: skip
    text = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True).stdout
    assert 'fmstack_exporter_source_up{source="efa",Hostname="n1"} 0.0' in text
    assert 'fmstack_efa_devices_expected{Hostname="n1"} 32.0' in text
    alert = {"state": "firing", "labels": {"alertname": "FmstackEfaSourceDown", "Hostname": "n1", "source": "efa"}}
    decision = HealthEngine().decide(signals_from_alerts([alert])["n1"])
    assert decision.action is Action.REBOOT_NODE
    assert decision.reasons == ["an EFA device is missing (or the EFA source is down: driver not loaded)"]


def test_present_but_empty_infiniband_dir_is_zero_devices(tmp_path: Path) -> None:
    (tmp_path / "sys/class/infiniband").mkdir(parents=True)  # the driver is loaded, no device in it
    text = Exporter([EfaSource(OsFs(tmp_path), "n1")]).render().decode()
    assert 'fmstack_exporter_source_up{source="efa"} 1.0' in text
    assert 'fmstack_efa_devices{Hostname="n1"} 0.0' in text


def test_no_efa_leaves_the_source_out(tmp_path: Path) -> None:
    exp = build_node_exporter(hostname="n1", backend="none", sysfs_root=tmp_path, efa=False)
    assert [s.name for s in exp.sources] == ["lustre"]
    down = build_node_exporter(hostname="n1", backend="none", sysfs_root=tmp_path)
    assert 'fmstack_exporter_source_up{source="efa",Hostname="n1"} 0.0' in down.render().decode()
