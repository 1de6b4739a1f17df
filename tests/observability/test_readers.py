"""EFA sysfs and Lustre llite readers on the recorded fixture tree; the in-memory fake equals the real reader."""

from __future__ import annotations

from pathlib import Path

import pytest

from fmstack.observability.efa import scan_efa
from fmstack.observability.lustre import LustreSource, parse_stats
from fmstack.observability.sysfs import DictFs, OsFs


def test_efa_scan_reads_the_kernel_counter_files(fixtures: Path) -> None:
    scan = scan_efa(OsFs(fixtures / "p5-node"))
    assert [d.name for d in scan.devices] == ["rdmap16s27", "rdmap32s27"]
    assert scan.read_errors == 0
    port = scan.devices[0].ports["1"]
    tx = (fixtures / "p5-node/sys/class/infiniband/rdmap16s27/ports/1/hw_counters/tx_bytes").read_text()
    assert port["tx_bytes"] == int(tx) == 918273645123
    assert port["retrans_timeout_events"] == 0
    assert len(port) == 23  # efa_verbs.c port stats incl. the five 2025 SRD network counters and lifespan
    assert scan.devices[1].device_counters["keep_alive_rcvd"] == 86400


def test_in_memory_tree_reads_like_the_real_one(fixtures: Path) -> None:
    real = scan_efa(OsFs(fixtures / "p5-node"))
    fake = scan_efa(DictFs.from_tree(fixtures / "p5-node"))
    assert fake == real


def test_efa_scan_survives_vanishing_files_and_devices(fixtures: Path) -> None:
    fs = DictFs.from_tree(fixtures / "p5-node")
    fs.break_file("sys/class/infiniband/rdmap16s27/ports/1/hw_counters/rx_bytes")
    fs.hide_prefix("sys/class/infiniband/rdmap32s27/ports")
    scan = scan_efa(fs)
    assert [d.name for d in scan.devices] == ["rdmap16s27"]
    assert "rx_bytes" not in scan.devices[0].ports["1"]
    assert scan.read_errors == 2  # the broken file, and the device whose ports/ vanished
    assert scan_efa(DictFs({})).devices == []  # a node without EFA


def test_lustre_stats_parse(fixtures: Path) -> None:
    text = (fixtures / "p5-node/proc/fs/lustre/llite/fsx-ffff9a2b3c4d5000/stats").read_text()
    stats = parse_stats(text)
    assert "snapshot_time" not in stats
    rb = stats["read_bytes"]
    assert (rb.count, rb.unit, rb.minimum, rb.maximum, rb.total) == (20480, "bytes", 4096, 1048576, 10737418240)
    assert stats["open"].count == 1500 and stats["open"].total is None
    # 10 GiB read in 20480 calls: 512 KiB average, between the 4 KiB minimum and 1 MiB maximum
    assert rb.total is not None and rb.total / rb.count == 512 * 1024


def test_lustre_source_prefers_debugfs_and_tolerates_absence(fixtures: Path) -> None:
    fams = {f.name: f for f in LustreSource(OsFs(fixtures / "p5-node")).collect()}
    assert fams["lustre_write_bytes"].samples[0].value == 5368709120
    assert fams["lustre_write_bytes"].samples[0].labels == {"component": "client", "target": "fsx-ffff9a2b3c4d5000"}
    debugfs = DictFs({"sys/kernel/debug/lustre/llite/fsx-1/stats": "read_bytes 2 samples [bytes] 1 3 4\n"})
    fams = {f.name: f for f in LustreSource(debugfs).collect()}
    assert fams["lustre_read_bytes"].samples[0].value == 4
    assert list(LustreSource(DictFs({})).collect()) == []


def test_read_dir_answers_like_listdir_then_read_text(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d/tx_bytes").write_text("123\n")
    (tmp_path / "d/big").write_bytes(b"7" * 10_000)  # more than one 4 KiB read
    (tmp_path / "d/sub").mkdir()
    assert OsFs(tmp_path).read_dir("d") == [("big", b"7" * 10_000), ("sub", None), ("tx_bytes", b"123\n")]
    fs = DictFs({"d/a": "1\n", "d/b": "2\n", "d/c": "3\n", "d/e/f": "4\n"})
    fs.break_file("d/b")
    fs.hide("d/c")
    assert fs.read_dir("d") == [("a", "1\n"), ("b", None), ("e", None)]
    for reader in (OsFs(tmp_path), fs):
        with pytest.raises(OSError):
            reader.read_dir("nope")


def test_efa_lifespan_is_a_gauge_and_the_counts_are_counters(fixtures: Path) -> None:
    from fmstack.observability.efa import EfaSource
    from fmstack.observability.exporter import Exporter

    text = Exporter([EfaSource(OsFs(fixtures / "p5-node"), "n1")]).render().decode()
    types = dict(ln.split()[2:4] for ln in text.splitlines() if ln.startswith("# TYPE node_amazonefa_"))
    # lifespan is the rdma hw_counters refresh setting (ms): a lowered value must not read as a counter reset
    assert types["node_amazonefa_lifespan"] == "gauge"
    assert types["node_amazonefa_device_lifespan"] == "gauge"
    assert types["node_amazonefa_tx_bytes"] == types["node_amazonefa_retrans_timeout_events"] == "counter"
    assert types["node_amazonefa_device_keep_alive_rcvd"] == "counter"
    assert "# HELP node_amazonefa_lifespan milliseconds the kernel keeps a read" in text
