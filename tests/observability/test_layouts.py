"""Sources that write their own text (layouts) give the families the plain prometheus-client way gives: EFA's bulk
path equals its file-by-file parse on any counter text, GPU families with unsupported fields, app histograms;
Lustre; and OsFs's held descriptors read current values, follow replaced files and give back vanished ones (and
those of a device that went away)."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from fmstack.observability.app_metrics import AppMetrics, AppSnapshot, HistogramData
from fmstack.observability.app_source import AppSource, SnapshotRenderer
from fmstack.observability.efa import EfaSource, scan_efa
from fmstack.observability.exposition import render_text
from fmstack.observability.fake import FakeGpuBackend
from fmstack.observability.gpu_source import DCGM_FIELDS, LABELS, GpuSource
from fmstack.observability.lustre import LustreSource, StatLine, parse_stats
from fmstack.observability.sysfs import DictFs, OsFs
from tests.observability.test_exposition import reference_text

PORT = "sys/class/infiniband/{dev}/ports/1/hw_counters/{name}"
ODD_TEXTS = [
    "007\n",  # leading zeros: int() reads 7
    " 5\n",  # whitespace
    "1_000\n",  # int() reads 1000
    "+5\n",
    "5",  # no newline
    "5\n6\n",  # two lines
    "\n",  # empty line
    "",
    "\u0663\n",  # an Arabic-Indic digit: int() reads 3
    "999999999999999\n",  # 15 digits: the bulk path's largest
    "1000000000000000\n",  # 16 digits: repr writes 1000000000000000.0
    "9007199254740993\n",  # 2**53 + 1: the float rounds
    "12345678901234567890\n",  # repr writes 1.2345678901234567e+19
    "0\n",
    "-3\n",
    "abc\n",
]


def _efa_tree(odd: str) -> dict[str, str]:
    files = {}
    for i, dev in enumerate(("rdmap16s27", "rdmap32s27")):
        for j, name in enumerate(("rx_bytes", "tx_bytes", "tx_pkts")):
            files[PORT.format(dev=dev, name=name)] = f"{1000 * i + j}\n"
        files[f"sys/class/infiniband/{dev}/hw_counters/keep_alive_rcvd"] = "86400\n"
    files[PORT.format(dev="rdmap32s27", name="tx_pkts")] = odd
    return files


def _scan_values(scan_fs: DictFs | OsFs) -> dict[tuple[str, str, str], float]:
    out = {}
    for dev in scan_efa(scan_fs).devices:
        for port, counters in dev.ports.items():
            out |= {(f"node_amazonefa_{c}", dev.name, port): float(v) for c, v in counters.items()}
    return out


@pytest.mark.parametrize("odd", ODD_TEXTS)
def test_efa_bulk_path_equals_the_file_by_file_parse(odd: str, tmp_path: Path) -> None:
    files = _efa_tree(odd)
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    for fs in (DictFs(files), OsFs(tmp_path)):
        source = EfaSource(fs, "n1")
        texts = []
        for _ in range(3):  # the first scrape parses file by file and learns the layout; later ones may go in bulk
            families = list(source.collect())
            text = render_text(families)
            assert text == reference_text(families)
            texts.append(b"".join(ln for ln in text.splitlines(True) if not ln.startswith(b"fmstack_efa_read_errors")))
            values = {
                (s.name, s.labels["device"], s.labels["port"]): s.value
                for f in families
                for s in f.samples
                if "port" in s.labels
            }
            assert values == _scan_values(fs)
        assert texts[0] == texts[1] == texts[2]  # read errors aside, which count up
        canonical = odd in ("999999999999999\n", "0\n")
        assert source.fast_scrapes == (2 if canonical else 0)


def test_efa_bulk_path_follows_changing_values_and_structure() -> None:
    fs = DictFs(_efa_tree("7\n"))
    source = EfaSource(fs, "n1")
    for step in range(6):
        fs.files[PORT.format(dev="rdmap16s27", name="tx_bytes")] = f"{step * 10**12}\n"
        if step == 3:
            fs.hide_prefix("sys/class/infiniband/rdmap32s27")
        if step == 4:
            fs.restore()
        text = render_text(list(source.collect())).decode()
        assert (
            f'node_amazonefa_tx_bytes{{device="rdmap16s27",port="1",Hostname="n1"}} {float(step * 10**12)!r}\n' in text
        )
        assert ('device="rdmap32s27"' in text) == (step != 3)
        assert f'fmstack_efa_devices{{Hostname="n1"}} {1.0 if step == 3 else 2.0}' in text
    # 0 learns; 1, 2 bulk; 3 (one device gone) learns; 4 (back: a new structure again) parses; 5 bulk
    assert source.fast_scrapes == 3


def _dcgm_reference(gpu: FakeGpuBackend) -> list[Metric]:
    """DCGM families as the exporter wrote them before layouts: a Metric per field, a sample per GPU."""
    families = {metric: Metric(metric, doc, mtype) for _f, metric, mtype, doc, _s in DCGM_FIELDS}
    for r in gpu.readings:
        labels = [str(r.index), r.uuid, r.pci_bus_id, f"nvidia{r.index}", r.model_name, "n1"]
        for field, metric, _t, _d, scale in DCGM_FIELDS:
            value = getattr(r, field)
            if value is not None:
                families[metric].add_sample(metric, dict(zip(LABELS, labels, strict=True)), float(value) * scale)
    return [f for f in families.values() if f.samples]


def test_gpu_families_with_unsupported_fields_and_special_values() -> None:
    gpu = FakeGpuBackend(num_gpus=4)
    gpu.set(1, memory_temp_c=None, sm_active_ratio=None)  # not supported on this GPU
    gpu.set(2, power_w=math.inf, gpu_util_pct=math.nan, thermal_violation_ns=123456789)
    gpu.set(3, gpu_util_pct=None)
    families = list(GpuSource(gpu, "n1", clock=lambda: 1.0).collect())
    fields = {metric for _f, metric, _t, _d, _s in DCGM_FIELDS}
    dcgm = [f for f in families if f.name in fields]
    assert render_text(dcgm) == reference_text(_dcgm_reference(gpu))
    text = render_text(dcgm).decode()
    assert 'DCGM_FI_DEV_POWER_USAGE{gpu="2",' in text and "} +Inf\n" in text and "} NaN\n" in text
    assert 'DCGM_FI_DEV_THERMAL_VIOLATION{gpu="2"' in text and "} 123456.789\n" in text  # ns -> us


def _app_reference(snaps: list[AppSnapshot]) -> list[Metric]:
    """The app families as prometheus-client's families built them before layouts."""
    tl, sl = ["job_id"], ["job_id", "model_name"]
    c = CounterMetricFamily
    g = GaugeMetricFamily
    h = HistogramMetricFamily
    fams: list[Metric] = [
        c("fmstack_train_steps", "Optimizer steps completed", labels=tl),
        c("fmstack_train_tokens", "Training tokens processed", labels=tl),
        g("fmstack_train_tokens_per_second", "Tokens per second in the last step", labels=tl),
        g("fmstack_train_loss", "Training loss of the last step", labels=tl),
        g("fmstack_train_grad_norm", "Gradient norm of the last step", labels=tl),
        g("fmstack_train_mfu_ratio", "Model FLOPs utilisation 0-1 (6N per token)", labels=tl),
        g("fmstack_train_last_step_timestamp_seconds", "When the last step finished", labels=tl),
        g("fmstack_train_checkpoint_duration_seconds", "Last checkpoint save time", labels=tl),
        h("fmstack_train_step_duration_seconds", "Step time", labels=tl),
        c("fmstack_serving_requests", "Requests served", labels=sl),
        c("fmstack_serving_prompt_tokens", "Prompt tokens", labels=sl),
        c("fmstack_serving_generation_tokens", "Generated tokens", labels=sl),
        h("fmstack_serving_time_to_first_token_seconds", "Time to first token", labels=sl),
        h("fmstack_serving_inter_token_latency_seconds", "Inter-token latency", labels=sl),
    ]

    def hist(fam: Metric, labels: list[str], data: HistogramData) -> None:
        buckets = [("+Inf" if b == math.inf else repr(float(b)), float(n)) for b, n in data.cumulative()]
        fam.add_metric(labels, buckets, data.total)  # type: ignore[attr-defined]

    for s in snaps:
        t, v = [s.job_id], [s.job_id, s.model_name]
        if s.steps_total:
            fams[0].add_metric(t, float(s.steps_total))  # type: ignore[attr-defined]
            fams[1].add_metric(t, float(s.tokens_total))  # type: ignore[attr-defined]
            hist(fams[8], t, s.step_duration)
        gauges = (
            s.tokens_per_second,
            s.loss,
            s.grad_norm,
            s.mfu_ratio,
            s.last_step_timestamp_s,
            s.checkpoint_duration_s,
        )
        for fam, value in zip(fams[2:8], gauges, strict=True):
            if value is not None:
                fam.add_metric(t, float(value))  # type: ignore[attr-defined]
        if s.requests_total:
            for fam, n in zip(
                fams[9:12], (s.requests_total, s.prompt_tokens_total, s.generation_tokens_total), strict=True
            ):
                fam.add_metric(v, float(n))  # type: ignore[attr-defined]
            hist(fams[12], v, s.ttft)
            hist(fams[13], v, s.itl)
    return [f for f in fams if f.samples]


