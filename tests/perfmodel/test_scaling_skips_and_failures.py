"""`fmstack scale`: NVLink domains that cannot be built are skipped (not fatal), domains smaller than a node, and
ranking by time to train with failures (as `plan train` does)."""

from __future__ import annotations

import pytest

from fmstack.catalog import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel.plan_failures import CANDIDATES_PER_RESULT, rerank_with_failures
from fmstack.perfmodel.planner import SearchSpace, plan_training
from fmstack.perfmodel.scaling import run_sweep


def test_nvlink_axis_skips_domains_that_do_not_make_whole_ultraservers(catalog: Catalog) -> None:
    """18 GB200 nodes (72 GPUs) form whole domains of 8 (2 nodes) and 72 (18), not of 16 (4) or 32 (8). Before, the
    first such value aborted the whole sweep of the default values 8,16,32,72."""
    result = run_sweep(catalog, catalog.model("llama3.1-8b"), axis="nvlink", values=["8", "16", "32", "72"],
                       instance="p6e-gb200.36xlarge", gpus=72, tokens=1e12, space=SearchSpace())  # fmt: skip
    assert [p.value for p in result.points] == ["8", "72"]
    assert [s.split(":")[0] for s in result.skipped] == ["16", "32"]
    assert (
        "num_nodes(18) must be a multiple of 4 p6e-gb200.36xlarge nodes per 16-GPU NVLink domain" in result.skipped[0]
    )


def test_nvlink_axis_fails_only_when_no_value_can_be_built(catalog: Catalog) -> None:
    with pytest.raises(InputError, match="no value of --axis nvlink could be planned; 16: skipped: num_nodes") as e:
        run_sweep(catalog, catalog.model("llama3.1-8b"), axis="nvlink", values=["16", "32"],
                  instance="p6e-gb200.36xlarge", gpus=72, tokens=1e12, space=SearchSpace())  # fmt: skip
    assert e.value.field == "values"


def test_nvlink_axis_takes_domains_smaller_than_a_node(catalog: Catalog) -> None:
    """A smaller domain is a subset of the search (tp up to the domain) with slower cross-domain traffic: it is
    never faster. 70B on 16 p5 nodes needs tensor parallelism, so the 8-GPU domain is strictly faster than 1."""
    result = run_sweep(catalog, catalog.model("llama3.1-70b"), axis="nvlink", values=["1", "2", "4", "8"],
                       instance="p5.48xlarge", gpus=128, tokens=1e12, space=SearchSpace())  # fmt: skip
    assert [p.value for p in result.points] == ["1", "2", "4", "8"] and not result.skipped
    tps = [p.tokens_per_s for p in result.points]
    assert tps == sorted(tps) and tps[0] < tps[-1]
    with pytest.raises(InputError, match="NVLink domain 3 must be a positive multiple of 8 GPUs per node, or divide "
                       r"it \(1, 2, 4\)"):  # fmt: skip
        run_sweep(catalog, catalog.model("llama3.1-8b"), axis="nvlink", values=["3"], instance="p5.48xlarge",
                  gpus=8, tokens=1e12, space=SearchSpace())  # fmt: skip


def test_time_with_failures_is_plan_trains_ranking_at_each_point(catalog: Catalog) -> None:
    """Before: "unknown objective 'time-with-failures'" at every point. Each point is the best of the best
    CANDIDATES_PER_RESULT by ideal time, re-ranked by expected time with checkpoints and failures."""
    model, space = catalog.model("llama3.1-8b"), SearchSpace(global_batch=512)
    result = run_sweep(catalog, model, axis="nodes", values=["8", "16"], instance="p5.48xlarge", gpus=64,
                       tokens=1e12, objective="time-with-failures", space=space)  # fmt: skip
    assert result.objective == "time-with-failures"
    for point in result.points:
        cluster = build_cluster(catalog, "p5.48xlarge", point.num_nodes)
        plan = plan_training(model, [cluster], tokens=1e12, top=CANDIDATES_PER_RESULT, space=space)
        expected = rerank_with_failures(plan, model, catalog, top=1)
        assert point.time_to_train_s == pytest.approx(expected.time_to_train_s[0])
        assert point.time_to_train_s > point.ideal_time_s == pytest.approx(1e12 / point.tokens_per_s)


def test_time_with_failures_on_a_modified_cluster(catalog: Catalog) -> None:
    # the efa axis plans on a cluster the catalog does not hold; the re-ranking uses that cluster
    result = run_sweep(catalog, catalog.model("llama3.1-8b"), axis="efa", values=["efa-v1", "efa-v4"],
                       instance="p5.48xlarge", gpus=64, tokens=1e12, objective="time-with-failures",
                       space=SearchSpace())  # fmt: skip
    assert [p.scale_out_fabric for p in result.points] == ["efa-v1", "efa-v4"]
    assert all(p.time_to_train_s > p.ideal_time_s for p in result.points)
    with pytest.raises(InputError, match="unknown objective 'fast'; allowed: time, cost, mfu, time-with-failures"):
        run_sweep(catalog, catalog.model("llama3.1-8b"), axis="efa", values=["efa-v1"], instance="p5.48xlarge",
                  gpus=64, tokens=1e12, objective="fast", space=SearchSpace())  # fmt: skip
