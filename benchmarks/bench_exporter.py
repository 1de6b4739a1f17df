"""Exporter benchmark (issue 8 acceptance): scrape latency of a p5-sized node on the fake backends, and scrapes
under random backend faults.

1. Latency: 8 GPUs (scripted NVML) + 32 EFA devices (the recorded sysfs tree, device cloned to 32, in memory)
   + Lustre + application metrics (training and serving histograms); goal p99 <= 5 ms per scrape. Baseline
   in the same run: prometheus_client's own ``generate_latest`` over a registry holding the same number of
   pre-set labelled gauge samples (no reading at all), so the ratio is "fmstack's read-and-render at scrape time"
   over "the client library rendering values it already has", on the same machine under the same load.
2. Faults: N scrapes (default 10,000) with each fault kind injected at probability p before every scrape (NVML
   lost, a GPU off the bus + Xid 79, random Xids, an EFA file vanished before / after listing, an EFA device
   gone, Lustre gone, the app source raising); a scrape fails if render raises or its text lacks a
   ``fmstack_exporter_source_up`` line per source. Then a burst over real HTTP on 127.0.0.1.

Run: python3 benchmarks/bench_exporter.py [--scrapes 2000] [--fault-scrapes 10000] [--out benchmarks/results/..]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import random
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.core import Metric

from fmstack.observability.app_metrics import AppMetrics
from fmstack.observability.app_source import AppSource
from fmstack.observability.efa import EfaSource
from fmstack.observability.exporter import Exporter
from fmstack.observability.fake import FakeGpuBackend, RandomFaults, clone_efa_devices
from fmstack.observability.gpu_source import GpuSource
from fmstack.observability.lustre import LustreSource
from fmstack.observability.sysfs import DictFs, FileSystem, OsFs

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests/observability/fixtures/p5-node"


class FlakyApp:
    """The app source, failing on demand (the fault loop's "app_error")."""

    name = "app"

    def __init__(self, inner: AppSource) -> None:
        self.inner, self.fail = inner, False

    def collect(self) -> Iterator[Metric]:
        if self.fail:
            raise RuntimeError("injected app failure")
        return self.inner.collect()


def node_files() -> dict[str, str]:
    return clone_efa_devices(DictFs.from_tree(FIXTURE).files, "rdmap16s27", 32)


def build_node(seed: int, efa_fs: FileSystem | None = None) -> tuple[Exporter, FakeGpuBackend, DictFs, FlakyApp]:
    """The benchmark node; ``efa_fs`` replaces the in-memory tree for the EFA and Lustre sources (real files)."""
    gpu = FakeGpuBackend(num_gpus=8)
    fs = DictFs(node_files())
    rng = random.Random(seed)
    app = AppMetrics(job_id="bench", model_name="llama3.1-8b")
    for _ in range(200):
        app.record_step(step_time_s=rng.uniform(1.5, 2.5), tokens=1_048_576, loss=rng.uniform(2, 3), mfu=0.41)
        app.record_request(ttft_s=rng.uniform(0.05, 0.8), itl_s=[rng.uniform(0.01, 0.05) for _ in range(8)])
    flaky = FlakyApp(AppSource(app))
    sysfs: FileSystem = fs if efa_fs is None else efa_fs
    exp = Exporter([GpuSource(gpu, "bench-node", 8), EfaSource(sysfs, "bench-node", 32), LustreSource(sysfs), flaky])
    return exp, gpu, fs, flaky


def baseline_registry(num_samples: int) -> CollectorRegistry:
    """``num_samples`` pre-set gauge samples, 36 per label value like an EFA device's counters."""
    reg = CollectorRegistry()
    g = Gauge("baseline_value", "pre-set value", ["device", "counter"], registry=reg)
    for i in range(num_samples):
        g.labels(f"rdmap{i // 36}", f"c{i % 36}").set(i)
    return reg


def time_baseline(reg: CollectorRegistry, n: int) -> list[float]:
    for _ in range(20):
        generate_latest(reg)
    out = []
    for _ in range(n):
        t = time.perf_counter()
        generate_latest(reg)
        out.append(time.perf_counter() - t)
    return sorted(out)


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    k = max(0, min(len(sorted_values) - 1, round(q / 100 * len(sorted_values) + 0.5) - 1))
    return sorted_values[k]


def time_scrapes(exp: Exporter, n: int) -> tuple[list[float], list[float]]:
    """Sorted wall-clock and thread-CPU seconds per scrape (CPU time is what a busy shared machine cannot
    inflate by making the scrape wait for a core)."""
    for _ in range(20):
        exp.render()
    wall, cpu = [], []
    for _ in range(n):
        t, c = time.perf_counter(), time.thread_time()
        exp.render()
        cpu.append(time.thread_time() - c)
        wall.append(time.perf_counter() - t)
    return sorted(wall), sorted(cpu)


def time_real_files(n: int, seed: int) -> tuple[list[float], list[float]]:
    """The same node with the EFA / Lustre tree written to real files (tmpfs where there is one) and read by
    ``OsFs``: open/read/close system calls per counter file, as on a node (sysfs costs differ from tmpfs)."""
    shm = Path("/dev/shm")
    with tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else None) as tmp:
        for rel, text in node_files().items():
            path = Path(tmp) / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        exp, *_ = build_node(seed, efa_fs=OsFs(tmp))
        return time_scrapes(exp, n)