def test_app_families_equal_prometheus_client_histograms() -> None:
    train = AppMetrics(job_id="train-1", clock=lambda: 1_700_000_000.5)
    for i in range(30):
        train.record_step(step_time_s=0.5 + i / 7, tokens=4096, loss=3 - i / 100, mfu=0.4 if i % 2 else None)
    serve = AppMetrics(job_id="serve", model_name='llama "8b"\\')  # a label value that needs escaping
    serve.record_request(ttft_s=0.2, itl_s=[0.02, 0.2, 3.0, 100.0], prompt_tokens=10, generation_tokens=5)
    odd = AppSnapshot(job_id="odd", model_name="m", steps_total=1, step_duration=HistogramData((-1.0, 2.0), [1, 0, 2]))
    renderer = SnapshotRenderer()
    for snaps in ([train.snapshot()], [serve.snapshot()], [train.snapshot(), serve.snapshot()], [odd], []):
        for _ in range(2):  # the second render uses the layout learned by the first
            families = renderer.families(snaps)
            assert render_text(families) == reference_text(_app_reference(snaps))
    source = AppSource([train, serve])
    train.record_checkpoint(12.5)
    assert render_text(source.collect()) == reference_text(_app_reference([train.snapshot(), serve.snapshot()]))


def test_osfs_rereads_held_files_and_follows_changes(tmp_path: Path) -> None:
    d = tmp_path / "hw"
    d.mkdir()
    for name, value in (("a", 1), ("b", 2), ("c", 3)):
        (d / name).write_text(f"{value}\n")
    (d / "sub").mkdir()
    fs = OsFs(tmp_path, keep_open=2)
    assert fs.read_dir_columns("hw") == (("a", "b", "c", "sub"), [b"1\n", b"2\n", b"3\n", None])
    assert fs._held_count == 2  # the budget: c is read the plain way, sub is a directory
    (d / "a").write_text("11\n")  # rewritten in place: the held descriptor reads the new value
    (d / "b.new").write_text("22\n")
    os.replace(d / "b.new", d / "b")  # replaced (another inode): opened again
    (d / "c").unlink()
    assert fs.read_dir_columns("hw") == (("a", "b", "sub"), [b"11\n", b"22\n", None])
    held = fs._held[str(d)].entries
    bad = os.open(d / "sub", os.O_RDONLY)  # a descriptor whose read fails (EISDIR), as a removed sysfs node's
    os.close(held["a"][0])
    held["a"] = (bad, held["a"][1])
    assert fs.read_dir_columns("hw")[1][0] == b"11\n"  # read failed: closed and opened again
    (d / "a").unlink()
    (d / "b").unlink()
    assert fs.read_dir_columns("hw") == (("sub",), [None])
    assert fs._held_count == 0 and fs._held == {}
    (d / "a").write_text("5\n")
    assert fs.read_dir_columns("hw")[1] == [b"5\n", None]
    for path in (d / "a", d / "sub"):
        path.unlink() if path.is_file() else path.rmdir()
    d.rmdir()
    with pytest.raises(OSError):
        fs.read_dir_columns("hw")
    assert fs._held_count == 0  # the vanished directory's descriptors are given back
    fs.close()


