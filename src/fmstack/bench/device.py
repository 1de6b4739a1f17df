"""Which device a bench runs on, its catalog entry, and a timer that waits for the device.

torch is imported inside functions, so importing this module (and `fmstack bench --help`) stays light.
"""

from __future__ import annotations

import platform
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fmstack.catalog import Catalog
from fmstack.catalog.schema import GPU
from fmstack.errors import InputError

DEVICES = ("cpu", "cuda")

# catalog precision name -> torch dtype attribute
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


@dataclass(frozen=True, kw_only=True, slots=True)
class DeviceSpec:
    """The device under test."""

    kind: str
    """cpu or cuda."""
    name: str
    """What the driver calls it (torch.cuda.get_device_name), or the CPU model name."""
    catalog_gpu: GPU | None = None
    """The catalog entry this device matched, if any."""


def check_device(kind: str) -> str:
    """Validate a --device value (before torch is imported)."""
    if kind not in DEVICES:
        raise InputError("device", f"unknown device {kind!r}; allowed: {', '.join(DEVICES)}")
    return kind


def check_dtype(name: str) -> str:
    if name not in DTYPES:
        raise InputError("dtype", f"unknown dtype {name!r}; allowed: {', '.join(DTYPES)}")
    return name


def torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, DTYPES[check_dtype(name)])


