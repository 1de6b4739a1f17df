"""Closing the loop (issue 7 acceptance): calibrate on this CPU, predict the reference DDP step, measure it.

The reference workload is the workloads' GPT (fmstack.workloads.gpt) under DDP on 2 gloo processes, 1 thread
each. The prediction must be within 30 % of the measured median step time.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.torch


def test_predicted_step_time_within_30_percent_of_measured() -> None:
    from fmstack.bench.closing_loop import REFERENCE, REFERENCE_MICRO_BATCH, close_loop
    from fmstack.workloads.gpt import flops_per_step

    result = close_loop(rounds=3, steps_per_round=3)
    pred, meas = result.prediction, result.measurement
    # the prediction counts exactly the workload's model FLOPs (PaLM appendix B) for one rank's micro-batch
    assert pred.gemm_flops == flops_per_step(REFERENCE, global_batch_size=REFERENCE_MICRO_BATCH)
    assert meas.num_ranks == 2 and len(meas.step_times_s) == 9
    assert pred.gemm_s > 0 and pred.memory_s > 0 and pred.allreduce_s > 0
    assert 0.7 <= result.ratio <= 1.3, (
        f"predicted {pred.total_s * 1e3:.1f} ms (gemm {pred.gemm_s * 1e3:.1f}, memory {pred.memory_s * 1e3:.1f}, "
        f"all-reduce {pred.allreduce_s * 1e3:.1f}) vs measured median {meas.median_s * 1e3:.1f} ms "
        f"(steps {[round(t * 1e3, 1) for t in meas.step_times_s]})"
    )