def test_osfs_reuses_a_listing_only_while_the_directory_is_unchanged(tmp_path: Path) -> None:
    d = tmp_path / "hw"
    d.mkdir()
    for name in ("a", "b"):
        (d / name).write_text("1\n")
    fs = OsFs(tmp_path)
    assert fs.read_dir_columns("hw") == (("a", "b"), [b"1\n", b"1\n"])
    assert fs.read_dir_columns("hw") == (("a", "b"), [b"1\n", b"1\n"])
    assert fs.rereads == 0  # changed less than a second before it was listed: listed every time
    old = 1_600_000_000
    os.utime(d, (old, old))  # as a sysfs directory, made when the device appeared
    fs.read_dir_columns("hw")
    (d / "a").write_text("2\n")  # in place: the directory's mtime does not change
    assert fs.read_dir_columns("hw") == (("a", "b"), [b"2\n", b"1\n"])
    assert fs.read_dir_columns("hw") == (("a", "b"), [b"2\n", b"1\n"])
    assert fs.rereads == 2
    (d / "c").write_text("3\n")  # a new name changes the directory's mtime: listed again
    assert fs.read_dir_columns("hw") == (("a", "b", "c"), [b"2\n", b"1\n", b"3\n"])
    os.utime(d, (old, old))
    (d / "b").unlink()
    os.utime(d, (old, old))  # even with the mtime put back, b's removal shows: the last listing saw another mtime
    assert fs.read_dir_columns("hw") == (("a", "c"), [b"2\n", b"3\n"])
    assert fs.read_dir_columns("hw") == (("a", "c"), [b"2\n", b"3\n"])
    assert fs.rereads == 3 and fs.held_files == 2
    fs.close()


