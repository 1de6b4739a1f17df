"""The optimised exposition (label caches, pre-rendered EFA prefixes) equals a straightforward rendering, and no
series ever carries another series' labels."""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from fmstack.observability.app_metrics import AppMetrics
from fmstack.observability.app_source import AppSource
from fmstack.observability.blocks import SeriesLayout, row_series
from fmstack.observability.efa import EfaSource
from fmstack.observability.exporter import Exporter, Source
from fmstack.observability.exposition import BlockMetric, LabelCache, render_text, value_texts
from fmstack.observability.fake import FakeGpuBackend, RandomFaults
from fmstack.observability.gpu_source import GpuSource
from fmstack.observability.lustre import LustreSource
from fmstack.observability.sysfs import DictFs
from tests.observability.conftest import efa_tree_32

_EFA_LINE = re.compile(r'^node_amazonefa_(device_)?(\w+)\{device="([^"]+)"(?:,port="([^"]+)")?,Hostname="n1"\} (\S+)$')


def reference_text(families: list[Any]) -> bytes:
    """The text format written the plain way: no caches, every label escaped per sample, values per the spec."""

    def value(v: float) -> str:
        v = float(v)
        if v != v:
            return "NaN"
        if v in (float("inf"), float("-inf")):
            return "+Inf" if v > 0 else "-Inf"
        return repr(v)

    def esc(s: str) -> str:
        return s.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')

    out = []
    for fam in families:
        samples = list(fam.samples)
        if not samples:
            continue
        name = fam.name + ("_total" if fam.type == "counter" and samples[0].name == fam.name + "_total" else "")
        mtype = {"unknown": "untyped", "info": "gauge", "stateset": "gauge"}.get(fam.type, fam.type)
        doc = fam.documentation.replace("\\", "\\\\").replace("\n", "\\n")
        out.append(f"# HELP {name} {doc}\n# TYPE {name} {mtype}\n")
        for s in samples:
            if s.name.endswith("_created"):
                continue
            labels = "{" + ",".join(f'{k}="{esc(v)}"' for k, v in s.labels.items()) + "}" if s.labels else ""
            out.append(f"{s.name}{labels} {value(s.value)}\n")
    return "".join(out).encode()


def _node(seed: int) -> tuple[Exporter, FakeGpuBackend, DictFs]:
    gpu = FakeGpuBackend(num_gpus=8)
    fs = DictFs(efa_tree_32())
    app = AppMetrics(job_id="j", model_name="m", clock=lambda: 1_700_000_000.0)
    rng = random.Random(seed)
    for _ in range(20):
        app.record_step(step_time_s=rng.uniform(1, 2), tokens=4096, loss=rng.uniform(2, 3), mfu=0.4)
        app.record_request(ttft_s=rng.uniform(0.05, 0.8), itl_s=[0.02, 0.03])
    sources: list[Source] = [GpuSource(gpu, "n1", 8), EfaSource(fs, "n1", 32), LustreSource(fs), AppSource(app)]
    return Exporter(sources), gpu, fs


def test_optimised_render_equals_reference_rendering_across_scrapes_and_faults() -> None:
    exp, gpu, fs = _node(1)
    faults = RandomFaults(random.Random(7), gpu, fs, p=0.2)
    cache = LabelCache()  # one cache over all scrapes, as the exporter keeps it
    prerendered = 0
    for _ in range(60):
        faults.step()
        families = list(exp.registry.collect())
        prerendered += sum(isinstance(f, BlockMetric) for f in families)
        assert render_text(families, cache) == reference_text(families)
    assert prerendered > 60 * 20  # sources wrote their own text (23 port + 3 device counters per healthy scrape)


def test_every_efa_line_carries_the_labels_of_the_file_it_was_read_from() -> None:
    # Distinct values per (device, port, counter): a line with another series' labels cannot match its file.
    files: dict[str, str] = {}
    for path in efa_tree_32():
        if "/hw_counters/" in path and path.startswith("sys/class/infiniband/"):
            files[path] = f"{len(files) + 1000}\n"
    fs = DictFs(files)
    exp = Exporter([EfaSource(fs, "n1")])
    for scrape in range(3):
        if scrape == 1:  # a device vanishes: the others keep their own prefixes
            fs.hide_prefix("sys/class/infiniband/rdmap48s27")
        if scrape == 2:
            fs.restore()
        lines = [m for ln in exp.render().decode().splitlines() if (m := _EFA_LINE.match(ln))]
        lines = [m for m in lines if m.group(1) or m.group(2) != "info"]
        assert len(lines) == (31 if scrape == 1 else 32) * 36  # 36 counter files per device
        for m in lines:
            device_level, counter, device, port, value = m.groups()
            where = "hw_counters" if device_level else f"ports/{port}/hw_counters"
            assert files[f"sys/class/infiniband/{device}/{where}/{counter}"] == f"{int(float(value))}\n"


def test_label_cache_never_hands_one_series_another_series_labels() -> None:
    # Families come from a generator and are dropped once rendered (as the exporter streams sources), so their
    # label dicts die mid-render and their ids are recycled for the next family's dicts. Each line must still be
    # rendered from its own labels, in one render and across renders sharing the cache.
    def families(round_: int) -> Iterator[Any]:
        for f in range(5):
            fam = GaugeMetricFamily(f"g{f}", "help", labels=["a", "b"])
            for i in range(20):
                fam.add_metric([f"{round_}-{f}-{i}", 'q"\\\n'], float(i))
            yield fam
        counter = CounterMetricFamily("c", "help", labels=["x"])
        counter.add_metric([str(round_)], 1.0)
        yield counter

    cache = LabelCache()
    for round_ in range(50):
        assert render_text(families(round_), cache) == reference_text(list(families(round_)))
    assert len(cache.entries) == 50 * 101


def test_label_cache_is_bounded_and_correct_after_clearing() -> None:
    cache = LabelCache(max_entries=10)
    for i in range(35):
        fam = GaugeMetricFamily("g", "h", labels=["i"])
        fam.add_metric([str(i)], float(i))
        assert render_text([fam], cache) == f'# HELP g h\n# TYPE g gauge\ng{{i="{i}"}} {float(i)!r}\n'.encode()
        assert len(cache.entries) <= 10


def test_layout_families_keep_samples_and_special_values() -> None:
    fk = ("x", "node_amazonefa_x", "help", "counter")
    layout = SeriesLayout(row_series([({"device": "d"}, [fk]), ({"device": "e"}, [fk])]))
    (fam,) = layout.families(value_texts([float("inf"), 2.0]))
    assert [s.labels for s in fam.samples] == [{"device": "d"}, {"device": "e"}]
    assert [s.value for s in fam.samples] == [float("inf"), 2.0]
    text = render_text([fam])
    assert text == reference_text([fam])
    assert b'node_amazonefa_x{device="d"} +Inf\n' in text
    (fam,) = layout.families(["12", "0"], integral=True)  # integer digits get the float's ".0"
    assert render_text([fam]) == reference_text([fam])
    assert b'node_amazonefa_x{device="e"} 0.0\n' in render_text([fam])
