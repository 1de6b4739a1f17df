"""Closing the loop (issue 7 acceptance): calibrate on this CPU, predict the reference DDP step, measure it.

The reference workload is the workloads' GPT (fmstack.workloads.gpt) under DDP on 2 gloo processes, 1 thread
each. The prediction must be within 30 % of the measured median step time, on a run that measured a quiet machine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from fmstack.bench.closing_loop import LoopResult

pytest.importorskip("torch")
pytestmark = pytest.mark.torch


NOISY_SPREAD = 1.6
"""Slowest over fastest measured step above which a run saw interference (another tenant of a shared VM): quiet runs
of this job spread 1.35-1.51 (2026-11-23, 2-vCPU VM); one that failed at ratio 0.61 spread 1.85 (146-271 ms)."""


def _disturbed(result: LoopResult) -> bool:
    """The run measured its neighbours: its steps spread more than ``NOISY_SPREAD``, or other processes and steal
    took more than ``BUSY_SHARE_LIMIT`` of the machine during it (``bench.interference``)."""
    steps = result.measurement.step_times_s
    return max(steps) / min(steps) > NOISY_SPREAD or (result.cpu is not None and result.cpu.disturbed)


def test_predicted_step_time_within_30_percent_of_measured() -> None:
    """The 30 % bound holds on a run that measured a quiet machine. A miss on a disturbed run (:func:`_disturbed`)
    is a measurement of interference, not of the model: the job runs again (at most 3 runs) and the bound is judged
    on the quietest run. A miss on a quiet run fails at once."""
    from fmstack.bench.closing_loop import REFERENCE, REFERENCE_MICRO_BATCH, close_loop
    from fmstack.workloads.gpt import flops_per_step

    runs: list[LoopResult] = []
    for _ in range(3):
        runs.append(close_loop(rounds=3, steps_per_round=3))
        if 0.7 <= runs[-1].ratio <= 1.3 or not _disturbed(runs[-1]):
            break

    def quietness(r: LoopResult) -> tuple[bool, float, float]:
        steps = r.measurement.step_times_s
        return _disturbed(r), r.cpu.others_share if r.cpu else 0.0, max(steps) / min(steps)

    result = min(runs, key=quietness)
    pred, meas = result.prediction, result.measurement
    # the prediction counts exactly the workload's model FLOPs (PaLM appendix B) for one rank's micro-batch
    assert pred.gemm_flops == flops_per_step(REFERENCE, global_batch_size=REFERENCE_MICRO_BATCH)
    assert meas.num_ranks == 2 and len(meas.step_times_s) == 9
    assert pred.gemm_s > 0 and pred.memory_s > 0 and pred.allreduce_s > 0
    # the framework overhead, calibrated on the size-negligible twin, is a small part of the step (4-12 ms of 120-330)
    assert 0 < pred.overhead_s < 0.25 * pred.total_s
    # attention is priced from its own forward + backward measurement, once per layer
    assert 0 < result.attention_fwd_s < result.attention_call_s
    assert pred.attention_s == REFERENCE.n_layers * result.attention_call_s
    steps = meas.step_times_s
    assert 0.7 <= result.ratio <= 1.3, (
        f"predicted {pred.total_s * 1e3:.1f} ms (gemm {pred.gemm_s * 1e3:.1f}, memory {pred.memory_s * 1e3:.1f}, "
        f"all-reduce {pred.allreduce_s * 1e3:.1f}, overhead {pred.overhead_s * 1e3:.1f}) vs measured median {meas.median_s * 1e3:.1f} ms "
        f"(steps {[round(t * 1e3, 1) for t in steps]}, spread {max(steps) / min(steps):.2f}, "
        f"{result.cpu.describe() if result.cpu else 'no /proc/stat'}; {len(runs)} run(s): "
        f"ratios {[round(r.ratio, 3) for r in runs]})"
    )


def test_attention_calls_are_the_steps_call_at_its_shapes() -> None:
    """The timed attention is the model's causal call on q, k, v viewed out of the qkv projection's output
    (batch, heads, T, head_dim with the (batch, T, 3 d) strides), and its backward returns the three gradients."""
    import torch
    import torch.nn.functional as F

    from fmstack.bench.closing_loop import REFERENCE, REFERENCE_MICRO_BATCH, _attention_calls

    fwd, fwd_bwd = _attention_calls(REFERENCE, REFERENCE_MICRO_BATCH)
    out = fwd()
    assert isinstance(out, torch.Tensor) and out.shape == (8, 4, 64, 64)
    grads = fwd_bwd()
    assert isinstance(grads, tuple) and [g.shape for g in grads] == [out.shape] * 3
    # against the unfused definition: causal softmax(Q K^T / sqrt(head_dim)) V, inputs rebuilt with the same seed
    g = torch.Generator().manual_seed(0)
    qkv = torch.randn(8, 64, 3 * 256, generator=g)
    q, k, v = (qkv[:, :, i * 256 : (i + 1) * 256].view(8, 64, 4, 64).transpose(1, 2) for i in range(3))
    assert q.stride() == (64 * 768, 64, 768, 1)
    mask = torch.ones(64, 64, dtype=torch.bool).tril()
    ref = F.softmax((q @ k.transpose(-1, -2) / 8.0).masked_fill(~mask, float("-inf")), -1) @ v
    assert torch.allclose(out, ref, atol=1e-5)
