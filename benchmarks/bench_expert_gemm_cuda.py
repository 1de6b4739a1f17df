"""Routed-expert GEMMs of one MoE layer on one GPU, against the price the training model puts on them.

Usage (needs a CUDA GPU): python benchmarks/bench_expert_gemm_cuda.py [--json FILE]

The training model (``perfmodel.step``) prices the routed experts' GEMMs at the size of one expert's GEMM
(``modelconsts.expert_gemm_flops``: tokens routed to the expert x hidden x expert FFN) on the default efficiency
curve. This measures, for the expert-parallel layouts of two validation cases (T070 Qwen3-30B-A3B EP8 micro-batch 2,
T069 GPT-OSS 120B EP8 micro-batch 4, 4,096-token sequences: 4,096 tokens reach each expert), one rank's experts'
forward GEMMs (SwiGLU: gate and up fused, then down) in bf16, two ways: a Python loop of per-expert matmuls
(Megatron's SequentialMLP) and ``torch._grouped_mm`` (one grouped kernel, where this torch has it), each timed by
CUDA-graph replay. The baseline is the model's price computed in the same process; ratio = model / measured.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from fmstack.bench.device import kernel_time_per_call_s
from fmstack.catalog import load_catalog
from fmstack.perfmodel.efficiency import default_efficiency

CASES = {  # name: (hidden, expert ffn, experts per rank, tokens per expert)
    "T070 qwen3-30b-a3b ep8 mb2": (2048, 768, 16, 4096),
    "T069 gpt-oss-120b ep8 mb4": (2880, 2880, 16, 4096),
}


def measure_case(name: str, h: int, f: int, experts: int, tokens: int, eff: Any, peak: float) -> dict[str, Any]:
    """One rank's routed experts of one MoE layer: model price and measured times, printed and returned."""
    import torch

    dev, dt = "cuda", torch.bfloat16
    x = torch.randn(experts, tokens, h, device=dev, dtype=dt)
    w_gu = torch.randn(experts, h, 2 * f, device=dev, dtype=dt) * 0.02
    w_d = torch.randn(experts, f, h, device=dev, dtype=dt) * 0.02

    def loop() -> None:
        for e in range(experts):
            gate, up = (x[e] @ w_gu[e]).chunk(2, dim=-1)
            _ = (torch.nn.functional.silu(gate) * up) @ w_d[e]

    def gemms_only() -> None:
        for e in range(experts):
            _ = x[e] @ w_gu[e]
            _ = x[e, :, :f] @ w_d[e]

    flops = experts * (2.0 * tokens * h * 2 * f + 2.0 * tokens * f * h)
    call = 2.0 * tokens * h * f  # the size the model reads the curve at (one expert's GEMM)
    model_eff = float(eff.gemm_at("bf16", call))
    model_s = flops / (peak * model_eff)
    timings = {"loop_swiglu": loop, "loop_gemms": gemms_only}
    if hasattr(torch, "_grouped_mm"):
        xs = x.reshape(experts * tokens, h)
        offs = torch.arange(tokens, experts * tokens + 1, tokens, device=dev, dtype=torch.int32)

        def grouped() -> None:
            hgu = torch._grouped_mm(xs, w_gu, offs=offs)
            _ = torch._grouped_mm(hgu[:, :f].contiguous(), w_d, offs=offs)

        timings["grouped_mm"] = grouped
    row: dict[str, Any] = {"case": name, "hidden": h, "expert_ffn": f, "experts": experts, "tokens": tokens,
                           "model_s": model_s, "model_eff": model_eff}  # fmt: skip
    for k, fn in timings.items():
        try:
            t = kernel_time_per_call_s(fn, "cuda", min_time_s=0.1, best_of=3)
        except RuntimeError as exc:  # grouped_mm's layout rules differ between versions
            print(f"{name}: {k} failed: {exc}")
            continue
        row[k + "_s"] = t
        print(f"{name:28} {k:12} {t * 1e3:8.3f} ms  {flops / t / 1e12:6.1f} TFLOP/s  model {model_s * 1e3:8.3f} ms "
              f"(eff {model_eff:.3f} at {call:.2e} FLOPs)  ratio {model_s / t:.3f}", flush=True)  # fmt: skip
    return row


def main() -> None:
    import torch

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", help="write the numbers here")
    args = p.parse_args()
    gpu = load_catalog().gpu("H100")
    eff = default_efficiency(gpu)
    peak = gpu.bf16_dense_tflops * 1e12
    print(
        f"# {torch.cuda.get_device_name(0)}, torch {torch.__version__}; model: Hopper default, peak {peak / 1e12:.1f}"
    )
    rows = [measure_case(name, *shape, eff, peak) for name, shape in CASES.items()]
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
