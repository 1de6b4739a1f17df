"""`fmstack bench`: measure GEMM, memory, collectives and storage on this machine; write a calibration profile."""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from fmstack.catalog import load_catalog
from fmstack.cli.common import catalog_option, console, json_option, print_json

_F = Callable[..., Any]


def _common(func: _F) -> _F:
    for deco in reversed([
        click.option("--device", default="cpu", show_default=True, help="cpu or cuda."),
        click.option("--out", type=click.Path(path_type=Path), default=None,
                     help="Write the calibration profile here (an existing profile is updated, atomically)."),
        click.option("--quick", is_flag=True, help="Small sizes (seconds; what CI runs)."),
        click.option("--min-time", "min_time_s", type=float, default=0.05, show_default=True,
                     help="Seconds each timed batch runs at least."),
        click.option("--trials", type=int, default=5, show_default=True,
                     help="Timed batches per point, reported as a spread (GEMM keeps the median, memory the "
                     "fastest, collectives the mean over all of them)."),
        catalog_option,
        json_option,
    ]):  # fmt: skip
        func = deco(func)
    return func


def _gemm_opts(func: _F) -> _F:
    for deco in reversed([
        click.option("--dtype", "dtypes", multiple=True, help="fp32, bf16, fp16 (repeat). Default: fp32 on cpu; "
                     "bf16, fp16, fp32 on cuda."),
        click.option("--model", default=None, help="Add the layer GEMM shapes of this catalog model."),
        click.option("--tokens", type=int, default=2048, show_default=True, help="Tokens per micro-batch (GEMM m)."),
        click.option("--max-dim", type=int, default=None, help="Largest GEMM dimension (default 1024 on cpu)."),
        click.option("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)."),
        _procs_option,
    ]):  # fmt: skip
        func = deco(func)
    return func


def _coll_opts(func: _F) -> _F:
    for deco in reversed([
        click.option("--ranks", type=int, default=2, show_default=True, help="Processes in the collective job."),
        click.option("--op", "ops", multiple=True, help="all_reduce, all_gather, reduce_scatter, all_to_all, "
                     "broadcast (repeat; default all)."),
    ]):  # fmt: skip
        func = deco(func)
    return func


def _storage_opts(required: bool) -> Callable[[_F], _F]:
    help_text = "Directory or fsspec URL (s3://bucket/prefix) to write to." + (
        "" if required else " Default: the system temp directory."
    )

    def deco(func: _F) -> _F:
        func = click.option("--endpoint-url", default=None, help="S3 endpoint (a local S3-compatible server).")(func)
        return click.option("--path", "storage_path", required=required, help=help_text)(func)

    return deco


_procs_option = click.option(
    "--procs", type=int, default=1, show_default=True,
    help="CPU: run GEMM and memory in N processes at once and keep the slowest (per-rank rates of N DDP ranks).",
)  # fmt: skip


def _max_bytes(func: _F) -> _F:
    return click.option("--max-bytes", type=int, default=None, help="Largest buffer or message in bytes.")(func)


