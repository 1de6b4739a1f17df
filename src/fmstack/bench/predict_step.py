"""Predict the reference workload's DDP step time from a calibration profile (closing the loop).

step time = GEMM time + memory-bound time + gradient all-reduce time, with
- GEMM time: every matrix multiply of forward and backward (backward = two GEMMs of the forward's FLOPs per
  Linear: dX = dY W and dW = dY^T X; Narayanan et al. 2021, sec. 5.1 "3x forward"), each at the calibrated
  TFLOP/s for its FLOPs (``gemm_tflops`` curve); attention as batched (T x T x head_dim) GEMMs per head, unless
  its own time is given (below).
- attention time (optional, ``attention_call_s``): one forward + backward of the step's fused
  ``scaled_dot_product_attention`` call, measured at its shapes, times the layers. The fused kernel also does the
  causal mask, the online softmax and its rescaling, which the batched-GEMM price leaves out (on the 2-vCPU VM the
  kernel took 4.4-4.5 ms a step against 2.4-2.5 ms priced as GEMMs; docs/bench.md). Its GEMMs' FLOPs stay counted in
  ``gemm_flops``; only their time moves from ``gemm_s`` to ``attention_s``.
- memory-bound time: bytes that the non-GEMM ops read and write (LayerNorm, GELU, residual adds, softmax and
  cross-entropy, embedding, AdamW, DDP's bucket copies), each at the calibrated bandwidth for its size
  (``memory_bw_gbps`` curve, STREAM copy); the transcendental ones (:data:`MEASURED_OPS`: GELU, log-softmax and their
  backwards, AdamW's sqrt) at their own measured rate when one is given (``op_gbps``). Counting convention in
  :func:`labelled_memory_ops`.
- all-reduce time: DDP's gradient buckets (first bucket 1 MiB, then 25 MiB; torch DDP defaults), each at
  algbw = busbw / (2(n-1)/n) of the calibrated gloo all-reduce curve (nccl-tests' definition, inverted).
- framework overhead (optional, ``overhead_s``): what eager PyTorch spends per step besides the work priced above
  (Python module calls, op dispatch, the autograd engine, DDP's hooks, the optimizer's loop over tensors), the
  same for every size of the model. It is calibrated on a twin of the workload with negligible sizes
  (:func:`overhead_twin`: same layers, heads and op sequence; 2 floats per head): the twin's measured step less
  this model's prediction of the twin's own GEMM, memory and all-reduce time (:func:`framework_overhead`).
The parts are added: on a CPU the gloo threads and the compute share the same cores, so DDP's overlap of
all-reduce with backward buys little; this is an upper-bound style choice, stated in docs/bench.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from fmstack.bench.collectives import bus_factor
from fmstack.bench.gemm import GemmShape
from fmstack.errors import InputError
from fmstack.perfmodel.calibration import CalibrationProfile
from fmstack.workloads.gpt import GPTConfig, total_params

FP32_BYTES = 4
DDP_FIRST_BUCKET_BYTES = 1 << 20
"""torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES."""
DDP_BUCKET_BYTES = 25 << 20
"""DistributedDataParallel(bucket_cap_mb=25)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StepPrediction:
    """Predicted step time and its parts (seconds)."""

    gemm_s: float
    memory_s: float
    allreduce_s: float
    gemm_flops: float
    memory_bytes: float
    grad_bytes: float
    overhead_s: float = 0.0
    """Framework overhead per step (0 when not calibrated)."""
    measured_ops_s: float = 0.0
    """Part of ``memory_s`` priced from the ops' own measured rates (``op_gbps``) instead of the copy bandwidth."""
    attention_s: float = 0.0
    """Fused attention's forward and backward priced from its measurement (``attention_call_s`` x layers); 0 when
    not measured, and attention is then priced as batched GEMMs inside ``gemm_s``."""

    @property
    def total_s(self) -> float:
        return self.work_s + self.overhead_s

    @property
    def work_s(self) -> float:
        """GEMM + attention + memory-bound + all-reduce: the prediction without the framework overhead."""
        return self.gemm_s + self.attention_s + self.memory_s + self.allreduce_s