def test_efa_source_gives_back_the_files_of_a_device_that_went_away(tmp_path: Path) -> None:
    for dev in ("rdmap16s27", "rdmap32s27"):
        for name in ("rx_bytes", "tx_bytes"):
            path = tmp_path / PORT.format(dev=dev, name=name)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("7\n")
    fs = OsFs(tmp_path)
    source = EfaSource(fs, "node-1")
    list(source.collect())
    assert fs.held_files == 4  # 2 devices x 2 counter files
    gone = tmp_path / "sys/class/infiniband/rdmap32s27"
    for path in sorted(gone.rglob("*"), reverse=True):  # as the driver removes a device's sysfs directory
        path.unlink() if path.is_file() else path.rmdir()
    gone.rmdir()
    for _ in range(3):
        list(source.collect())
        assert fs.held_files == 2  # only rdmap16s27's: the first scrape without rdmap32s27 closed its files
    for name in ("rx_bytes", "tx_bytes"):  # the device comes back
        path = gone / f"ports/1/hw_counters/{name}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("8\n")
    assert (
        'node_amazonefa_rx_bytes{device="rdmap32s27",port="1",Hostname="node-1"} 8.0'
        in render_text(source.collect()).decode()
    )
    assert fs.held_files == 4
    (tmp_path / "sys/class/infiniband").rename(tmp_path / "efa-unloaded")  # no EFA at all: nothing held
    with pytest.raises(OSError, match="infiniband"):  # the source is down, not "0 devices"
        list(source.collect())
    assert fs.held_files == 0 and fs._held == {}
    fs.close()


