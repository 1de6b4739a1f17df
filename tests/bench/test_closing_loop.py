"""Closing the loop (issue 7 acceptance): calibrate on this CPU, predict the reference DDP step, measure it.

The reference workload is the workloads' GPT (fmstack.workloads.gpt) under DDP on 2 gloo processes, 1 thread
each. The prediction must be within 30 % of the measured median step time, on a run that measured a quiet machine.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.torch


NOISY_SPREAD = 1.6
"""Slowest over fastest measured step above which a run saw interference (another tenant of a shared VM): quiet runs
of this job spread 1.35-1.51 (2026-11-23, 2-vCPU VM); one that failed at ratio 0.61 spread 1.85 (146-271 ms)."""


def test_predicted_step_time_within_30_percent_of_measured() -> None:
    """The 30 % bound holds on a run that measured a quiet machine. A miss on a run whose own steps spread more than
    ``NOISY_SPREAD`` is a measurement of interference, not of the model: the job runs again (at most 3 runs) and
    the bound is judged on the most consistent run. A miss on a quiet run fails at once."""
    from fmstack.bench.closing_loop import REFERENCE, REFERENCE_MICRO_BATCH, close_loop
    from fmstack.workloads.gpt import flops_per_step

    runs = []
    for _ in range(3):
        result = close_loop(rounds=3, steps_per_round=3)
        steps = result.measurement.step_times_s
        runs.append((max(steps) / min(steps), result))
        if 0.7 <= result.ratio <= 1.3 or runs[-1][0] <= NOISY_SPREAD:
            break
    spread, result = min(runs, key=lambda r: r[0])
    pred, meas = result.prediction, result.measurement
    # the prediction counts exactly the workload's model FLOPs (PaLM appendix B) for one rank's micro-batch
    assert pred.gemm_flops == flops_per_step(REFERENCE, global_batch_size=REFERENCE_MICRO_BATCH)
    assert meas.num_ranks == 2 and len(meas.step_times_s) == 9
    assert pred.gemm_s > 0 and pred.memory_s > 0 and pred.allreduce_s > 0
    assert 0.7 <= result.ratio <= 1.3, (
        f"predicted {pred.total_s * 1e3:.1f} ms (gemm {pred.gemm_s * 1e3:.1f}, memory {pred.memory_s * 1e3:.1f}, "
        f"all-reduce {pred.allreduce_s * 1e3:.1f}) vs measured median {meas.median_s * 1e3:.1f} ms "
        f"(steps {[round(t * 1e3, 1) for t in meas.step_times_s]}, spread {spread:.2f}, {len(runs)} run(s): "
        f"ratios {[round(r.ratio, 3) for _, r in runs]})"
    )
