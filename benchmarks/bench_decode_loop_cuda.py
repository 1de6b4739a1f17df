"""Closing the loop for serving on one GPU: the inference model's decode and prefill steps against real ones.

Usage: python benchmarks/bench_decode_loop_cuda.py [--model llama3.1-8b] [--instance p5.48xlarge]
       [--decode 1x2048,8x2048,...] [--prefill 1x2048,...] [--attention sdpa,matmul] [--json FILE] [--device cpu]

Runs the reference decoder (fmstack.workloads.decoder: the catalog model's shape, random BF16 weights, a static
KV cache) on this GPU and times each step from a CUDA graph (fmstack.bench.decode_loop). The model prices the same
steps (fmstack.bench.predict_decode, the function `fmstack estimate serve` uses) twice: with the catalog's default
efficiencies, and calibrated by a profile measured in this process first (square bf16 GEMMs 256^3..8192^3 and
STREAM copy up to 1 GiB: what `fmstack bench gemm` and `bench memory` measure, none of the step's own shapes).
The baseline is the measured step from the same run; each ratio is predicted / measured. Eager (host-dispatched)
times are printed beside the graph times: the gap is PyTorch's dispatch, which the model's engine term stands for.
On a CPU (--device cpu, a small --layers) it checks the plumbing only: the catalog prices an H100, not this CPU.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, replace
from datetime import UTC, datetime
from typing import Any

from fmstack.bench.decode_loop import StepPoint, measure_steps, parse_points
from fmstack.bench.device import resolve_device
from fmstack.bench.gemm import GemmShape, run_gemm
from fmstack.bench.memory import buffer_sizes, run_memory
from fmstack.bench.predict_decode import StepPrice, price_decode, price_prefill
from fmstack.bench.profile import build_profile, catalog_peaks
from fmstack.catalog import load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.perfmodel.efficiency import efficiency_from_profile
from fmstack.perfmodel.inference_step import ITERATION_OVERHEAD_S
from fmstack.workloads.decoder import DecoderConfig

SQUARES = (256, 512, 1024, 2048, 4096, 8192)


def main() -> None:
    import torch

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="llama3.1-8b", help="dense catalog model whose shape the decoder takes")
    p.add_argument("--instance", default="p5.48xlarge", help="catalog instance whose GPU the model prices")
    p.add_argument("--layers", type=int, help="fewer layers than the model (the prediction uses the same count)")
    p.add_argument("--decode", default="1x2048,8x2048,32x2048,64x2048,128x2048,1x8192,8x8192,32x8192")
    p.add_argument("--prefill", default="1x512,1x2048,4x2048,1x8192")
    p.add_argument("--attention", default="sdpa,matmul", help="decode attention: sdpa, matmul or both")
    p.add_argument("--min-time", type=float, default=0.2, help="seconds per timed batch")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--compile", action="store_true", help="run the steps through torch.compile (fused elementwise)")
    p.add_argument("--json", help="write the numbers here")
    args = p.parse_args()

    cat = load_catalog()
    arch = cat.model(args.model)
    if args.layers is not None:
        arch = arch.model_copy(update={"num_layers": args.layers})
    cfg = DecoderConfig.from_arch(arch)
    cluster = build_cluster(cat, args.instance, 1)
    spec = resolve_device(args.device, cat)
    attention = [a.strip() for a in args.attention.split(",") if a.strip()]
    if not attention or any(a not in ("sdpa", "matmul") for a in attention):
        p.error(f"--attention {args.attention!r}: give sdpa, matmul or both (comma-separated)")
    decode_pts, prefill_pts = parse_points(args.decode, "decode"), parse_points(args.prefill, "prefill")

    t0 = time.perf_counter()
    peaks, mem_peak = catalog_peaks(spec)
    shapes = [GemmShape(m=s, n=s, k=s, label="square") for s in SQUARES]
    gemm = run_gemm(args.device, ["bf16"], shapes, peak_tflops=peaks, min_time_s=0.05)
    memory = run_memory(args.device, buffer_sizes(args.device, False), peak_gbps=mem_peak, min_time_s=0.05)
    profile = build_profile(spec, gemm=gemm, memory=memory, torch_version=str(torch.__version__))
    calibrated = (
        efficiency_from_profile(profile, cluster.gpu) if spec.catalog_gpu and spec.catalog_gpu.name == cluster.gpu.name
        else None
    )  # fmt: skip
    calib_s = time.perf_counter() - t0

    def price(pt: StepPoint, eff: Any) -> StepPrice:
        if pt.kind == "decode":
            return price_decode(arch, cluster, eff, batch=pt.batch, attended=pt.attended)
        return price_prefill(arch, cluster, eff, batch=pt.batch, prompt_len=pt.context)

    how = "torch.compile" if args.compile else "eager ops"
    print(f"# {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {spec.name}, torch {torch.__version__}; {arch.name} shape, "
          f"{cfg.num_layers} layers, {cfg.params() / 1e9:.2f} B params, bf16, {how}; model prices {cluster.gpu.name}")  # fmt: skip
    if calibrated is None:
        print(f"# {spec.name} is not the catalog's {cluster.gpu.name}: no calibrated prediction (plumbing check)")
    else:
        print(f"# calibration {calib_s:.1f} s: bf16 plateau {calibrated.gemm['bf16'].y[-1]:.3f} of peak, "
              f"HBM {calibrated.memory:.3f} of {cluster.gpu.hbm_bw_gbps:.0f} GB/s")  # fmt: skip
    print(f"{'step':>8} {'BxC':>9} {'attn':>6} {'graph ms':>9} {'eager ms':>9} {'model ms':>9} {'ratio':>6} "
          f"{'calib ms':>9} {'ratio':>6}  model's largest part")  # fmt: skip
    rows: list[dict[str, Any]] = []
    gemv: list[dict[str, Any]] = []

    def dump() -> None:
        if not args.json:
            return
        out = {
            "date_utc": f"{datetime.now(UTC):%Y-%m-%d %H:%M}",
            "device": spec.name,
            "catalog_gpu": cluster.gpu.name,
            "torch": str(torch.__version__),
            "model": arch.name,
            "decoder": asdict(replace(cfg)),
            "compiled": args.compile,
            "calibration_s": calib_s,
            "calibrated_gemm_plateau": calibrated.gemm["bf16"].y[-1] if calibrated else None,
            "calibrated_memory_fraction": calibrated.memory if calibrated else None,
            "calibrated_weight_fraction": calibrated.weight_memory if calibrated else None,
            "points": rows,
            "linear_layers": gemv,
            "gemm": [{"m": g.shape.m, "tflops": g.tflops, "pct": g.pct_of_peak} for g in gemm],
            "memory": [{"kernel": m.kernel, "bytes": m.buffer_bytes, "gbps": m.bw_gbps} for m in memory],
        }
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1, default=str)

    def report(pt: StepPoint) -> None:
        default = price(pt, None)
        cal = price(pt, calibrated) if calibrated is not None else None
        row = {
            **asdict(pt),
            "attended": pt.attended,
            "model_default_s": default.gpu_s,
            "model_default_parts_s": default.parts_s,
            "ratio_default": default.gpu_s / pt.kernel_s,
            "model_calibrated_s": cal.gpu_s if cal else None,
            "ratio_calibrated": cal.gpu_s / pt.kernel_s if cal else None,
        }
        rows.append(row)
        dump()  # after every point: a run cut short keeps what it measured
        if pt.kernels_s:
            row["achieved"] = achieved(pt)
        cal_txt = f"{cal.gpu_s * 1e3:9.3f} {cal.gpu_s / pt.kernel_s:6.3f}" if cal else f"{'-':>9} {'-':>6}"
        print(f"{pt.kind:>8} {pt.batch:>4}x{pt.context:<5} {pt.attention:>5} {pt.kernel_s * 1e3:9.3f} "
              f"{pt.eager_s * 1e3:9.3f} {default.gpu_s * 1e3:9.3f} {default.gpu_s / pt.kernel_s:6.3f} {cal_txt}  "
              f"{default.top()}", flush=True)  # fmt: skip

    def achieved(pt: StepPoint) -> dict[str, float]:
        """Kernel groups against the model's matching parts, and the rates the kernels achieved."""
        d = price(pt, None).parts_s
        k = pt.kernels_s
        linear_bytes = 2.0 * (cfg.params() - cfg.vocab_size * cfg.hidden_size)  # every weight but the embedding
        return {
            "gemm_ms": k.get("gemm", 0.0) * 1e3,
            "model_linear_ms": (d["gemm_compute"] + d["weight_reads"]) * 1e3,
            "attention_ms": k.get("attention", 0.0) * 1e3,
            "model_attention_ms": (d["attention_compute"] + d["kv_cache_reads"]) * 1e3,
            "other_ms": k.get("other", 0.0) * 1e3,
            "model_elementwise_ms": d["elementwise"] * 1e3,
            "gaps_ms": (pt.kernel_s - sum(k.values())) * 1e3,
            "model_launch_ms": (d["overhead"] - ITERATION_OVERHEAD_S) * 1e3,
            "kernels": pt.kernel_count,
            "weights_gbps": linear_bytes / k["gemm"] / 1e9 if k.get("gemm") else 0.0,
            "kv_gbps": pt.kv_cache_bytes / k["attention"] / 1e9 if pt.kind == "decode" and k.get("attention") else 0.0,
        }

    measure_steps(cfg, device=args.device, decode=decode_pts, prefill=prefill_pts, attention=attention,  # type: ignore[arg-type]
                  min_time_s=args.min_time, on_point=report, compiled=args.compile)  # fmt: skip
    if args.device == "cuda":  # the step's linear layers alone: weight bytes over kernel time
        layer = {"qkv": (cfg.q_width + 2 * cfg.kv_width, cfg.hidden_size), "out": (cfg.hidden_size, cfg.q_width),
                 "gate_up": (2 * cfg.ffn_hidden_size, cfg.hidden_size), "down": (cfg.hidden_size, cfg.ffn_hidden_size),
                 "lm_head": (cfg.vocab_size, cfg.hidden_size)}  # fmt: skip
        shapes = [GemmShape(m=m, n=n, k=k, label=name) for m in (1, 8, 64) for name, (n, k) in layer.items()]
        print("\n# the step's linear layers alone (bf16, CUDA graph): weight read rate, % of the catalog HBM")
        for g in run_gemm("cuda", ["bf16"], shapes, peak_tflops=peaks, min_time_s=0.05):
            gbps = 2.0 * g.shape.n * g.shape.k / g.time_s / 1e9
            gemv.append({"m": g.shape.m, "n": g.shape.n, "k": g.shape.k, "layer": g.shape.label, "time_s": g.time_s,
                         "weights_gbps": gbps})  # fmt: skip
            print(f"{g.shape.label:>8} m {g.shape.m:>3} n {g.shape.n:>6} k {g.shape.k:>6}: {g.time_s * 1e6:8.1f} us "
                  f"{gbps:6.0f} GB/s {100 * gbps / cluster.gpu.hbm_bw_gbps:5.1f} %")  # fmt: skip
    kernel_rows = [r for r in rows if "achieved" in r]
    if kernel_rows:
        print("\n# one host-called step by kernel group (PyTorch profiler) beside the model's parts; ms")
        print(f"{'step':>8} {'BxC':>9} {'attn':>6} {'gemm':>8} {'model':>8} {'attn':>8} {'model':>8} {'other':>8} "
              f"{'model':>8} {'gaps':>7} {'model':>7} {'kern':>5} {'W GB/s':>7} {'KV GB/s':>7}")  # fmt: skip
        for r in kernel_rows:
            a = r["achieved"]
            print(f"{r['kind']:>8} {r['batch']:>4}x{r['context']:<5} {r['attention']:>5} {a['gemm_ms']:8.3f} "
                  f"{a['model_linear_ms']:8.3f} {a['attention_ms']:8.3f} {a['model_attention_ms']:8.3f} "
                  f"{a['other_ms']:8.3f} {a['model_elementwise_ms']:8.3f} {a['gaps_ms']:7.3f} "
                  f"{a['model_launch_ms']:7.3f} {a['kernels']:>5} {a['weights_gbps']:7.0f} {a['kv_gbps']:7.0f}")  # fmt: skip
    dump()


if __name__ == "__main__":
    main()
