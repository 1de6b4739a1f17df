"""A missing /sys/class/infiniband is a source error (EFA source down), not zero EFA devices."""

from __future__ import annotations

from pathlib import Path

from fmstack.observability.efa import EfaSource
from fmstack.observability.exporter import Exporter
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
    assert "fmstack_efa_devices" not in text, "a missing driver must not read as 0 devices"
    assert "infiniband" in exp.last_error["efa"]


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