def test_osfs_sweep_closes_only_unread_directories_under_its_path(tmp_path: Path) -> None:
    for rel in ("efa/a/x", "efa/b/x", "other/x"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("1\n")
    fs = OsFs(tmp_path)
    for directory in ("efa/a", "efa/b", "other"):
        fs.read_dir_columns(directory)
    assert fs.sweep("efa") == 0 and fs.held_files == 3  # all read since the (first) sweep
    fs.read_dir_columns("efa/a")
    assert fs.sweep("efa") == 1 and fs.held_files == 2  # efa/b not read: closed; "other" is not under efa
    assert fs.sweep("efa") == 1 and fs.held_files == 1  # efa/a not read since the last sweep
    assert fs.sweep() == 0 and fs.held_files == 1  # "other" was read, and "" never swept
    assert fs.sweep() == 1 and fs.held_files == 0
    assert DictFs({"efa/a/x": "1\n"}).sweep("efa") == 0
    fs.close()


def test_osfs_without_a_budget_reads_like_read_dir(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d/x").write_text("1\n")
    (tmp_path / "d/big").write_bytes(b"7" * 10_000)
    for keep in (0, 10):
        fs = OsFs(tmp_path, keep_open=keep)
        for _ in range(2):
            assert fs.read_dir("d") == [("big", b"7" * 10_000), ("x", b"1\n")]
        assert fs._held_count == min(keep, 2)
        fs.close()
        assert fs._held_count == 0


def _lustre_reference(mounts: dict[str, dict[str, StatLine]]) -> list[Metric]:
    """Lustre families as prometheus-client's families built them before layouts."""
    labels = ["component", "target"]
    fams: dict[str, Metric] = {}
    for d in ("read", "write"):
        fams[f"{d}_samples"] = CounterMetricFamily(f"lustre_{d}_samples", f"{d} calls", labels=labels)
        fams[f"{d}_bytes"] = CounterMetricFamily(f"lustre_{d}_bytes", f"Bytes {d}", labels=labels)
        for which in ("minimum", "maximum"):
            fams[f"{d}_{which}"] = GaugeMetricFamily(
                f"lustre_{d}_{which}_size_bytes", f"{which} {d} size", labels=labels
            )
    ops = CounterMetricFamily("lustre_stats", "Operations by type", labels=[*labels, "operation"])
    for target, stats in sorted(mounts.items()):
        lv = ["client", target]
        for name, st in stats.items():
            if name in ("read_bytes", "write_bytes"):
                d = name.split("_")[0]
                fams[f"{d}_samples"].add_metric(lv, float(st.count))  # type: ignore[attr-defined]
                if st.total is not None and st.minimum is not None and st.maximum is not None:
                    fams[f"{d}_bytes"].add_metric(lv, st.total)  # type: ignore[attr-defined]
                    fams[f"{d}_minimum"].add_metric(lv, st.minimum)  # type: ignore[attr-defined]
                    fams[f"{d}_maximum"].add_metric(lv, st.maximum)  # type: ignore[attr-defined]
            else:
                ops.add_metric([*lv, name], float(st.count))
    return [f for f in [*fams.values(), ops] if f.samples]


def test_lustre_families_equal_the_plain_families() -> None:
    stats = {
        "fsx-b": "snapshot_time 1.5 secs.usecs\nopen 7 samples [usecs]\nwrite_bytes 3 samples [bytes] 1 9 inf\n",
        "fsx-a": "read_bytes 2 samples [bytes]\nclose 1 samples [usecs] 1 2 3\nwrite_bytes 4 samples [bytes] 1 2 8\n",
    }
    fs = DictFs({f"proc/fs/lustre/llite/{t}/stats": text for t, text in stats.items()})
    source = LustreSource(fs)
    for _ in range(2):
        families = list(source.collect())
        assert render_text(families) == reference_text(families)
        assert render_text(families) == reference_text(_lustre_reference({t: parse_stats(x) for t, x in stats.items()}))
    assert b'lustre_write_bytes_total{component="client",target="fsx-b"} +Inf\n' in render_text(families)