def fault_run(n: int, p: float, seed: int) -> tuple[int, int, dict[str, int], float]:
    exp, gpu, fs, app = build_node(seed)
    faults = RandomFaults(random.Random(seed), gpu, fs, p=p)
    failed = 0
    t0 = time.perf_counter()
    for _ in range(n):
        faults.step()
        app.fail = faults.app_should_fail
        try:
            text = exp.render().decode()
        except Exception as exc:  # counted, never hidden
            failed += 1
            print(f"scrape failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        if text.count("\nfmstack_exporter_source_up{") != 4:
            failed += 1
    return failed, sum(exp.errors.values()), faults.injected, time.perf_counter() - t0


def http_burst(n: int, seed: int) -> int:
    exp, gpu, fs, app = build_node(seed)
    faults = RandomFaults(random.Random(seed), gpu, fs, p=0.1)
    server = exp.serve("127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    failed = 0
    try:
        for _ in range(n):
            faults.step()
            app.fail = faults.app_should_fail
            try:
                with urllib.request.urlopen(url, timeout=5) as resp:
                    ok = resp.status == 200 and b"fmstack_exporter_scrapes_total" in resp.read()
            except OSError:
                ok = False
            failed += not ok
    finally:
        server.shutdown()
        server.server_close()
    return failed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scrapes", type=int, default=2000)
    ap.add_argument("--fault-scrapes", type=int, default=10_000)
    ap.add_argument("--fault-p", type=float, default=0.1)
    ap.add_argument("--http-scrapes", type=int, default=500)
    ap.add_argument("--real-fs-scrapes", type=int, default=300, help="scrapes with the tree on real files (OsFs)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None, help="write a Markdown result file here")
    args = ap.parse_args()

    load0 = os.getloadavg()[0]
    exp, *_ = build_node(args.seed)
    text0 = exp.render().decode()
    lines = text0.count("\n")
    samples = sum(1 for ln in text0.splitlines() if not ln.startswith("#"))
    base = time_baseline(baseline_registry(samples), args.scrapes)
    node, node_cpu = time_scrapes(exp, args.scrapes)
    b50, n50, n99 = statistics.median(base), statistics.median(node), percentile(node, 99)
    real, real_cpu = time_real_files(args.real_fs_scrapes, args.seed)
    failed, source_errors, injected, fault_s = fault_run(args.fault_scrapes, args.fault_p, args.seed)
    http_failed = http_burst(args.http_scrapes, args.seed)

    report = [
        f"# fmstack exporter benchmark, {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC",
        "",
        f"- machine: {platform.node()} ({platform.machine()}, {platform.processor() or 'cpu'}), Python "
        f"{platform.python_version()}, {os.cpu_count()} CPUs, load average at start {load0:.2f}, at end "
        f"{os.getloadavg()[0]:.2f}",
        "- command: `python3 benchmarks/bench_exporter.py " + " ".join(sys.argv[1:]) + "`",
        f"- node: 8 GPUs (fake NVML) + 32 EFA devices (recorded sysfs, in memory) + Lustre + app metrics: "
        f"{lines} exposition lines, {samples} samples",
        "",
        "| measure | value |",
        "| --- | --- |",
        f"| baseline: prometheus_client generate_latest of {samples} pre-set samples, p50 | {b50 * 1e3:.3f} ms |",
        f"| node scrape p50 | {n50 * 1e3:.3f} ms |",
        f"| node scrape p99 (goal <= 5 ms) | {n99 * 1e3:.3f} ms |",
        f"| node scrape max | {node[-1] * 1e3:.3f} ms |",
        f"| node scrape CPU time p50 / p99 | {statistics.median(node_cpu) * 1e3:.3f} / "
        f"{percentile(node_cpu, 99) * 1e3:.3f} ms |",
        f"| ratio node / baseline (p50) | {n50 / b50:.1f}x |",
        f"| same node, EFA + Lustre tree on real files (OsFs, {args.real_fs_scrapes} scrapes): wall p50 / p99, "
        f"CPU p50 | {statistics.median(real) * 1e3:.3f} / {percentile(real, 99) * 1e3:.3f} ms, "
        f"{statistics.median(real_cpu) * 1e3:.3f} ms |",
        f"| fault scrapes | {args.fault_scrapes} at p={args.fault_p} per fault kind, {fault_s:.1f} s |",
        f"| faults injected | {', '.join(f'{k} {v}' for k, v in injected.items())} |",
        f"| source errors reported (as metrics) | {source_errors} |",
        f"| failed scrapes | {failed} |",
        f"| HTTP scrapes on 127.0.0.1 (p=0.1), failed | {args.http_scrapes}, {http_failed} |",
        "",
        f"Verdict: p99 {'meets' if n99 <= 0.005 else 'MISSES'} the 5 ms goal; "
        f"{'no' if failed + http_failed == 0 else failed + http_failed} failed scrapes.",
    ]
    text = "\n".join(report) + "\n"
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 0 if failed + http_failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