ATTENTION_GEMMS = ("attn QK^T", "attn PV")
"""Labels of :func:`step_gemms`' attention GEMMs: priced by ``attention_call_s`` instead when it is given."""


def step_gemms(cfg: GPTConfig, micro_batch: int) -> list[tuple[GemmShape, int]]:
    """(shape, how many times per step) of every GEMM in forward and backward of one rank's micro-batch."""
    n_tok = micro_batch * cfg.seq_len
    d, f, v = cfg.d_model, cfg.ffn_mult * cfg.d_model, cfg.vocab_size
    hd = d // cfg.n_heads
    linears = [("qkv", 3 * d, d), ("proj", d, d), ("fc1", f, d), ("fc2", d, f)]
    out: list[tuple[GemmShape, int]] = []
    for name, n_out, n_in in linears:
        out.append((GemmShape(m=n_tok, n=n_out, k=n_in, label=f"{name} fwd"), cfg.n_layers))
        out.append((GemmShape(m=n_tok, n=n_in, k=n_out, label=f"{name} dX"), cfg.n_layers))
        out.append((GemmShape(m=n_out, n=n_in, k=n_tok, label=f"{name} dW"), cfg.n_layers))
    out.append((GemmShape(m=n_tok, n=v, k=d, label="head fwd"), 1))
    out.append((GemmShape(m=n_tok, n=d, k=v, label="head dX"), 1))
    out.append((GemmShape(m=v, n=d, k=n_tok, label="head dW"), 1))
    t = cfg.seq_len
    rows = micro_batch * cfg.n_heads * t
    # scaled_dot_product_attention is one kernel over all (sequence, head) pairs, so its matmuls are priced as one
    # GEMM of the batched FLOPs (rows = batch x heads x T), not as batch x heads small GEMMs: on an H100 the per-head
    # pricing put a T x T x 64 GEMM at ~10 TFLOP/s (launch-bound when timed alone) and over-predicted the step by 55 %
    # (benchmarks/results/gpu-h100-2026-11-23.md). Forward: Q K^T and P V; backward: two GEMMs of the same size each
    # (dQ, dK and dP, dV). Causal masking is not subtracted (full T x T), as before.
    out.append((GemmShape(m=rows, n=t, k=hd, label=ATTENTION_GEMMS[0]), 3 * cfg.n_layers))
    out.append((GemmShape(m=rows, n=hd, k=t, label=ATTENTION_GEMMS[1]), 3 * cfg.n_layers))
    return out


MEASURED_OPS = ("gelu", "gelu_backward", "log_softmax", "log_softmax_backward", "adamw_sqrt")
"""Labels of the memory-bound ops that compute a transcendental per element (erf and exp for GELU and its backward,
exp and log for log-softmax and its backward, sqrt for AdamW's denominator): on a CPU they run 1.5-7x below the copy
bandwidth for their bytes (docs/bench.md, "Where the step's time goes"), so their price may come from a measurement
of the op itself at the step's own sizes (``op_gbps`` of :func:`predict_step`). AdamW's other passes run at or above
copy bandwidth and stay priced by it."""


