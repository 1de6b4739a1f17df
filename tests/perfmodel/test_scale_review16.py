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
