"""`estimate_training`: one configuration in, a breakdown that adds up out.

MFU counts model FLOPs (3 x forward: weights plus *full* attention, as PaLM app. B and Megatron do)
against the dense BF16 peak; HFU adds the recomputed forward. Both are per GPU over the whole step.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from fmstack.catalog.schema import ModelArch
from fmstack.catalog.topology import Cluster
from fmstack.perfmodel.columns import columns_of
from fmstack.perfmodel.config import TrainConfig, reduce_bytes_of, validate_config
from fmstack.perfmodel.efficiency import Efficiency, default_efficiency
from fmstack.perfmodel.memory import DEFAULT_RESERVE_GIB, GIB
from fmstack.perfmodel.modelconsts import model_consts
from fmstack.perfmodel.step import StepArrays, step_model


@dataclass(frozen=True, kw_only=True, slots=True)
class LinkTime:
    """Time of one parallelism's communication on its link, and what is left after overlap."""

    link_s: float
    exposed_s: float


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryBreakdown:
    """GiB per GPU (most loaded stage) by part, and whether it fits."""

    weights_gib: float
    grads_gib: float
    optimizer_gib: float
    activations_gib: float
    temporary_gib: float
    total_gib: float
    capacity_gib: float
    reserve_gib: float
    fits: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class TrainingEstimate:
    """Predicted cost of one training step and why."""

    model: str
    instance: str
    num_gpus: int
    config: TrainConfig
    step_time_s: float
    compute_s: float
    """GEMMs, attention and memory-bound kernels, forward and backward (no recompute)."""
    gemm_s: float
    attention_s: float
    memory_bound_s: float
    recompute_s: float
    overhead_s: float
    bubble_s: float
    optimizer_s: float
    comm: dict[str, LinkTime]
    memory: MemoryBreakdown
    mfu: float
    hfu: float
    tflops_per_gpu: float
    tokens_per_step: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    bottleneck: str
    parts_s: dict[str, float] = field(default_factory=dict)
    """Every additive part of the step; they sum to step_time_s."""
    mfu_causal: float = 0.0
    """MFU with the attention core halved for the causal mask, as Megatron-LM's logged TFLOP/s count it
    (``training.py``, ``num_floating_point_operations``: "causal mask (only half of the mask is non-zero)")."""
    tflops_per_gpu_causal: float = 0.0
    """Model TFLOP/s per GPU on the same causal count."""

    @property
    def fits(self) -> bool:
        return self.memory.fits

    def time_to_train_s(self, tokens: float) -> float:
        return tokens / self.tokens_per_s

    def to_json(self) -> dict[str, Any]:
        """The documented JSON keys (`fmstack estimate train --json`)."""
        return {
            "model": self.model,
            "instance": self.instance,
            "num_gpus": self.num_gpus,
            # the wire bytes the step was priced with (None in the config: the gradients' own, config.wire_bytes)
            "config": asdict(self.config) | {"reduce_bytes": reduce_bytes_of(self.config)},
            "step_time_s": self.step_time_s,
            "mfu": self.mfu,
            "hfu": self.hfu,
            "tflops_per_gpu": self.tflops_per_gpu,
            "mfu_causal": self.mfu_causal,
            "tflops_per_gpu_causal": self.tflops_per_gpu_causal,
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "tokens_per_step": self.tokens_per_step,
            "memory_gib_per_gpu": self.memory.total_gib,
            "fits": self.fits,
            "bottleneck": self.bottleneck,
            "breakdown": {
                "parts_s": self.parts_s,
                "compute_s": self.compute_s,
                "comm": {k: asdict(v) for k, v in self.comm.items()},
                "memory_gib": asdict(self.memory),
            },
        }


_PART_LABELS = {
    "gemm": "GEMM compute",
    "attention": "attention kernels",
    "memory_bound": "memory-bound kernels (norms, activations)",
    "recompute": "activation recomputation",
    "overhead": "kernel launch overhead",
    "tp": "exposed tensor-parallel {op} on {link}",
    "cp": "exposed context-parallel ring exchange on {link}",
    "ep": "exposed expert-parallel all-to-all on {link}",
    "pp": "pipeline point-to-point on {link}",
    "dp": "exposed data-parallel {op} on {link}",
    "bubble": "pipeline bubble",
    "optimizer": "optimizer step",
    "overlap": "compute slowed by the communication hidden under it",
}


def bottleneck_phrase(part: str, fraction: float, *, link: str, op: str) -> str:
    label = _PART_LABELS[part].format(link=link, op=op)
    return f"{label}: {fraction * 100:.0f} % of the step"


def _link_name(cluster: Cluster, per_domain_ok: bool) -> str:
    if per_domain_ok and cluster.scale_up is not None:
        return f"NVLink ({cluster.scale_up.name})"
    return f"{cluster.scale_out.name.upper()}"