class LineProgress:
    """Progress as plain lines on a stream that is not a terminal (a batch job's log): at most one line every
    ``interval_s`` seconds, so a sweep of minutes shows it is alive and how far it got, and a run of seconds prints
    nothing."""

    def __init__(self, what: str, total: int, stream: TextIO, *, interval_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self.what, self.total, self.stream, self.interval_s, self.clock = what, total, stream, interval_s, clock
        self.done = 0
        self.start = self.last = clock()

    def advance(self) -> None:
        self.done += 1
        now = self.clock()
        if now - self.last >= self.interval_s:
            self.last = now
            print(f"bench {self.what}: {self.done}/{self.total} points, {now - self.start:.0f} s", file=self.stream,
                  flush=True)  # fmt: skip


def _run(kinds: tuple[str, ...], as_json: bool, catalog_dir: Path | None, **kw: Any) -> None:
    from fmstack.bench.collectives import OPS
    from fmstack.bench.runner import BenchOptions, count_steps, report_dict, run_bench

    # a flag repeated is one point measured once (twice, it printed every row twice and averaged them in the profile)
    kw["dtypes"] = tuple(dict.fromkeys(kw.get("dtypes") or ()))
    kw["ops"] = tuple(dict.fromkeys(kw.get("ops") or ())) or OPS
    opts = BenchOptions(kinds=kinds, **kw)
    cat = load_catalog(catalog_dir)
    err = Console(stderr=True)
    total = count_steps(opts, cat)
    if err.is_terminal:
        with Progress(TextColumn("bench {task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=err, transient=True) as progress:  # fmt: skip
            task = progress.add_task(", ".join(kinds), total=total)
            report = run_bench(opts, cat, on_step=lambda: progress.advance(task))
    else:
        lines = LineProgress(", ".join(kinds), total, sys.stderr)
        report = run_bench(opts, cat, on_step=lines.advance)
    if as_json:
        print_json(report_dict(report))
        return
    _render(report)


def _spec_line(dev: Any) -> str:
    from fmstack.bench.profile import catalog_peaks

    peaks, mem = catalog_peaks(dev)
    if not peaks:
        return (f"spec: none in the catalog for {dev.name!r}; % of peak is not computed, and the profile's peaks are "
                "the best rates measured in this run")  # fmt: skip
    rates = ", ".join(f"{k} {v:g}" for k, v in peaks.items())
    return (
        f"spec: catalog {dev.catalog_gpu.name}: {rates} TFLOP/s dense; memory {mem:g} GB/s; % of peak is against these"
    )


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1e3:.3f}"


def _render(report: Any) -> None:
    from fmstack.bench.collectives import format_nccl_tests

    out = console()
    dev = report.device
    where = f" (catalog {dev.catalog_gpu.name})" if dev.catalog_gpu else ""
    out.print(f"device: {dev.kind} {dev.name}{where}", highlight=False)
    out.print(_spec_line(dev), highlight=False)
    timing = dict(report.timing)
    min_time_s, trials = timing.pop("min_time_s"), timing.pop("trials")
    if set(timing) - {"storage"}:  # storage times one pass, no batches: the line is not true of it
        out.print(f"timing: every batch runs >= {min_time_s} s after warm-up calls; {trials} timed batches per point",
                  highlight=False)  # fmt: skip
    else:
        out.print("timing:", highlight=False)
    for kind, how in timing.items():
        out.print(f"  {kind}: {how}", highlight=False)
    if report.gemm:
        # a CPU's rates read as 35.2 GFLOP/s, not 0.0352 or 4.131e-05 TFLOP/s (JSON keeps tflops)
        unit, scale = ("TFLOP/s", 1.0) if max(g.tflops for g in report.gemm) >= 1.0 else ("GFLOP/s", 1e3)
        t = Table("shape", "m", "n", "k", "dtype", "GFLOP", "time ms", "min..max ms", unit, "% of peak",
                  "calls x batches", title="GEMM (time: median batch)", title_justify="left")  # fmt: skip
        for g in report.gemm:
            pct = f"{g.pct_of_peak:.1f}" if g.pct_of_peak is not None else "-"
            t.add_row(g.shape.label, str(g.shape.m), str(g.shape.n), str(g.shape.k), g.dtype,
                      f"{g.shape.flops / 1e9:.3g}", _ms(g.time_s), f"{_ms(g.time_min_s)}..{_ms(g.time_max_s)}",
                      f"{g.tflops * scale:,.4g}", pct, f"{g.calls} x {g.trials}")  # fmt: skip
        out.print(t)
    if report.memory:
        t = Table("kernel", "buffer MiB", "bytes moved", "time ms", "median..max ms", "GB/s", "% of peak",
                  "calls x batches", title="memory (time: fastest batch, as STREAM)",
                  title_justify="left")  # fmt: skip
        for m in report.memory:
            pct = f"{m.pct_of_peak:.1f}" if m.pct_of_peak is not None else "-"
            t.add_row(m.kernel, f"{m.buffer_bytes / 2**20:g}", f"{m.bytes_moved:,}", _ms(m.time_s),
                      f"{_ms(m.time_median_s)}..{_ms(m.time_max_s)}", f"{m.bw_gbps:.2f}", pct,
                      f"{m.calls} x {m.trials}")  # fmt: skip
        out.print(t)
    if report.collectives:
        out.print("collectives (nccl-tests layout):")
        click.echo(format_nccl_tests(report.collectives))
    if report.storage:
        t = Table("file MiB", "files", "write GB/s", "read GB/s", title=f"storage {report.storage[0].target} (one pass)",
                  title_justify="left")  # fmt: skip
        for s in report.storage:
            t.add_row(f"{s.file_bytes / 2**20:g}", str(s.num_files), f"{s.write_gbps:.3f}", f"{s.read_gbps:.3f}")
        out.print(t)
    if report.cpu is not None and report.cpu.disturbed:
        out.print(f"warning: this machine was busy during the run: {report.cpu.describe()}; rates may be low and "
                  "uneven, run again on a quiet machine before calibrating from them", highlight=False)  # fmt: skip
    if report.out:
        out.print(f"profile written: {report.out}", highlight=False)
    if report.kept:
        # the profile's measured_at is now; these curves are older (the merge keeps them, docs/bench.md)
        out.print(f"  kept from the profile it updated (measured {report.kept_measured_at}): {', '.join(report.kept)}",
                  highlight=False)  # fmt: skip


@click.group(epilog="Example:\n\n  fmstack bench all --quick --out profile.json\n\n"
             "  fmstack bench gemm --device cuda --model llama3.1-70b --dtype bf16")  # fmt: skip
def bench() -> None:
    """Measure this machine (GEMM, memory, collectives, storage) and write a calibration profile."""


@bench.command("gemm", epilog="Example:\n\n  fmstack bench gemm --model llama3.1-8b --out profile.json")
@_common
@_gemm_opts
def gemm_cmd(as_json: bool, catalog_dir: Path | None, **kw: Any) -> None:
    """Achieved TFLOP/s of matrix multiplies over square and model-layer shapes, per dtype."""
    _run(("gemm",), as_json, catalog_dir, **kw)


@bench.command("memory", epilog="Example:\n\n  fmstack bench memory --max-bytes 268435456")
@_common
@_max_bytes
@_procs_option
def memory_cmd(as_json: bool, catalog_dir: Path | None, **kw: Any) -> None:
    """Memory bandwidth (STREAM copy and triad) over buffer sizes; on a GPU also gemv, the rate cuBLAS streams a
    decode step's weights. Calibrating needs sizes past the caches: the default sweep (up to 1 GiB on a GPU), not
    --quick."""
    _run(("memory",), as_json, catalog_dir, **kw)


@bench.command("collectives", epilog="Example:\n\n  fmstack bench collectives --ranks 2 --op all_reduce")
@_common
@_coll_opts
@_max_bytes
def collectives_cmd(as_json: bool, catalog_dir: Path | None, **kw: Any) -> None:
    """all-reduce, all-gather, reduce-scatter, all-to-all, broadcast: algbw and busbw as nccl-tests."""
    _run(("collectives",), as_json, catalog_dir, **kw)


@bench.command("storage", epilog="Example:\n\n  fmstack bench storage --path /fsx/scratch\n\n"
               "  fmstack bench storage --path s3://my-bucket/bench --endpoint-url http://127.0.0.1:5000")  # fmt: skip
@_common
@_storage_opts(required=True)
def storage_cmd(as_json: bool, catalog_dir: Path | None, **kw: Any) -> None:
    """Sequential write (fsync) and read throughput over file sizes and counts; removes what it wrote."""
    _run(("storage",), as_json, catalog_dir, **kw)


@bench.command("all", epilog="Example:\n\n  fmstack bench all --quick --threads 1 --out profile.json")
@_common
@_gemm_opts
@_coll_opts
@_max_bytes
@_storage_opts(required=False)
def all_cmd(as_json: bool, catalog_dir: Path | None, **kw: Any) -> None:
    """Every bench in turn, then one profile."""
    kw["storage_path"] = kw.get("storage_path") or tempfile.gettempdir()
    _run(("gemm", "memory", "collectives", "storage"), as_json, catalog_dir, **kw)
