"""`fmstack scale`: sweep one axis, re-plan at every point, and show where scaling bends and why.

Axes: nodes (strong scaling: fixed global batch; weak scaling: batch grows with the GPUs), gpu (instance
generations), efa (scale-out fabric generation), nvlink (NVLink domain size), seq-len. Each point is the
planner's best configuration for the objective, so the curve reflects what a user would actually run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fmstack.catalog.loader import Catalog
from fmstack.catalog.schema import ModelArch
from fmstack.catalog.topology import Cluster, build_cluster, resolve_instance
from fmstack.errors import InputError
from fmstack.perfmodel.config import describe_config
from fmstack.perfmodel.planner import PlanResult, SearchSpace, plan_training

AXES = ("nodes", "gpu", "efa", "nvlink", "seq-len")
GPU_GENERATIONS = ("p5.48xlarge", "p5en.48xlarge", "p6-b200.48xlarge", "p6-b300.48xlarge", "u-p6e-gb200x72")
EFA_GENERATIONS = ("efa-v1", "efa-v2", "efa-v3", "efa-v4")


@dataclass(frozen=True, kw_only=True, slots=True)
class ScalePoint:
    """One point of a sweep: the value of the axis and the best plan there."""

    value: str
    num_gpus: int
    step_time_s: float
    mfu: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    time_to_train_s: float
    cost_usd: float | None
    bottleneck: str
    config: str
    scaling_efficiency: float
    """tokens/s per GPU relative to the first point (1.0 = linear)."""


def _cluster_with(catalog: Catalog, instance: str, num_gpus: int, **changes: object) -> Cluster:
    inst = resolve_instance(catalog, instance)
    if num_gpus % inst.num_gpus:
        raise InputError("gpus", f"{num_gpus} is not a multiple of {inst.num_gpus} GPUs per {inst.name} node")
    cluster = build_cluster(catalog, instance, num_gpus // inst.num_gpus)
    if not changes:
        return cluster
    new_inst = cluster.instance.model_copy(update=changes)
    scale_out = catalog.fabric(str(changes["network"])) if "network" in changes else cluster.scale_out
    return Cluster(
        instance=new_inst, gpu=cluster.gpu, scale_up=cluster.scale_up, scale_out=scale_out,
        num_nodes=cluster.num_nodes, name=f"{instance} ({', '.join(f'{k}={v}' for k, v in changes.items())})",
    )  # fmt: skip


def sweep(
    catalog: Catalog,
    model: ModelArch,
    *,
    axis: str,
    values: Sequence[str],
    instance: str,
    gpus: int,
    tokens: float,
    objective: str = "time",
    space: SearchSpace,
    weak: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> list[ScalePoint]:
    """Re-plan at each value of ``axis``; everything else stays as given."""
    if axis not in AXES:
        raise InputError("axis", f"unknown axis {axis!r}; allowed: {', '.join(AXES)}")
    if not values:
        raise InputError("values", "give at least one value")
    points: list[ScalePoint] = []
    base_per_gpu: float | None = None
    for i, value in enumerate(values):
        point_space = space
        n = gpus
        if axis == "nodes":
            inst = resolve_instance(catalog, instance)
            n = int(value) * inst.num_gpus
            if weak and space.global_batch is not None:
                point_space = _with(space, global_batch=max(1, space.global_batch * n // gpus))
            cluster = _cluster_with(catalog, instance, n)
        elif axis == "gpu":
            cluster = _cluster_with(catalog, value, gpus)
        elif axis == "efa":
            cluster = _cluster_with(catalog, instance, gpus, network=value)
        elif axis == "nvlink":
            domain = int(value)
            inst = resolve_instance(catalog, instance)
            if domain % inst.num_gpus:
                raise InputError(
                    "values", f"NVLink domain {domain} must be a multiple of {inst.num_gpus} GPUs per node"
                )
            cluster = _cluster_with(catalog, instance, gpus, nvlink_domain_gpus=domain)
        else:
            point_space = _with(space, seq_len=int(value))
            cluster = _cluster_with(catalog, instance, gpus)
        result: PlanResult = plan_training(
            model, [cluster], tokens=tokens, objective=objective, top=1, space=point_space
        )
        best = result.best
        per_gpu = best.tokens_per_s_per_gpu
        base_per_gpu = base_per_gpu or per_gpu
        points.append(
            ScalePoint(
                value=str(value), num_gpus=cluster.num_gpus, step_time_s=best.step_time_s, mfu=best.mfu,
                tokens_per_s=best.tokens_per_s, tokens_per_s_per_gpu=per_gpu,
                time_to_train_s=result.time_to_train_s[0] or 0.0, cost_usd=result.cost_usd[0],
                bottleneck=best.bottleneck, config=describe_config(best.config), scaling_efficiency=per_gpu / base_per_gpu,
            )
        )  # fmt: skip
        if progress:
            progress(i + 1, len(values))
    return points


def _with(space: SearchSpace, **changes: object) -> SearchSpace:
    from dataclasses import replace

    return replace(space, **changes)  # type: ignore[arg-type]