def labelled_memory_ops(cfg: GPTConfig, micro_batch: int, num_params: int) -> list[tuple[str, float, int]]:
    """(label, bytes one op moves, ops per step) of the memory-bound ops of one rank, fp32, counted op by op.

    In floats, with N tokens, d = d_model, f = ffn_mult * d, V = vocab; reads plus writes of each op:
    - block forward (20 N d): LayerNorm 2 (x2), attention-output re-layout 2, residual add 3 (x2), GELU 2 f/d = 8.
    - block backward (45 N d): gradient accumulation at the two residual branch points 3 (x2), GELU backward
      3 f/d = 12, bias-gradient reductions 1 + 4 + 1 + 3, LayerNorm backward 5 (x2: input and weight grads),
      re-layout 2, concatenating dq, dk, dv 6.
    - LM head and loss (10 N V): log-softmax 4 (max, sum of exp, write), its backward 4, the zero-filled NLL
      gradient 1, the head's bias gradient 1; final LayerNorm 2 + 5 N d; embeddings: lookup 2, add 3, backward 2 N d.
    - per parameter: AdamW with foreach=True makes 8 unfused passes (torch/optim/adam.py ``_multi_tensor_adam``:
      weight-decay mul 2, lerp m 3, mul v 2, addcmul v 3, sqrt 2, div 2, add eps 2, addcdiv p 4 = 20 floats);
      DDP copies each gradient into its bucket (2), divides it by the world size (2) and copies it back (2).
    Labels name the ops of :data:`MEASURED_OPS`; the others are "".
    """
    n_tok = micro_batch * cfg.seq_len
    nd = n_tok * cfg.d_model * FP32_BYTES
    nf = nd * cfg.ffn_mult
    nv = n_tok * cfg.vocab_size * FP32_BYTES
    layers = cfg.n_layers
    ops: list[tuple[str, float, int]] = [
        ("", 2 * nd, 2 * layers), ("", 2 * nd, layers), ("", 3 * nd, 2 * layers), ("gelu", 2 * nf, layers),  # fwd
        ("", 3 * nd, 2 * layers), ("gelu_backward", 3 * nf, layers), ("", nd, 2 * layers), ("", nf, layers),  # bwd
        ("", 3 * nd, layers), ("", 5 * nd, 2 * layers), ("", 2 * nd, layers), ("", 6 * nd, layers),
        ("log_softmax", 4 * nv, 1), ("log_softmax_backward", 4 * nv, 1), ("", nv, 2),  # loss, NLL fill, head bias
        ("", 2 * nd, 1), ("", 5 * nd, 1), ("", 2 * nd, 2), ("", 3 * nd, 1),  # final LayerNorm, embeddings
    ]  # fmt: skip
    adamw = (("", 2), ("", 3), ("", 2), ("", 3), ("adamw_sqrt", 2), ("", 2), ("", 2), ("", 4))
    for label, floats in (*adamw, ("", 2), ("", 2), ("", 2)):  # AdamW's passes, then DDP's copy, divide, copy back
        ops.append((label, num_params * FP32_BYTES * floats, 1))
    return ops


def memory_ops(cfg: GPTConfig, micro_batch: int, num_params: int) -> list[tuple[float, int]]:
    """(bytes one op moves, ops per step) of :func:`labelled_memory_ops` (its docstring has the counting)."""
    return [(size, count) for _, size, count in labelled_memory_ops(cfg, micro_batch, num_params)]


def ddp_buckets(grad_bytes: int) -> list[int]:
    """Bucket sizes DDP all-reduces for ``grad_bytes`` of fp32 gradients (1 MiB first, then 25 MiB caps)."""
    buckets = [min(grad_bytes, DDP_FIRST_BUCKET_BYTES)]
    rest = grad_bytes - buckets[0]
    while rest > 0:
        buckets.append(min(rest, DDP_BUCKET_BYTES))
        rest -= buckets[-1]
    return buckets


def overhead_twin(cfg: GPTConfig) -> GPTConfig:
    """``cfg`` with negligible sizes and the same op sequence: layers, heads and MLP ratio kept, 2 floats per head,
    4 tokens, a vocabulary of 8. Its step (micro-batch 1) is the framework's per-step overhead plus a few us of work."""
    return GPTConfig(vocab_size=8, seq_len=4, d_model=2 * cfg.n_heads, n_layers=cfg.n_layers, n_heads=cfg.n_heads,
                     ffn_mult=cfg.ffn_mult, dropout=cfg.dropout)  # fmt: skip


