"""Re-rank a plan by the wall-clock time to train *including* checkpoints and failures.

The vectorised search ranks by ideal time; the best few are then run through the resilience model
(checkpoint size and write time, Young/Daly interval, failures at the job's scale, restart and
replacement times; `resilience.py`) and re-sorted by their expected time to train. A configuration that
is slightly slower per step but checkpoints faster (smaller shards per writer, fewer nodes) can win.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from fmstack.catalog.loader import Catalog
from fmstack.catalog.schema import ModelArch
from fmstack.catalog.topology import Cluster, build_cluster
from fmstack.perfmodel.failures import FailureModel, load_failure_model
from fmstack.perfmodel.planner import OBJECTIVES, PlanResult
from fmstack.perfmodel.resilience import plan_resilience
from fmstack.perfmodel.training import TrainingEstimate

TRAIN_OBJECTIVES = (*OBJECTIVES, "time-with-failures")
"""What ``plan train`` and ``scale`` rank by: the planner's objectives, and time to train with failures (re-ranked
here)."""
CANDIDATES_PER_RESULT = 5
"""Candidates by ideal time searched per configuration wanted (``plan train --top 10`` re-ranks the best 50)."""


def rerank_with_failures(
    result: PlanResult,
    model: ModelArch,
    catalog: Catalog,
    *,
    top: int,
    failure_model: FailureModel | None = None,
    cluster_for: Callable[[TrainingEstimate], Cluster] | None = None,
    **resilience_kwargs: Any,
) -> PlanResult:
    """The plan's candidates ranked by time to train with failures; ``resilience`` holds each one's JSON.

    ``cluster_for``: the cluster a candidate was planned on (default: rebuilt from the catalog by its instance
    name; a sweep that modified its cluster, such as ``scale --axis efa``, passes that cluster)."""
    assert result.tokens is not None
    fm = failure_model or load_failure_model()
    rows = []
    nodes = result.num_nodes or [0] * len(result.ranked)
    hourly = result.cost_per_hour_usd or [None] * len(result.ranked)
    folded = result.vpp_variants or [1] * len(result.ranked)
    for est, ideal_s, cost, n, h, v in zip(
        result.ranked, result.time_to_train_s, result.cost_usd, nodes, hourly, folded, strict=True
    ):
        assert ideal_s is not None
        if cluster_for is not None:
            cluster = cluster_for(est)
        else:
            cluster = build_cluster(catalog, est.instance, est.num_gpus // _gpus_per_node(catalog, est.instance))
        plan = plan_resilience(
            model=model, cluster=cluster, catalog=catalog, step_time_s=est.step_time_s, train_time_s=ideal_s,
            tokens_per_s=est.tokens_per_s, failure_model=fm, **resilience_kwargs,
        )  # fmt: skip
        data = plan.to_json()
        scale = data["time_to_train_s"] / ideal_s
        rows.append((data["time_to_train_s"], est, data, None if cost is None else cost * scale, n, h, v))
    rows.sort(key=lambda r: r[0])
    rows = rows[:top]
    return replace(
        result,
        objective="time-with-failures",
        ranked=[r[1] for r in rows],
        time_to_train_s=[r[0] for r in rows],
        cost_usd=[r[3] for r in rows],
        resilience=[r[2] for r in rows],
        num_nodes=[r[4] for r in rows] if result.num_nodes else [],
        cost_per_hour_usd=[r[5] for r in rows] if result.cost_per_hour_usd else [],
        vpp_variants=[r[6] for r in rows] if result.vpp_variants else [],
    )


def _gpus_per_node(catalog: Catalog, instance: str) -> int:
    from fmstack.catalog.topology import resolve_instance

    return resolve_instance(catalog, instance).num_gpus
