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
    ("gemm", re.compile(r"^triton_tem_", re.IGNORECASE)),  # Inductor's matmul templates
    ("other", re.compile(r"^triton_", re.IGNORECASE)),  # Inductor's fused pointwise / reduction kernels, whose names
    # list every op they fused (a rotary kernel fused next to attention is named ..._scaled_dot_product_...)
    ("attention", re.compile(r"flash|fmha|attention|sdpa|lean_reduction", re.IGNORECASE)),
    ("gemm", re.compile(r"gemm|gemv|cutlass|xmma|nvjet|cublas|splitk", re.IGNORECASE)),
)
"""Kernel name patterns, first match wins; the rest (norms, rotary, activation, copies, softmax) is ``other``.
Attention includes cuDNN's SDPA kernels (``cudnn_generated_fort_native_sdpa_...``) and their split-KV reduction
(``cudnn::fusion::lean_reduction_kernel``), which PyTorch 2.11 picks on an H100. The matmul attention's two batched
products land in ``gemm``."""


def kernel_group(name: str) -> str:
    return next((group for group, pattern in KERNEL_GROUPS if pattern.search(name)), "other")


TOP_KERNELS = 3
"""Kernel names kept per group (the longest-running), so a result says which kernels it timed."""


def kernel_breakdown(fn: Callable[[], object]) -> tuple[dict[str, float], int, dict[str, list[str]]]:
    """Device seconds by :func:`kernel_group`, the kernel count, and each group's longest-running kernel names, of
    one call of ``fn`` on CUDA (dispatched as the step is: eagerly, or through its compiled graph)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    groups: dict[str, float] = {}
    names: dict[str, list[tuple[float, str]]] = {}
    count = 0
    for event in prof.key_averages():
        if event.device_type.name != "CUDA" or event.device_time_total <= 0:
            continue
        group = kernel_group(event.key)
        seconds = event.device_time_total * 1e-6  # the profiler reports microseconds
        groups[group] = groups.get(group, 0.0) + seconds
        names.setdefault(group, []).append((seconds, event.key))
        count += event.count
    top = {g: [n[:120] for _, n in sorted(v, reverse=True)[:TOP_KERNELS]] for g, v in names.items()}
    return groups, count, top


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
    """Median seconds per step called from the host one call at a time (eager ops, or the compiled code without a CUDA
    graph), the device synchronised around each batch of calls."""
    kv_cache_bytes: int
    kernels_s: dict[str, float] = field(default_factory=dict)
    """Device seconds of one step called from the host (eager ops, or the compiled code) by kernel group
    (:data:`KERNEL_GROUPS`, else ``other``), from the PyTorch profiler; empty off CUDA."""
    kernel_count: int = 0
    """CUDA kernels one step launches (0 off CUDA)."""
    kernel_names: dict[str, list[str]] = field(default_factory=dict)
    """The longest-running kernels of each group (e.g. which SDPA backend ran); empty off CUDA."""
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
    for how in attention:
        if how not in ("sdpa", "matmul"):
            raise InputError("attention", f"unknown {how!r}; allowed: sdpa, matmul")

    def step(fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` itself, or compiled afresh for one point (dynamic=False: one graph per shape; Dynamo allows 8
        recompiles of a function and fullgraph=True makes the 9th an error, so each point gets its own)."""
        if not compiled:
            return fn
        torch._dynamo.reset()
        return torch.compile(fn, dynamic=False, fullgraph=True)

    gen = torch.Generator(device=device).manual_seed(seed)
    width = torch.finfo(dt).bits // 8
    points: list[StepPoint] = []

    def timed(fn: Callable[[], object]) -> dict[str, Any]:
        kern = kernel_timing(fn, device, min_time_s=min_time_s, trials=trials).median_s
        eager = time_calls(fn, device, min_time_s=min_time_s, trials=trials).median_s
        groups, count, names = kernel_breakdown(fn) if device == "cuda" else ({}, 0, {})
        return {"kernel_s": kern, "eager_s": eager, "kernels_s": groups, "kernel_count": count,
                "kernel_names": names, "compiled": compiled}  # fmt: skip

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
                times = timed(partial(step(model.decode), tokens, ctx, cache, how))
                record(StepPoint(kind="decode", batch=batch, context=ctx, attention=how,
                                 kv_cache_bytes=cfg.kv_cache_bytes(batch, ctx + 1, width), **times))  # fmt: skip
            del cache
        for batch, length in prefill:
            cache = model.new_cache(batch, length)
            prompt = torch.randint(0, cfg.vocab_size, (batch, length), device=device, generator=gen)
            times = timed(partial(step(model.prefill), prompt, cache))
            record(StepPoint(kind="prefill", batch=batch, context=length, attention="sdpa",
                             kv_cache_bytes=cfg.kv_cache_bytes(batch, length, width), **times))  # fmt: skip
            del cache
    return points