def estimate_training(
    model: ModelArch,
    cluster: Cluster,
    config: TrainConfig,
    *,
    efficiency: Efficiency | None = None,
    reserve_gib: float = DEFAULT_RESERVE_GIB,
) -> TrainingEstimate:
    """Predict one training step of ``model`` on ``cluster`` with ``config``."""
    validate_config(config, model, cluster.num_gpus)
    # a precision the GPU has no peak for (fp8 on A100) is refused, as the planner refuses it (plan_training);
    # the step model would otherwise run the linear layers at the BF16 peak and report an fp8 run
    cluster.gpu.peak_tflops(config.precision)
    eff = efficiency or default_efficiency(cluster.gpu)
    arrays = step_model(model_consts(model), cluster, eff, columns_of(config))
    return from_arrays(model, cluster, config, arrays, 0, reserve_gib=reserve_gib)


def from_arrays(
    model: ModelArch, cluster: Cluster, config: TrainConfig, a: StepArrays[Any], i: int, *, reserve_gib: float
) -> TrainingEstimate:
    """Row ``i`` of vectorised results (or the floats of one configuration) as a TrainingEstimate (the planner
    uses this for its top rows)."""

    def g(x: float | np.ndarray[Any, Any]) -> float:
        if isinstance(x, float):
            return x
        return float(x) if np.ndim(x) == 0 else float(x[i])  # a 0-d array: a NumPy call in the float path

    step = g(a.step_s)
    n = cluster.num_gpus
    peak = cluster.gpu.bf16_dense_tflops * 1e12
    gpd = cluster.gpus_per_domain
    tp_in = config.tp <= gpd
    dp_span = config.tp * config.cp * config.dp
    comm = {
        "tp": LinkTime(link_s=g(a.tp_link_s), exposed_s=g(a.tp_exposed_s)),
        "cp": LinkTime(link_s=g(a.cp_link_s), exposed_s=g(a.cp_exposed_s)),
        "ep": LinkTime(link_s=g(a.ep_link_s), exposed_s=g(a.ep_exposed_s)),
        "pp": LinkTime(link_s=g(a.pp_link_s), exposed_s=g(a.pp_exposed_s)),
        "dp": LinkTime(link_s=g(a.dp_link_s), exposed_s=g(a.dp_exposed_s)),
    }
    parts = {
        "gemm": g(a.gemm_s),
        "attention": g(a.attention_s),
        "memory_bound": g(a.memory_bound_s),
        "recompute": g(a.recompute_s),
        "overhead": g(a.overhead_s),
        "tp": comm["tp"].exposed_s,
        "cp": comm["cp"].exposed_s,
        "ep": comm["ep"].exposed_s,
        "pp": comm["pp"].exposed_s,
        "dp": comm["dp"].exposed_s,
        "bubble": g(a.bubble_s),
        "optimizer": g(a.optimizer_s),
        "overlap": g(a.overlap_s),
    }
    top = max(parts, key=lambda k: parts[k])
    links = {
        "tp": _link_name(cluster, tp_in),
        "cp": _link_name(cluster, config.tp * config.cp <= gpd),
        "ep": _link_name(cluster, config.tp * config.ep <= gpd),
        "pp": _link_name(cluster, dp_span * config.pp <= gpd),
        "dp": _link_name(cluster, dp_span <= gpd),
    }
    dp_op = {"zero3": "all-gather/reduce-scatter of FSDP", "fsdp": "all-gather/reduce-scatter of FSDP"}.get(
        config.sharding, "gradient reduce-scatter/all-gather" if config.sharding != "none" else "gradient all-reduce"
    )
    op = dp_op if top == "dp" else ("all-reduce" if not config.sequence_parallel else "all-gather/reduce-scatter")
    phrase = bottleneck_phrase(top, parts[top] / step, link=links.get(top, ""), op=op)
    mem = a.memory
    total = g(mem.total) / GIB
    capacity = cluster.gpu.hbm_gib
    memory = MemoryBreakdown(
        weights_gib=g(mem.weights) / GIB,
        grads_gib=g(mem.grads) / GIB,
        optimizer_gib=g(mem.optimizer) / GIB,
        activations_gib=g(mem.activations) / GIB,
        temporary_gib=g(mem.temporary) / GIB,
        total_gib=total,
        capacity_gib=capacity,
        reserve_gib=reserve_gib,
        fits=total <= capacity - reserve_gib,
    )
    tokens = g(a.tokens)
    causal_flops = g(a.model_flops) - 0.5 * g(a.attention_core_flops)
    compute = parts["gemm"] + parts["attention"] + parts["memory_bound"]
    return TrainingEstimate(
        model=model.name,
        instance=cluster.name or cluster.instance.name,
        num_gpus=n,
        config=config,
        step_time_s=step,
        compute_s=compute,
        gemm_s=parts["gemm"],
        attention_s=parts["attention"],
        memory_bound_s=parts["memory_bound"],
        recompute_s=parts["recompute"],
        overhead_s=parts["overhead"],
        bubble_s=parts["bubble"],
        optimizer_s=parts["optimizer"],
        comm=comm,
        memory=memory,
        mfu=g(a.model_flops) / (step * n * peak),
        hfu=g(a.hardware_flops) / (step * n * peak),
        tflops_per_gpu=g(a.model_flops) / (step * n) / 1e12,
        tokens_per_step=tokens,
        tokens_per_s=tokens / step,
        tokens_per_s_per_gpu=tokens / step / n,
        bottleneck=phrase,
        parts_s=parts,
        mfu_causal=causal_flops / (step * n * peak),
        tflops_per_gpu_causal=causal_flops / (step * n) / 1e12,
    )
