"""GEMM bench: achieved TFLOP/s of ``C = A @ B`` over a sweep of shapes and dtypes.

A GEMM of (m x k) by (k x n) does 2*m*n*k floating-point operations (one multiply and one add per term), the
count behind every TFLOP/s figure in the seed's GPU table and in cuBLAS benchmarks.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from fmstack.bench.device import check_dtype, kernel_timing, torch_dtype
from fmstack.catalog.schema import ModelArch
from fmstack.errors import InputError


@dataclass(frozen=True, kw_only=True, slots=True)
class GemmShape:
    """One GEMM: (m x k) @ (k x n), with a label saying where it comes from."""

    m: int
    n: int
    k: int
    label: str = "square"

    @property
    def flops(self) -> float:
        """2*m*n*k: a multiply and an add per inner-product term."""
        return 2.0 * self.m * self.n * self.k


@dataclass(frozen=True, kw_only=True, slots=True)
class GemmResult:
    """One measured GEMM."""

    shape: GemmShape
    dtype: str
    time_s: float
    tflops: float
    pct_of_peak: float | None
    """Achieved / catalog peak x 100 on a catalog GPU; None on a CPU (its peak is the best measured rate)."""
    time_min_s: float | None = None
    """Fastest timed batch, seconds per call (``time_s`` is the median of the batches)."""
    time_max_s: float | None = None
    """Slowest timed batch, seconds per call."""
    calls: int = 0
    """Calls per timed batch."""
    trials: int = 0
    """Timed batches."""
    warmup: int = 0
    """Untimed calls before the first batch."""


def square_sizes(device: str, quick: bool) -> list[int]:
    """Square sizes: small on CPU (seconds in total), up to 8192 on a GPU."""
    if device == "cpu":
        return [64, 128, 256] if quick else [64, 128, 256, 512, 1024]
    return [256, 1024] if quick else [256, 512, 1024, 2048, 4096, 8192]


def _round8(v: float) -> int:
    return max(8, round(v / 8.0) * 8)


def model_shapes(model: ModelArch, *, tokens: int, max_dim: int) -> list[GemmShape]:
    """The forward GEMMs of one transformer layer of ``model`` for ``tokens`` tokens (a micro-batch).

    QKV projection (h -> (heads + 2*kv_heads)*head_dim), attention output (heads*head_dim -> h), MLP up
    (h -> ffn, doubled for SwiGLU's gate), MLP down (ffn -> h), as in Megatron-LM's layer (Narayanan et al. 2021,
    sec. 5.1). Dimensions are scaled down together (rounded to multiples of 8) so that none exceeds ``max_dim``:
    on a CPU a 70B layer would take minutes per GEMM; the shapes keep their aspect ratios.

    An MoE layer's MLP GEMMs are one routed expert's (``expert_up`` / ``expert_down``): its width and the tokens it
    gets when the router spreads ``tokens x top_k`` assignments evenly over the experts (the size the training
    model prices a routed expert's GEMM at; every token's full count would time a GEMM ``experts / top_k`` times
    taller than any the layer runs: 4x for Mixtral 8x7B, 32x for DeepSeek-V3).
    """
    hd = model.head_dim_eff
    h = model.hidden_size
    moe = model.moe
    ffn = moe.expert_ffn_hidden_size if moe else model.ffn_hidden_size
    up = 2 * ffn if model.mlp == "swiglu" else ffn
    mlp_tokens = tokens if moe is None else max(1, round(tokens * moe.top_k / moe.num_experts))
    mlp = "mlp" if moe is None else "expert"
    raw = [
        ("qkv", tokens, (model.num_heads + 2 * model.num_kv_heads) * hd, h),
        ("attn_out", tokens, h, model.num_heads * hd),
        (f"{mlp}_up", mlp_tokens, up, h),
        (f"{mlp}_down", mlp_tokens, h, ffn),
    ]
    biggest = max(max(m, n, k) for _, m, n, k in raw)
    scale = min(1.0, max_dim / biggest)
    suffix = "" if scale == 1.0 else f" (x{scale:.3g})"
    return [
        GemmShape(m=_round8(m * scale), n=_round8(n * scale), k=_round8(k * scale), label=f"{model.name} {lbl}{suffix}")
        for lbl, m, n, k in raw
    ]


def run_gemm(
    device: str,
    dtypes: list[str],
    shapes: list[GemmShape],
    *,
    peak_tflops: dict[str, float] | None = None,
    min_time_s: float = 0.05,
    trials: int = 1,
    on_step: Callable[[], None] | None = None,
) -> list[GemmResult]:
    """Time every shape in every dtype on ``device``; % of peak when ``peak_tflops`` (catalog) is given.

    Each point is ``trials`` batches (:func:`fmstack.bench.device.kernel_timing`); ``time_s`` is their median, the
    rate a long run sustains (a GPU's clock can drop under sustained load, so the fastest batch would flatter it),
    with the fastest and slowest batch kept as the spread.
    """
    import torch

    if not shapes:
        raise InputError("shapes", "no GEMM shapes to run")
    results: list[GemmResult] = []
    gen = torch.Generator(device=device).manual_seed(0)
    for dtype in dtypes:
        tdtype = torch_dtype(check_dtype(dtype))
        for shape in shapes:
            a = torch.randn(shape.m, shape.k, generator=gen, device=device, dtype=torch.float32).to(tdtype)
            b = torch.randn(shape.k, shape.n, generator=gen, device=device, dtype=torch.float32).to(tdtype)
            c = torch.empty(shape.m, shape.n, device=device, dtype=tdtype)

            def call(a: torch.Tensor = a, b: torch.Tensor = b, c: torch.Tensor = c) -> None:
                torch.matmul(a, b, out=c)

            t = kernel_timing(call, device, min_time_s=min_time_s, trials=trials)
            tflops = shape.flops / t.median_s / 1e12
            peak = (peak_tflops or {}).get(dtype)
            pct = 100.0 * tflops / peak if peak else None
            results.append(GemmResult(shape=shape, dtype=dtype, time_s=t.median_s, tflops=tflops, pct_of_peak=pct,
                                      time_min_s=t.best_s, time_max_s=t.worst_s, calls=t.calls, trials=t.trials,
                                      warmup=t.warmup))  # fmt: skip
            if on_step:
                on_step()
    return results


def best_by_flops(results: list[GemmResult], dtype: str) -> tuple[list[float], list[float]]:
    """(FLOPs, TFLOP/s) points of one dtype for a curve, sorted by FLOPs.

    A curve needs strictly increasing x, so shapes with equal FLOPs are merged into their mean rate.
    """
    by_flops: dict[float, list[float]] = {}
    for r in results:
        if r.dtype == dtype:
            by_flops.setdefault(r.shape.flops, []).append(r.tflops)
    xs = sorted(by_flops)
    return xs, [math.fsum(by_flops[x]) / len(by_flops[x]) for x in xs]