def cpu_name() -> str:
    """The CPU model name from /proc/cpuinfo (Linux), else platform.processor()."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


OTHER_BOARDS = ("pcie", "nvl")
"""Words in a CUDA device name for boards whose peaks differ from the SXM module of the same model."""


def match_catalog_gpu(device_name: str, catalog: Catalog) -> GPU | None:
    """The catalog GPU for a CUDA device name such as 'NVIDIA H100 80GB HBM3' or 'NVIDIA A100-SXM4-40GB'.

    Tries the name without the vendor word (also with hyphens: 'H100-PCIe'), then model plus memory ('A100-40GB'),
    then the bare model ('H100'). A name that says PCIe or NVL is another board than the SXM module the catalog's bare
    names describe (H100 PCIe: 756 bf16 dense TFLOP/s and 2.0 TB/s against the SXM's 989 and 3.35, NVIDIA H100
    datasheet), so it matches only a catalog entry or alias of its own, never the bare model.
    """
    rest = re.sub(r"^\s*nvidia\s+", "", device_name, flags=re.IGNORECASE).strip()
    tokens = re.split(r"[\s\-]+", rest)
    mem = next((t for t in tokens if re.fullmatch(r"\d+GB", t, flags=re.IGNORECASE)), None)
    candidates = [rest, "-".join(tokens)]
    if not any(t.lower() in OTHER_BOARDS for t in tokens):
        candidates += [f"{tokens[0]}-{mem}", tokens[0]] if mem else [tokens[0]]
    for name in candidates:
        try:
            return catalog.gpu(name)
        except InputError:
            continue
    return None


def resolve_device(kind: str, catalog: Catalog) -> DeviceSpec:
    """Check that the device exists on this machine and look it up in the catalog."""
    check_device(kind)
    if kind == "cpu":
        return DeviceSpec(kind="cpu", name=cpu_name())
    import torch

    if not torch.cuda.is_available():
        raise InputError("device", "cuda requested but torch sees no CUDA device here; allowed here: cpu")
    name = torch.cuda.get_device_name(0)
    return DeviceSpec(kind="cuda", name=name, catalog_gpu=match_catalog_gpu(name, catalog))


def synchronize(kind: str) -> None:
    if kind == "cuda":
        import torch

        torch.cuda.synchronize()


def _batch_s(fn: Callable[[], object], kind: str, calls: int) -> float:
    """Wall seconds of ``calls`` back-to-back calls of ``fn``, the device synchronised before and after."""
    synchronize(kind)
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    synchronize(kind)
    return time.perf_counter() - start


@dataclass(frozen=True, kw_only=True, slots=True)
class Timing:
    """Seconds per call of one timed operation: ``trials`` batches of ``calls`` calls each, after ``warmup`` calls."""

    per_call_s: tuple[float, ...]
    """Mean seconds per call of each timed batch, in the order they ran (the first is the sizing batch)."""
    calls: int
    """Calls in each timed batch (doubled until one batch lasted ``min_time_s``)."""
    warmup: int
    """Untimed calls before the first batch."""

    @property
    def trials(self) -> int:
        return len(self.per_call_s)

    @property
    def best_s(self) -> float:
        return min(self.per_call_s)

    @property
    def median_s(self) -> float:
        return statistics.median(self.per_call_s)

    @property
    def worst_s(self) -> float:
        return max(self.per_call_s)


def time_calls(fn: Callable[[], object], kind: str, *, min_time_s: float, warmup: int = 2, trials: int = 1) -> Timing:
    """``warmup`` calls, then batches of calls doubled until one batch lasts ``min_time_s``; that batch and
    ``trials - 1`` more of the same size are the timed trials. The device is synchronised around each batch, so
    asynchronous CUDA work is counted in full.
    """
    if trials < 1:
        raise InputError("trials", f"{trials}; allowed: >= 1")
    for _ in range(warmup):
        fn()
    calls = 1
    while True:
        elapsed = _batch_s(fn, kind, calls)
        if elapsed >= min_time_s or calls >= 1 << 20:
            batches = [elapsed, *(_batch_s(fn, kind, calls) for _ in range(trials - 1))]
            return Timing(per_call_s=tuple(b / calls for b in batches), calls=calls, warmup=warmup)
        calls = calls * 2 if elapsed <= 0 else max(calls * 2, int(calls * 1.2 * min_time_s / elapsed))


def time_per_call_s(
    fn: Callable[[], object], kind: str, *, min_time_s: float, warmup: int = 2, best_of: int = 1
) -> float:
    """Mean seconds per call of ``fn`` (:func:`time_calls`). With ``best_of`` > 1, the batch is timed ``best_of``
    times in all and the fastest batch is kept: interference from other work can only slow a batch down, so the
    minimum is the machine's own rate (STREAM reports the best of its NTIMES trials the same way).
    """
    return time_calls(fn, kind, min_time_s=min_time_s, warmup=warmup, trials=best_of).best_s


GRAPH_CALLS = 16
"""Calls of the timed operation captured in one CUDA graph by :func:`kernel_time_per_call_s`."""


def kernel_time_per_call_s(
    fn: Callable[[], object], kind: str, *, min_time_s: float, warmup: int = 2, best_of: int = 1
) -> float:
    """Seconds of device time per call of ``fn`` (:func:`kernel_timing`), the fastest of ``best_of`` batches."""
    return kernel_timing(fn, kind, min_time_s=min_time_s, warmup=warmup, trials=best_of).best_s


def kernel_timing(
    fn: Callable[[], object], kind: str, *, min_time_s: float, warmup: int = 2, trials: int = 1
) -> Timing:
    """Device time per call of ``fn``: on CUDA, ``GRAPH_CALLS`` calls are captured in one CUDA graph and
    the graph's replays are timed, so the host's cost of dispatching each call (10-20 us for ``torch.matmul``, which
    is longer than a 1024^3 bf16 GEMM on an H100) is not counted; a large training step queues its kernels far ahead
    of the GPU, so the kernel's own time is what the model needs. Falls back to :func:`time_calls` where the
    operation cannot be captured, and on a CPU. ``calls`` and ``warmup`` count calls of ``fn``.
    """
    if kind != "cuda":
        return time_calls(fn, kind, min_time_s=min_time_s, warmup=warmup, trials=trials)
    import torch

    for _ in range(warmup):
        fn()
    side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up on a side stream before capture (torch.cuda.graphs docs)
        fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            for _ in range(GRAPH_CALLS):
                fn()
    except RuntimeError:
        torch.cuda.synchronize()
        return time_calls(fn, kind, min_time_s=min_time_s, warmup=0, trials=trials)
    t = time_calls(graph.replay, kind, min_time_s=min_time_s, warmup=1, trials=trials)
    per_call = tuple(v / GRAPH_CALLS for v in t.per_call_s)
    return Timing(per_call_s=per_call, calls=t.calls * GRAPH_CALLS, warmup=warmup + 1 + GRAPH_CALLS * t.warmup)