TWIN_MICRO_BATCH = 1


def framework_overhead(cfg: GPTConfig, *, twin_step_s: float, num_ranks: int, profile: CalibrationProfile) -> float:
    """Per-step framework overhead of ``cfg``'s step: the measured step of :func:`overhead_twin` (``twin_step_s``)
    less this model's price for the twin's own work (GEMM, memory-bound, all-reduce), never below 0."""
    work = predict_step(overhead_twin(cfg), micro_batch=TWIN_MICRO_BATCH, num_ranks=num_ranks, profile=profile)
    return max(0.0, twin_step_s - work.total_s)


def predict_step(cfg: GPTConfig, *, micro_batch: int, num_ranks: int, profile: CalibrationProfile,
                 overhead_s: float = 0.0, op_gbps: Mapping[str, float] | None = None,
                 attention_call_s: float | None = None) -> StepPrediction:  # fmt: skip
    """Predicted DDP step time of one rank (all ranks do the same work), fp32 on the profiled device; ``overhead_s``
    (:func:`framework_overhead`) is added as it is. ``op_gbps`` maps labels of :data:`MEASURED_OPS` to the rate
    (bytes of :func:`labelled_memory_ops` / seconds) measured for that op at this ``cfg`` and ``micro_batch``'s own
    tensor sizes; those ops are priced at it instead of the copy bandwidth. Labels left out keep the copy price.
    ``attention_call_s`` is one layer's ``scaled_dot_product_attention`` forward + backward measured at this step's
    shapes; given, attention costs it once per layer instead of its GEMMs' price (:data:`ATTENTION_GEMMS`)."""
    if overhead_s < 0:
        raise InputError("overhead_s", f"{overhead_s}; allowed: >= 0")
    if attention_call_s is not None and not (attention_call_s > 0 and math.isfinite(attention_call_s)):
        raise InputError("attention_call_s", f"{attention_call_s} s; allowed: finite, > 0")
    rates = dict(op_gbps or {})
    for label, rate in rates.items():
        if label not in MEASURED_OPS:
            raise InputError("op_gbps", f"unknown op {label!r}; allowed: {', '.join(MEASURED_OPS)}")
        if not rate > 0:
            raise InputError("op_gbps", f"{label}: {rate} GB/s; allowed: > 0")
    gemm_tflops = profile.gemm_curve("fp32")
    gemm_s = 0.0
    flops = 0.0
    for shape, count in step_gemms(cfg, micro_batch):
        flops += shape.flops * count
        if attention_call_s is None or shape.label not in ATTENTION_GEMMS:
            gemm_s += count * shape.flops / (gemm_tflops.at(shape.flops) * 1e12)
    attention_s = 0.0 if attention_call_s is None else cfg.n_layers * attention_call_s
    params = total_params(cfg)
    bw = profile.memory_curve()
    mem_s = 0.0
    mem_bytes = 0.0
    measured_s = 0.0
    for label, size, count in labelled_memory_ops(cfg, micro_batch, params):
        mem_bytes += size * count
        if label in rates:
            measured_s += count * size / (rates[label] * 1e9)
        else:
            mem_s += count * size / (bw.at(size) * 1e9)
    grad_bytes = params * FP32_BYTES
    allreduce_s = 0.0
    if num_ranks > 1:
        curve = profile.collective_curve("all_reduce")
        factor = bus_factor("all_reduce", num_ranks)
        for b in ddp_buckets(grad_bytes):
            algbw = curve.at(b) / factor
            allreduce_s += b / (algbw * 1e9)
    return StepPrediction(gemm_s=gemm_s, memory_s=mem_s + measured_s, allreduce_s=allreduce_s, gemm_flops=flops,
                          memory_bytes=mem_bytes, grad_bytes=grad_bytes, overhead_s=overhead_s,
                          measured_ops_s=measured_s, attention_s=attention_s)  # fmt: skip
