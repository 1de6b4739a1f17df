"""Time the reference decoder's serving steps on this machine: decode at (batch, context) and whole-prompt prefill.

Each step is timed twice: as kernels (:func:`fmstack.bench.device.kernel_timing`: on CUDA the step is captured in a
CUDA graph and replayed, as vLLM and TensorRT-LLM run decode, so the host's dispatch is not counted) and eagerly
(host-synchronised batches of plain calls: PyTorch's per-kernel dispatch included). The model's prediction for the
same steps is :mod:`fmstack.bench.predict_decode`; ``benchmarks/bench_decode_loop_cuda.py`` puts them side by side.
torch is imported inside functions.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

from fmstack.bench.device import kernel_timing, time_calls
from fmstack.errors import InputError
from fmstack.workloads.decoder import DecodeAttention, DecoderConfig, build_decoder

StepKind = Literal["decode", "prefill"]

KERNEL_GROUPS = (
    ("attention", re.compile(r"flash|fmha|attention|sdpa", re.IGNORECASE)),
    ("gemm", re.compile(r"gemm|gemv|cutlass|xmma|nvjet|cublas|splitk", re.IGNORECASE)),
)
"""Kernel name patterns, first match wins; the rest (norms, rotary, activation, copies, softmax) is ``other``.
The matmul attention's two batched products land in ``gemm``."""


def kernel_group(name: str) -> str:
    return next((group for group, pattern in KERNEL_GROUPS if pattern.search(name)), "other")


def kernel_breakdown(fn: Callable[[], object]) -> tuple[dict[str, float], int]:
    """Device seconds by :func:`kernel_group` and the kernel count of one eager call of ``fn`` on CUDA."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    groups: dict[str, float] = {}
    count = 0
    for event in prof.key_averages():
        if event.device_type.name != "CUDA" or event.device_time_total <= 0:
            continue
        group = kernel_group(event.key)
        groups[group] = groups.get(group, 0.0) + event.device_time_total * 1e-6  # profiler reports microseconds
        count += event.count
    return groups, count


@dataclass(frozen=True, kw_only=True, slots=True)
class StepPoint:
    """One measured step: ``decode`` of ``batch`` sequences at position ``context`` (attending ``context + 1``
    positions), or ``prefill`` of ``batch`` prompts of ``context`` tokens."""

    kind: StepKind
    batch: int
    context: int
    attention: DecodeAttention
    kernel_s: float
    """Median seconds per step replayed from a CUDA graph (on a CPU: plain calls, the same as ``eager_s``)."""
    eager_s: float
    """Median seconds per step called eagerly, the device synchronised around each batch of calls."""
    kv_cache_bytes: int
    kernels_s: dict[str, float] = field(default_factory=dict)
    """Device seconds of one eagerly called step by kernel group (:data:`KERNEL_GROUPS`, else ``other``), from the
    PyTorch profiler; empty off CUDA."""
    kernel_count: int = 0
    """CUDA kernels one step launches (0 off CUDA)."""
    compiled: bool = False
    """The step ran through ``torch.compile`` (Inductor fuses the norms, rotary and activation into a few Triton
    kernels, as vLLM's compiled model does), not eagerly op by op."""

    @property
    def attended(self) -> int:
        """Cached positions one decode step reads per sequence (its own included); the prompt length for prefill."""
        return self.context + 1 if self.kind == "decode" else self.context


def parse_points(text: str, field: str) -> list[tuple[int, int]]:
    """``"1x2048,64x2048"`` -> [(1, 2048), (64, 2048)]: batch x context, both > 0."""
    out = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        m = re.fullmatch(r"(\d+)x(\d+)", item)
        if m is None or int(m[1]) <= 0 or int(m[2]) <= 0:
            raise InputError(field, f"{item!r} is not BATCHxCONTEXT with both > 0 (e.g. 64x2048)")
        out.append((int(m[1]), int(m[2])))
    if not out:
        raise InputError(field, "no points given; e.g. 1x2048,64x2048")
    return out


def measure_steps(
    cfg: DecoderConfig,
    *,
    device: str,
    dtype: str = "bf16",
    decode: Iterable[tuple[int, int]] = (),
    prefill: Iterable[tuple[int, int]] = (),
    attention: Iterable[DecodeAttention] = ("sdpa",),
    min_time_s: float = 0.2,
    trials: int = 3,
    compiled: bool = False,
    seed: int = 0,
    on_point: Callable[[StepPoint], None] | None = None,
) -> list[StepPoint]:
    """Build the decoder once (random weights from ``seed``) and time every requested step; each point gets a fresh
    cache of exactly the positions it uses, freed before the next."""
    import torch

    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    torch.manual_seed(seed)
    model = build_decoder(cfg, device=device, dtype=dt).requires_grad_(False)
    decode_fn, prefill_fn = model.decode, model.prefill
    if compiled:  # one graph per shape (dynamic=False), compiled at the point's first (warm-up) call
        decode_fn = torch.compile(model.decode, dynamic=False, fullgraph=True)
        prefill_fn = torch.compile(model.prefill, dynamic=False, fullgraph=True)
    gen = torch.Generator(device=device).manual_seed(seed)
    width = torch.finfo(dt).bits // 8
    points: list[StepPoint] = []

    def timed(fn: Callable[[], object]) -> dict[str, Any]:
        kern = kernel_timing(fn, device, min_time_s=min_time_s, trials=trials).median_s
        eager = time_calls(fn, device, min_time_s=min_time_s, trials=trials).median_s
        groups, count = kernel_breakdown(fn) if device == "cuda" else ({}, 0)
        return {"kernel_s": kern, "eager_s": eager, "kernels_s": groups, "kernel_count": count, "compiled": compiled}

    def record(point: StepPoint) -> None:
        points.append(point)
        if on_point is not None:
            on_point(point)

    with torch.no_grad():
        for batch, ctx in decode:
            cache = model.new_cache(batch, ctx + 1)
            for k, v in cache:  # a filled cache: softmax over zeros would be a special case of nothing
                k.normal_(generator=gen)
                v.normal_(generator=gen)
            tokens = torch.randint(0, cfg.vocab_size, (batch,), device=device, generator=gen)
            for how in attention:
                times = timed(partial(decode_fn, tokens, ctx, cache, how))
                record(StepPoint(kind="decode", batch=batch, context=ctx, attention=how,
                                 kv_cache_bytes=cfg.kv_cache_bytes(batch, ctx + 1, width), **times))  # fmt: skip
            del cache
        for batch, length in prefill:
            cache = model.new_cache(batch, length)
            prompt = torch.randint(0, cfg.vocab_size, (batch, length), device=device, generator=gen)
            times = timed(partial(prefill_fn, prompt, cache))
            record(StepPoint(kind="prefill", batch=batch, context=length, attention="sdpa",
                             kv_cache_bytes=cfg.kv_cache_bytes(batch, length, width), **times))  # fmt: skip
            del cache
    return points
