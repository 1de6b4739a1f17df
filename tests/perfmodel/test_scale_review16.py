"""Session 16 review of `fmstack scale`: the GPU-generation axis compares each kind at the precisions it supports."""

from __future__ import annotations

import pytest

from fmstack.catalog import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel.planner import SearchSpace, plan_training
from fmstack.perfmodel.scaling import run_sweep


def test_allowed_precisions_are_filtered_per_gpu(catalog: Catalog) -> None:
    """--precision bf16,fp8 allows both: the A100 (no FP8 peak in its datasheet) is searched in bf16, the H100 in
    both; the planner refused the whole search ("A100-40GB has no 'fp8' peak")."""
    model = catalog.model("llama3.1-8b")
    a100, h100 = build_cluster(catalog, "p4d.24xlarge", 8), build_cluster(catalog, "p5.48xlarge", 8)
    space = SearchSpace(precisions=("bf16", "fp8"), global_batch=512)
    mixed = plan_training(model, [a100, h100], tokens=1e12, space=space)
    assert (mixed.best.instance, mixed.best.config.precision) == ("p5.48xlarge", "fp8")
    # the A100 at bf16,fp8 is the A100 at bf16: the same best row
    alone = plan_training(model, [a100], tokens=1e12, space=space).best
    bf16 = plan_training(model, [a100], tokens=1e12, space=SearchSpace(global_batch=512)).best
    assert alone.config == bf16.config and alone.step_time_s == bf16.step_time_s
    # a GPU with none of the precisions allowed is still an error naming what it has
    with pytest.raises(InputError, match="A100-40GB has no 'fp8' peak; allowed: bf16"):
        plan_training(model, [a100], tokens=1e12, space=SearchSpace(precisions=("fp8",)))


def test_gpu_axis_runs_each_kind_at_a_precision_it_supports(catalog: Catalog) -> None:
    """scale --axis gpu over p4d and p5 with --precision bf16,fp8: p4d in bf16, p5 in fp8 (faster); with fp8 only,
    p4d is skipped with the reason and p5 still planned."""
    model = catalog.model("llama3.1-8b")
    kinds = ["p4d.24xlarge", "p5.48xlarge"]
    both = run_sweep(catalog, model, axis="gpu", values=kinds, instance="p5.48xlarge", gpus=64, tokens=1e12,
                     space=SearchSpace(precisions=("bf16", "fp8")))  # fmt: skip
    assert [p.value for p in both.points] == kinds
    assert " bf16 " in both.points[0].config and " fp8 " in both.points[1].config
    fp8 = run_sweep(catalog, model, axis="gpu", values=kinds, instance="p5.48xlarge", gpus=64, tokens=1e12,
                    space=SearchSpace(precisions=("fp8",)))  # fmt: skip
    assert [p.value for p in fp8.points] == ["p5.48xlarge"]
    assert fp8.skipped == ["p4d.24xlarge: skipped: A100-40GB has no 'fp8' peak; allowed: bf16, fp16, tf32, fp32"]


def test_each_point_says_what_communication_takes_when_compute_is_the_bottleneck(catalog: Catalog) -> None:
    """Llama 3.1 8B from 8 to 512 p5 nodes at 256 sequences: the 512-node point's strong-scaling efficiency is 0.42
    while its bottleneck column says "GEMM compute: 38 %"; the point now carries the exposed communication per link,
    the bubble and the overlap slowdown, which are the step's own parts (estimate train's breakdown)."""
    from fmstack.perfmodel.scaling import comm_line

    model = catalog.model("llama3.1-8b")
    result = run_sweep(catalog, model, axis="nodes", values=["8", "512"], instance="p5.48xlarge", gpus=64,
                       tokens=1e12, space=SearchSpace(global_batch=256))  # fmt: skip
    first, last = result.points
    assert last.scaling_efficiency < 0.5 and last.bottleneck.startswith("GEMM compute")
    best = plan_training(model, [build_cluster(catalog, "p5.48xlarge", 512)], tokens=1e12,
                         space=SearchSpace(global_batch=256)).best  # fmt: skip
    assert last.exposed_comm_s == {k: t.exposed_s for k, t in best.comm.items() if t.exposed_s > 0}
    assert last.bubble_s == best.parts_s["bubble"] and last.overlap_slowdown_s == best.parts_s["overlap"]
    step = last.step_time_s
    exposed = sum(last.exposed_comm_s.values())
    assert sum(best.parts_s[k] for k in last.exposed_comm_s) == exposed  # the step's own additive parts
    line = comm_line(last)
    assert line.startswith(f"512: communication exposed after overlap {100 * exposed / step:.0f} % of the step (dp ")
    assert f"pipeline bubble {100 * last.bubble_s / step:.0f} %" in line
    # below a tenth of the step nothing is said (the 8-node point hides its communication behind compute)
    assert (sum(first.exposed_comm_s.values()) + first.bubble_s + first.overlap_slowdown_s) < 0.1 * first.step_time_s
    assert comm_line(first) == ""
