"""`fmstack scale`: sweep one axis, re-plan at every point, and show where scaling bends and why.

Axes: nodes (strong scaling: fixed global batch; weak scaling: batch grows with the GPUs), gpu (instance
generations), efa (scale-out fabric generation, with that generation's per-node bandwidth and latency),
nvlink (NVLink domain size: a multiple of the node, or a divisor of it, whose cross-domain traffic goes over the
scale-out tier), seq-len. Each point is the planner's best configuration for the objective (time-with-failures:
the best few by ideal time re-ranked with checkpoints and failures, as ``plan train`` does), so the curve
reflects what a user would actually run. A value the cluster cannot take (a node count or NVLink domain that does
not make whole UltraServers) is skipped with its reason; the sweep fails only when no value can be planned.

The global batch is held at the reference (``--global-batch``, or the first point's default of about 4M
tokens) on every hardware axis, so the ratio between points is like for like. A point that cannot run at
that batch (fewer sequences than dp x micro-batch for every shape that fits) is re-planned at the planner's
default batch and says so (``global_batch_changed``, ``efficiency_kind`` "batch-changed"): its ratio is a
per-GPU throughput ratio, not a strong-scaling efficiency.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from fmstack.catalog.loader import Catalog
from fmstack.catalog.schema import Instance, ModelArch
from fmstack.catalog.topology import Cluster, build_cluster, nvlink_fabric, resolve_instance
from fmstack.errors import InputError
from fmstack.perfmodel.config import describe_config
from fmstack.perfmodel.plan_failures import CANDIDATES_PER_RESULT, TRAIN_OBJECTIVES, rerank_with_failures
from fmstack.perfmodel.planner import PlanResult, SearchSpace, plan_training
from fmstack.perfmodel.training import TrainingEstimate

AXES = ("nodes", "gpu", "efa", "nvlink", "seq-len")
GPU_GENERATIONS = ("p5.48xlarge", "p5en.48xlarge", "p6-b200.48xlarge", "p6-b300.48xlarge", "u-p6e-gb200x72")
EFA_GENERATIONS = ("efa-v1", "efa-v2", "efa-v3", "efa-v4")
EFFICIENCY_KINDS = ("strong", "weak", "relative", "batch-changed")
"""strong: nodes axis at the reference global batch; weak: nodes axis with the batch grown with the GPUs;
relative: other axes, tokens/s per GPU vs the first point at the same batch; batch-changed: the point ran at
another global batch, so its ratio is a per-GPU throughput ratio only."""


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
    """With objective time-with-failures: the expected wall-clock time with checkpoints and failures; else ideal."""
    ideal_time_s: float
    """Tokens / tokens per second: the time to train without failures or checkpoints."""
    cost_usd: float | None
    bottleneck: str
    config: str
    scaling_efficiency: float
    """tokens/s per GPU relative to the first point (1.0 = linear); what it means: ``efficiency_kind``."""
    efficiency_kind: str
    num_nodes: int
    global_batch: int
    """Sequences per step of the best configuration at this point."""
    global_batch_tokens: int
    global_batch_changed: bool
    """True when this point ran at another global batch than the sweep's reference (the first point's)."""
    scale_out_fabric: str
    network_bw_gbps_per_node: float
    """Scale-out bandwidth per node this point was modelled with, GB/s."""
    network_latency_us: float
    """Per-step scale-out latency (NCCL Simple protocol) this point was modelled with."""
    note: str = ""
    """What was adjusted at this point (node count rounded, batch changed, bandwidth kept), or ""."""
    exposed_comm_s: dict[str, float] = field(default_factory=dict)
    """Communication left after overlap per parallelism (tp, cp, ep, pp, dp), seconds per step: where strong scaling
    goes while the bottleneck (the largest single part) is still "GEMM compute: 38 %" (Llama 3.1 8B, 512 nodes)."""
    bubble_s: float = 0.0
    """The pipeline bubble per step (it grows as a fixed batch spreads over more replicas)."""
    overlap_slowdown_s: float = 0.0
    """Compute slowed by the communication overlapped with it, per step (``parts_s["overlap"]``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SweepResult:
    """The points that were planned, and one line per value that could not be (skipped, not fatal)."""

    points: list[ScalePoint]
    skipped: list[str] = field(default_factory=list)
    reference_global_batch: int | None = None
    """The global batch (sequences) every point was asked to run at (weak scaling: at the first point)."""
    objective: str = "time"


COMM_NOTE_FRACTION = 0.10
"""A point whose exposed communication, bubble and overlap slowdown reach this share of its step gets a line saying
how they split (``comm_line``): a display threshold, not a model parameter."""


def comm_line(p: ScalePoint) -> str:
    """Where the step goes besides compute at ``p``, or "" below :data:`COMM_NOTE_FRACTION`: "512: communication
    exposed after overlap 35 % of the step (dp 17 %, pp 9 %, tp 7 %, cp 2 %), pipeline bubble 6 %, compute slowed by
    overlapped communication 7 %"."""
    exposed = sum(p.exposed_comm_s.values())
    if exposed + p.bubble_s + p.overlap_slowdown_s < COMM_NOTE_FRACTION * p.step_time_s:
        return ""

    def share(t: float) -> str:
        return f"{100 * t / p.step_time_s:.0f} %"

    links = ", ".join(f"{k} {share(t)}" for k, t in sorted(p.exposed_comm_s.items(), key=lambda kv: -kv[1]))
    if exposed >= 0.005 * p.step_time_s:
        parts = [f"communication exposed after overlap {share(exposed)} of the step ({links})"]
    else:
        parts = ["communication hidden behind compute"]
    if p.bubble_s > 0:
        parts.append(f"pipeline bubble {share(p.bubble_s)}")
    if p.overlap_slowdown_s > 0:
        parts.append(f"compute slowed by overlapped communication {share(p.overlap_slowdown_s)}")
    return f"{p.value}: " + ", ".join(parts)


def round_to_valid_nodes(inst: Instance, num_gpus: int, *, whole_domains: bool = True) -> tuple[int, str]:
    """The node count nearest to ``num_gpus`` GPUs that ``inst`` can form, and a note when it had to round.

    Nodes are whole instances; UltraServer nodes (``inst.ultraserver`` set) come in whole NVLink domains
    (18 p6e-gb200.36xlarge per u-p6e-gb200x72), except that a job named by the instance rather than the
    UltraServer (``whole_domains`` False) may use part of one domain (the rule of ``Cluster``). Ties round
    down (no more GPUs than asked).
    """
    per_domain = max(1, inst.nvlink_domain_gpus // inst.num_gpus) if inst.ultraserver else 1
    if not whole_domains and num_gpus < per_domain * inst.num_gpus:
        per_domain = 1
    step_gpus = per_domain * inst.num_gpus
    lo = num_gpus // step_gpus * step_gpus
    hi = lo + step_gpus
    chosen = hi if lo == 0 or hi - num_gpus < num_gpus - lo else lo
    nodes = chosen // inst.num_gpus
    if chosen == num_gpus:
        return nodes, ""
    unit = f"whole {per_domain}-node NVLink domains" if per_domain > 1 else f"whole {inst.num_gpus}-GPU nodes"
    return nodes, f"{num_gpus} GPUs rounded to {chosen} ({nodes} nodes): {inst.ultraserver or inst.name} needs {unit}"


def _cluster(catalog: Catalog, instance: str, num_gpus: int) -> Cluster:
    inst = resolve_instance(catalog, instance)
    if num_gpus % inst.num_gpus:
        raise InputError("gpus", f"{num_gpus} is not a multiple of {inst.num_gpus} GPUs per {inst.name} node")
    return build_cluster(catalog, instance, num_gpus // inst.num_gpus)


def _modified(cluster: Cluster, catalog: Catalog, **changes: object) -> Cluster:
    new_inst = cluster.instance.model_copy(update=changes)
    scale_out = catalog.fabric(str(changes["network"])) if "network" in changes else cluster.scale_out
    label = ", ".join(f"{k}={v}" for k, v in changes.items())
    return replace(cluster, instance=new_inst, scale_out=scale_out, name=f"{cluster.name} ({label})")


def _with_fabric(catalog: Catalog, cluster: Cluster, fabric_name: str) -> tuple[Cluster, str]:
    """The cluster with its scale-out fabric swapped, at that generation's per-node bandwidth."""
    fabric = catalog.fabric(fabric_name)
    if fabric.scope != "scale-out":
        raise InputError("values", f"{fabric.name} is a {fabric.scope} fabric; --axis efa takes scale-out fabrics")
    inst = cluster.instance
    if fabric.name == inst.network:
        return _modified(cluster, catalog, network=fabric.name), ""
    per_gpu = fabric.node_bw_gbps_per_gpu
    if per_gpu is None:
        note = f"{fabric.name} gives no per-node bandwidth: kept {inst.name}'s {inst.network_bw_gbps:g} GB/s"
        return _modified(cluster, catalog, network=fabric.name), note
    bw = per_gpu * inst.num_gpus
    return _modified(cluster, catalog, network=fabric.name, network_bw_gbps=bw), ""


def _point_cluster(
    catalog: Catalog, axis: str, value: str, instance: str, gpus: int
) -> tuple[Cluster, str, int | None]:
    """The cluster of one sweep value, a note on what was adjusted, and the sequence length (seq-len axis)."""
    if axis == "nodes":
        try:
            nodes = int(value)
        except ValueError:
            raise InputError("values", f"{value!r} is not a node count") from None
        return _cluster(catalog, instance, nodes * resolve_instance(catalog, instance).num_gpus), "", None
    if axis == "gpu":
        inst = resolve_instance(catalog, value)
        whole = inst.ultraserver is not None and inst.ultraserver.lower() == value.lower()
        nodes, note = round_to_valid_nodes(inst, gpus, whole_domains=whole)
        return build_cluster(catalog, value, nodes), note, None
    base = _cluster(catalog, instance, gpus)
    if axis == "efa":
        cluster, note = _with_fabric(catalog, base, value)
        return cluster, note, None
    if axis == "nvlink":
        try:
            domain = int(value)
        except ValueError:
            raise InputError("values", f"{value!r} is not an NVLink domain size (GPUs)") from None
        return _with_domain(catalog, base, domain), "", None
    try:
        seq_len = int(value)
    except ValueError:
        raise InputError("values", f"{value!r} is not a sequence length") from None
    if seq_len <= 0:  # a malformed value, not a point the planner could not fit ("0: skipped: must be > 0, got 0")
        raise InputError("values", f"sequence length {value!r} must be a positive number of tokens")
    return base, "", seq_len


def _with_domain(catalog: Catalog, cluster: Cluster, domain: int) -> Cluster:
    """The cluster with NVLink domains of ``domain`` GPUs: a multiple of the node, or a divisor of it (the GPUs of
    a node outside one domain then talk over the scale-out tier, ``catalog.topology``). Raises InputError field
    "nodes" when the nodes do not make whole domains of an UltraServer instance (the sweep skips that value)."""
    inst, per_node = cluster.instance, cluster.instance.num_gpus
    if domain < 1 or (domain % per_node and per_node % domain):
        divisors = ", ".join(str(d) for d in range(1, per_node) if per_node % d == 0)
        raise InputError(
            "values",
            f"NVLink domain {domain} must be a positive multiple of {per_node} GPUs per node"
            + (f", or divide it ({divisors})" if divisors else ""),
        )
    new_inst = inst.model_copy(update={"nvlink_domain_gpus": domain})
    scale_up = nvlink_fabric(catalog, new_inst, cluster.gpu)
    if domain > 1 and scale_up is None:
        raise InputError("values", f"{cluster.gpu.name} has no NVLink generation: its NVLink domain is 1 GPU")
    return replace(cluster, instance=new_inst, scale_up=scale_up, name=f"{cluster.name} (nvlink_domain_gpus={domain})")


def _plan(
    model: ModelArch,
    cluster: Cluster,
    tokens: float,
    objective: str,
    space: SearchSpace,
    batch: int | None,
    top: int = 1,
) -> tuple[PlanResult, bool]:
    """The best ``top`` plans at ``batch`` sequences; if none fits there, at the planner's default (True = fell
    back)."""
    if batch is None:
        return plan_training(model, [cluster], tokens=tokens, objective=objective, top=top, space=space), False
    first_error: InputError | None = None
    for global_batch, fell_back in ((batch, False), (None, True)):
        try:
            point = replace(space, global_batch=global_batch)
            return plan_training(model, [cluster], tokens=tokens, objective=objective, top=top, space=point), fell_back
        except InputError as e:
            if e.field != "model" and not _no_shape(e):
                raise
            first_error = first_error or e
    assert first_error is not None
    raise first_error  # the reason at the batch asked for, not at the fallback's


def _no_shape(e: InputError) -> bool:
    """The planner found no layout with a valid shape at the point's batch (session 20: field ``global_batch``, was
    ``model``), as opposed to a batch refused as bad input."""
    return e.field == "global_batch" and "has a valid shape" in e.message


def _always(cluster: Cluster) -> Callable[[TrainingEstimate], Cluster]:
    """A ``cluster_for`` that gives every candidate the sweep point's (modified) cluster."""
    return lambda _est: cluster


def _target_batch(axis: str, weak: bool, ref_batch: int, ref_gpus: int, num_gpus: int) -> int:
    """The global batch a point is asked to run at.

    Strong scaling (nodes axis): the reference batch. Weak scaling: grown with the GPUs. Other axes compare
    tokens/s per GPU at the same GPU count; where a kind's count had to be rounded (a GB200 UltraServer holds
    72 GPUs) the batch keeps the reference's sequences per GPU, so the per-GPU comparison stays like for like.
    """
    if num_gpus == ref_gpus or (axis == "nodes" and not weak):
        return ref_batch
    if axis == "nodes":
        return max(1, ref_batch * num_gpus // ref_gpus)
    return max(1, round(ref_batch * num_gpus / ref_gpus))


def run_sweep(
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
) -> SweepResult:
    """Re-plan at each value of ``axis``; everything else, the global batch included, stays as given.

    A value whose cluster cannot be built (nodes or an NVLink domain that do not make whole UltraServers) or
    planned (no configuration fits, no price for a cost objective) is skipped with a one-line reason; the sweep
    fails only when no value can be planned. Bad values (unknown instance or fabric, a malformed number) are
    input errors. ``objective`` time-with-failures re-ranks each point's best few by ideal time with
    checkpoints and failures (``plan_failures.rerank_with_failures``).
    """
    if axis not in AXES:
        raise InputError("axis", f"unknown axis {axis!r}; allowed: {', '.join(AXES)}")
    if objective not in TRAIN_OBJECTIVES:
        raise InputError("objective", f"unknown objective {objective!r}; allowed: {', '.join(TRAIN_OBJECTIVES)}")
    with_failures = objective == "time-with-failures"
    if not values:
        raise InputError("values", "give at least one value")
    if weak and axis != "nodes":
        raise InputError("weak", f"weak scaling grows the batch with the nodes; it needs --axis nodes, not {axis}")
    points: list[ScalePoint] = []
    skipped: list[str] = []
    ref_batch = space.global_batch  # sequences at ref_gpus
    ref_gpus = gpus
    ref_tokens: int | None = None  # tokens per step of the first point (seq-len axis compares these)
    base_per_gpu: float | None = None
    for i, value in enumerate(values):
        try:
            cluster, note, seq_len = _point_cluster(catalog, axis, value, instance, gpus)
        except InputError as e:
            if not (axis in ("nodes", "nvlink") and e.field == "nodes" and "must be a multiple" in e.message):
                raise
            skipped.append(f"{value}: skipped: {e.message}")  # not whole UltraServers; other values may be
            if progress:
                progress(i + 1, len(values))
            continue
        point_space = space if seq_len is None else replace(space, seq_len=seq_len)
        target: int | None = None
        if axis != "seq-len" and ref_batch is not None:
            target = _target_batch(axis, weak, ref_batch, ref_gpus, cluster.num_gpus)
        try:
            if with_failures:
                result, fell_back = _plan(model, cluster, tokens, "time", point_space, target, CANDIDATES_PER_RESULT)
                result = rerank_with_failures(result, model, catalog, top=1, cluster_for=_always(cluster))
            else:
                result, fell_back = _plan(model, cluster, tokens, objective, point_space, target)
        except InputError as e:
            # a sequence length past the model's context is one point of a seq-len sweep, not a bad sweep; so is a
            # GPU kind with none of the precisions allowed (--precision fp8 over p4d's A100)
            if (
                e.field not in ("model", "objective")
                and not _no_shape(e)
                and not ((axis == "seq-len" and e.field == "seq_len") or (axis == "gpu" and e.field == "precision"))
            ):
                raise
            skipped.append(f"{value}: skipped: {e.message.split('; try ')[0]}")
            if progress:
                progress(i + 1, len(values))
            continue
        best = result.best
        gb = best.config.global_batch
        gb_tokens = gb * best.config.seq_len
        if ref_batch is None and axis != "seq-len":
            ref_batch, ref_gpus = gb, cluster.num_gpus  # the first point's default batch is the reference
            target = gb
        if ref_tokens is None:
            ref_tokens = gb_tokens
        if axis == "seq-len":
            changed = gb_tokens != ref_tokens
            text = f"global batch {gb_tokens:,} tokens per step instead of {ref_tokens:,}" if changed else ""
        else:
            changed = fell_back
            if fell_back:
                text = f"global batch gb{gb} instead of gb{target} (no configuration fits at gb{target})"
            elif gb != ref_batch and not weak:
                text = f"gb{gb}: the sequences per GPU of gb{ref_batch} on {ref_gpus} GPUs"
            else:
                text = ""
        note = "; ".join(n for n in (note, text) if n)
        kind = "batch-changed" if changed else (("weak" if weak else "strong") if axis == "nodes" else "relative")
        per_gpu = best.tokens_per_s_per_gpu
        base_per_gpu = base_per_gpu or per_gpu
        points.append(
            ScalePoint(
                value=str(value), num_gpus=cluster.num_gpus, step_time_s=best.step_time_s, mfu=best.mfu,
                tokens_per_s=best.tokens_per_s, tokens_per_s_per_gpu=per_gpu,
                time_to_train_s=result.time_to_train_s[0] or 0.0, ideal_time_s=tokens / best.tokens_per_s,
                cost_usd=result.cost_usd[0],
                bottleneck=best.bottleneck, config=describe_config(best.config), scaling_efficiency=per_gpu / base_per_gpu,
                efficiency_kind=kind, num_nodes=cluster.num_nodes, global_batch=gb, global_batch_tokens=gb_tokens,
                global_batch_changed=changed, scale_out_fabric=cluster.scale_out.name,
                network_bw_gbps_per_node=cluster.instance.network_bw_gbps,
                network_latency_us=cluster.scale_out.latency_us, note=note,
                exposed_comm_s={k: t.exposed_s for k, t in best.comm.items() if t.exposed_s > 0},
                bubble_s=best.bubble_s, overlap_slowdown_s=best.parts_s.get("overlap", 0.0),
            )
        )  # fmt: skip
        if progress:
            progress(i + 1, len(values))
    if not points:
        more = f" (and {len(skipped) - 1} more)" if len(skipped) > 1 else ""
        raise InputError("values", f"no value of --axis {axis} could be planned; {skipped[0]}{more}")
    reference = ref_batch if axis != "seq-len" else None
    return SweepResult(points=points, skipped=skipped, reference_global_batch=reference, objective=objective)
