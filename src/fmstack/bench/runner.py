"""One entry point for the CLI: run the chosen benches, build the profile, write it atomically.

Everything the user typed is checked (device, dtype, model, output file, storage path) before any measurement
starts, so bad input fails in a second and leaves nothing behind.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fmstack.bench import collectives as coll
from fmstack.bench import gemm as gemm_mod
from fmstack.bench import memory as mem_mod
from fmstack.bench import storage as sto_mod
from fmstack.bench.device import DeviceSpec, check_device, check_dtype, resolve_device
from fmstack.bench.interference import CpuShare, CpuWatch
from fmstack.bench.limits import check_upper_bounds
from fmstack.bench.profile import build_profile, catalog_peaks
from fmstack.catalog import Catalog
from fmstack.errors import InputError
from fmstack.perfmodel.calibration import CalibrationProfile, load_profile, save_profile

KINDS = ("gemm", "memory", "collectives", "storage")


@dataclass(frozen=True, kw_only=True, slots=True)
class BenchOptions:
    """What to measure and how big."""

    kinds: tuple[str, ...]
    device: str = "cpu"
    quick: bool = False
    dtypes: tuple[str, ...] = ()
    """Empty: fp32 on CPU; bf16, fp16, fp32 on CUDA."""
    model: str | None = None
    """Catalog model whose layer GEMM shapes are added to the sweep."""
    tokens: int = 2048
    """Tokens per micro-batch for the model's layer shapes (the GEMMs' m)."""
    max_dim: int | None = None
    """Largest GEMM dimension (model shapes are scaled down to it); default 1024 on CPU, none on CUDA."""
    threads: int | None = None
    """torch intra-op threads for GEMM and memory (default: torch's choice; 1 per process with procs > 1)."""
    procs: int = 1
    """Processes running GEMM and memory at once (CPU only): per-rank rates of a data-parallel job."""
    max_bytes: int | None = None
    ranks: int = 2
    ops: tuple[str, ...] = coll.OPS
    storage_path: str | None = None
    endpoint_url: str | None = None
    min_time_s: float = 0.05
    trials: int = 5
    """Timed batches per point, for the spread: GEMM keeps their median, memory the fastest (STREAM), collectives
    split their timed loop into this many parts (their mean over all iterations is nccl-tests' time)."""
    out: Path | None = None


@dataclass(kw_only=True, slots=True)
class BenchReport:
    """Results of one run."""

    device: DeviceSpec
    gemm: list[gemm_mod.GemmResult] = field(default_factory=list)
    memory: list[mem_mod.MemoryResult] = field(default_factory=list)
    collectives: list[coll.CollectiveResult] = field(default_factory=list)
    storage: list[sto_mod.StorageResult] = field(default_factory=list)
    profile: CalibrationProfile | None = None
    out: Path | None = None
    timing: dict[str, object] = field(default_factory=dict)
    """How points were timed (:func:`timing_summary`)."""
    cpu: CpuShare | None = None
    """What other processes and the hypervisor took of this machine's CPUs during the run (None off Linux)."""
    kept: tuple[str, ...] = ()
    """Sections of the existing ``out`` profile this run did not measure, kept as they were (:func:`kept_sections`)."""
    kept_measured_at: str | None = None
    """When that existing profile was written (its ``measured_at``, which the written profile replaces by now)."""


def _check_out(out: Path | None) -> CalibrationProfile | None:
    """Validate --out before measuring; an existing file must be a profile (it is merged, never clobbered)."""
    if out is None:
        return None
    if out.is_dir():
        raise InputError("out", f"{out} is a directory; give a file name such as profile.json")
    parent = out.parent
    if not parent.is_dir():
        raise InputError("out", f"directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise InputError("out", f"no write permission in {parent}")
    if out.exists() and not out.is_file():
        raise InputError("out", f"{out} is not a regular file; give a file name such as profile.json")
    base = _existing_profile(out) if out.exists() else None
    try:  # os.access says yes to root everywhere (and to read-only mounts): try it, before minutes of measuring
        fd, probe = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".probe", dir=parent)
    except OSError as exc:
        raise InputError("out", f"cannot write in {parent}: {exc.strerror}") from None
    os.close(fd)
    os.unlink(probe)
    return base


def _existing_profile(out: Path) -> CalibrationProfile:
    """The profile already at ``out`` (to be updated); InputError naming ``out`` when it is something else."""
    try:
        return load_profile(out)
    except InputError as exc:
        raise InputError("out", f"{out} exists and is not a calibration profile ({exc.message}); it is never "
                         "overwritten: give a new file name, or a profile to update") from None  # fmt: skip


def _check_same_procs(base: CalibrationProfile, opts: BenchOptions) -> None:
    """Refuse a merge that would mix per-process rates of different --procs under one ``concurrent_processes``."""
    measures = "gemm" in opts.kinds or "memory" in opts.kinds
    kept = (base.gemm_tflops and "gemm" not in opts.kinds) or (base.memory_bw_gbps and "memory" not in opts.kinds)
    old = base.device.concurrent_processes
    if measures and kept and old != opts.procs:
        raise InputError("procs", f"{opts.procs}, but {opts.out} holds GEMM/memory curves measured with --procs {old}; "
                         f"the merged profile would mix them: pass --procs {old} or write to another file")  # fmt: skip


def kept_sections(base: CalibrationProfile, kinds: tuple[str, ...]) -> tuple[str, ...]:
    """The benches whose curves ``base`` holds and a run of ``kinds`` does not replace."""
    held = {"gemm": bool(base.gemm_tflops), "memory": base.memory_bw_gbps is not None,
            "collectives": bool(base.collectives), "storage": bool(base.storage_gbps)}  # fmt: skip
    return tuple(k for k in KINDS if held[k] and k not in kinds)


def plan_gemm_shapes(opts: BenchOptions, catalog: Catalog) -> list[gemm_mod.GemmShape]:
    max_dim = opts.max_dim if opts.max_dim is not None else (1024 if opts.device == "cpu" else 1 << 16)
    if max_dim < 8:
        raise InputError("max-dim", f"{max_dim}; allowed: >= 8")
    if opts.tokens < 1:
        raise InputError("tokens", f"{opts.tokens}; allowed: >= 1")
    shapes = [gemm_mod.GemmShape(m=s, n=s, k=s) for s in gemm_mod.square_sizes(opts.device, opts.quick)]
    # no default square fits (--max-dim 32): one square of the cap, not a silent 64^3 above it
    shapes = [s for s in shapes if s.m <= max_dim] or [gemm_mod.GemmShape(m=max_dim, n=max_dim, k=max_dim)]
    if opts.model:
        shapes += gemm_mod.model_shapes(catalog.model(opts.model), tokens=opts.tokens, max_dim=max_dim)
    return shapes


def count_steps(opts: BenchOptions, catalog: Catalog) -> int:
    """How many progress steps a run has (for the progress bar); refuses bad options first."""
    check_options(opts)
    steps = 0
    if "gemm" in opts.kinds:
        steps += len(plan_gemm_shapes(opts, catalog)) * len(_dtypes(opts))
    if "memory" in opts.kinds:
        steps += len(mem_mod.default_kernels(opts.device)) * len(
            mem_mod.buffer_sizes(opts.device, opts.quick, opts.max_bytes)
        )
    if "collectives" in opts.kinds:
        steps += len(opts.ops) * len(coll.message_sizes(opts.device, opts.quick, opts.ranks, opts.max_bytes))
    if "storage" in opts.kinds:
        steps += len(sto_mod.default_sweep(opts.quick))
    return steps


def _dtypes(opts: BenchOptions) -> list[str]:
    if opts.dtypes:
        return [check_dtype(d) for d in opts.dtypes]
    return ["fp32"] if opts.device == "cpu" else ["bf16", "fp16", "fp32"]


def check_options(opts: BenchOptions) -> None:
    """Refuse bad options (one InputError naming the field) before anything is sized or measured."""
    check_device(opts.device)
    for kind in opts.kinds:
        if kind not in KINDS:
            raise InputError("bench", f"unknown bench {kind!r}; allowed: {', '.join(KINDS)}, all")
    if "collectives" in opts.kinds:
        if opts.ranks < 2:
            raise InputError("ranks", f"{opts.ranks}; a collective needs at least 2 processes; allowed: >= 2")
        for op in opts.ops:
            coll.bus_factor(op, opts.ranks)
    if opts.trials < 1:
        raise InputError("trials", f"{opts.trials}; allowed: >= 1 timed batches per point")
    if not (math.isfinite(opts.min_time_s) and opts.min_time_s > 0):
        raise InputError("min-time", f"{opts.min_time_s}; allowed: a finite number > 0 seconds")
    if opts.max_dim is not None and opts.max_dim < 8:
        raise InputError("max-dim", f"{opts.max_dim}; allowed: >= 8")
    if opts.threads is not None and opts.threads < 1:
        raise InputError("threads", f"{opts.threads}; allowed: >= 1")
    if opts.procs < 1 or (opts.procs > 1 and opts.device != "cpu"):
        raise InputError("procs", f"{opts.procs} on {opts.device}; allowed: >= 1, and > 1 only with --device cpu")
    if "storage" in opts.kinds and not opts.storage_path:
        raise InputError("path", "the storage bench needs --path (a directory or an s3:// URL)")
    check_upper_bounds(device=opts.device, kinds=opts.kinds, trials=opts.trials, min_time_s=opts.min_time_s,
                       threads=opts.threads, procs=opts.procs, ranks=opts.ranks, max_bytes=opts.max_bytes)  # fmt: skip


def run_bench(opts: BenchOptions, catalog: Catalog, on_step: Callable[[], None] | None = None) -> BenchReport:
    """Run the benches in ``opts.kinds`` and, with ``opts.out``, write (or merge into) the profile."""
    check_options(opts)
    base = _check_out(opts.out)
    count_steps(opts, catalog)  # validates sizes and the model before anything runs
    if opts.storage_path and "storage" in opts.kinds:
        sto_mod.check_target(opts.storage_path, opts.endpoint_url)
    spec = resolve_device(opts.device, catalog)
    if base is not None and base.device.name != spec.name:
        raise InputError("out", f"{opts.out} is the profile of {base.device.name!r}, not of this device "
                         f"{spec.name!r}; write to another file")  # fmt: skip
    if base is not None:
        _check_same_procs(base, opts)
    peaks, mem_peak = catalog_peaks(spec)
    report = BenchReport(device=spec, timing=timing_summary(opts))
    if base is not None:
        report.kept, report.kept_measured_at = kept_sections(base, opts.kinds), f"{base.measured_at:%Y-%m-%d %H:%M} UTC"
    import torch

    previous_threads = torch.get_num_threads()
    if opts.threads is not None:
        torch.set_num_threads(opts.threads)
    try:
        with CpuWatch() as watch:
            _measure(opts, catalog, report, peaks, mem_peak, on_step)
        report.cpu = watch.result
        threads = (opts.threads or 1) if opts.procs > 1 else torch.get_num_threads()
    finally:
        torch.set_num_threads(previous_threads)
    report.profile = build_profile(spec, gemm=report.gemm, memory=report.memory, collectives=report.collectives,
                                   storage=report.storage, num_threads=threads, concurrent_processes=opts.procs,
                                   torch_version=str(torch.__version__), base=base)  # fmt: skip
    if opts.out is not None:
        report.out = save_profile(report.profile, opts.out)
    return report


def _measure(opts: BenchOptions, catalog: Catalog, report: BenchReport, peaks: dict[str, float],
             mem_peak: float | None, on_step: Callable[[], None] | None) -> None:  # fmt: skip
    if opts.procs > 1 and ("gemm" in opts.kinds or "memory" in opts.kinds):
        from fmstack.bench.concurrent import run_concurrent

        shapes = plan_gemm_shapes(opts, catalog) if "gemm" in opts.kinds else []
        sizes = mem_mod.buffer_sizes(opts.device, opts.quick, opts.max_bytes) if "memory" in opts.kinds else []
        report.gemm, report.memory = run_concurrent(_dtypes(opts) if shapes else [], shapes, sizes, procs=opts.procs,
                                                    threads=opts.threads or 1, min_time_s=opts.min_time_s,
                                                    on_step=on_step)  # fmt: skip
    elif "gemm" in opts.kinds:
        shapes = plan_gemm_shapes(opts, catalog)
        report.gemm = gemm_mod.run_gemm(opts.device, _dtypes(opts), shapes, peak_tflops=peaks,
                                        min_time_s=opts.min_time_s, trials=opts.trials, on_step=on_step)  # fmt: skip
    if "memory" in opts.kinds and opts.procs == 1:
        sizes = mem_mod.buffer_sizes(opts.device, opts.quick, opts.max_bytes)
        report.memory = mem_mod.run_memory(opts.device, sizes, peak_gbps=mem_peak, min_time_s=opts.min_time_s,
                                           trials=opts.trials, on_step=on_step)  # fmt: skip
    if "collectives" in opts.kinds:
        sizes = coll.message_sizes(opts.device, opts.quick, opts.ranks, opts.max_bytes)
        report.collectives = coll.run_collectives(opts.device, list(opts.ops), sizes, num_ranks=opts.ranks,
                                                  min_time_s=opts.min_time_s, trials=opts.trials,
                                                  on_step=on_step)  # fmt: skip
    if "storage" in opts.kinds:
        assert opts.storage_path is not None
        report.storage = sto_mod.run_storage(opts.storage_path, sto_mod.default_sweep(opts.quick),
                                             endpoint_url=opts.endpoint_url, on_step=on_step)  # fmt: skip


def report_dict(report: BenchReport) -> dict[str, object]:
    """JSON-ready results (the profile included)."""
    from dataclasses import asdict

    def rows(items: list[object]) -> list[dict[str, object]]:
        return [asdict(i) for i in items]  # type: ignore[call-overload]

    storage = [{**asdict(s), "write_gbps": s.write_gbps, "read_gbps": s.read_gbps} for s in report.storage]
    spec = report.device
    peaks, mem_peak = catalog_peaks(spec)
    return {
        "device": {"kind": spec.kind, "name": spec.name,
                   "catalog_gpu": spec.catalog_gpu.name if spec.catalog_gpu else None,
                   "spec_tflops": peaks or None, "spec_memory_bw_gbps": mem_peak},
        "timing": dict(report.timing),
        "machine_load": None if report.cpu is None else {
            "wall_s": report.cpu.wall_s, "cpus": report.cpu.cpus, "other_processes_cpu_s": report.cpu.others_s,
            "steal_s": report.cpu.steal_s, "others_share": report.cpu.others_share, "disturbed": report.cpu.disturbed},
        "gemm": [{**asdict(g), "flops": g.shape.flops} for g in report.gemm],
        "memory": rows(list(report.memory)),
        "collectives": rows(list(report.collectives)),
        "storage": storage,
        "profile": json.loads(report.profile.model_dump_json()) if report.profile else None,
        "out": str(report.out) if report.out else None,
        "kept_sections": list(report.kept),
    }  # fmt: skip


def timing_summary(opts: BenchOptions) -> dict[str, object]:
    """How each bench timed its points (the text output's timing lines and the ``timing`` JSON key)."""
    concurrent = opts.procs > 1
    how = {
        "gemm": "1 batch per process, slowest process kept" if concurrent else
                f"median of {opts.trials} batches; spread = fastest..slowest batch",
        "memory": "1 batch per process, slowest process kept" if concurrent else
                  f"fastest of {opts.trials} batches (STREAM); spread = median..slowest batch",
        "collectives": f"mean over all iterations (nccl-tests), averaged over ranks; spread = fastest..slowest of "
                       f"{opts.trials} parts of the loop",
        "storage": "one pass per (file size, count); no spread",
    }  # fmt: skip
    return {"min_time_s": opts.min_time_s, "trials": opts.trials, **{k: v for k, v in how.items() if k in opts.kinds}}
