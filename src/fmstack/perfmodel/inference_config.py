"""`ServeConfig` (how one replica serves), its validation, and the deployment and memory it implies.

Split from :mod:`fmstack.perfmodel.inference` (which re-exports every name here): the inputs of
:func:`fmstack.perfmodel.inference.estimate_serve` and the per-GPU memory and concurrency limit they give
(:func:`fmstack.perfmodel.inference_kv.serve_memory`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from fmstack.catalog.schema import ModelArch
from fmstack.catalog.topology import Cluster
from fmstack.errors import InputError
from fmstack.perfmodel.efficiency import Efficiency, EfficiencyFor, default_efficiency
from fmstack.perfmodel.inference_kv import (
    DEFAULT_KV_MEMORY_FRACTION,
    KV_BYTES,
    ServeMemory,
    check_tp,
    kv_bytes_per_token,
    kv_split,
    serve_memory,
    weight_bytes_per_gpu,
)
from fmstack.perfmodel.inference_speculative import SpecDecode
from fmstack.perfmodel.inference_step import Deployment

Scheduler = Literal["continuous", "static"]
DEFAULT_MAX_NUM_TOKENS = 8192
"""Prompt tokens per iteration (TensorRT-LLM ``max_num_tokens`` and vLLM ``max_num_batched_tokens`` defaults)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ServeConfig:
    """How one replica serves: parallelism, precisions, request shape, load and scheduler."""

    tp: int = 1
    pp: int = 1
    ep: int = 1
    precision: str = "bf16"
    """Weights and GEMM precision: bf16, fp16, fp8, fp4."""
    kv_dtype: str | None = None
    """KV cache precision; None = fp8 with fp8/fp4 weights (ModelOpt checkpoints quantise the KV cache), else bf16."""
    input_len: int = 2048
    output_len: int = 256
    concurrency: int | None = None
    """Clients in the closed loop; None = as many as the KV cache holds (max load)."""
    request_rate_per_s: float | None = None
    """Open-loop arrivals per second instead: the analytic model runs at the concurrency Little's law gives,
    ``C = rate x latency(C)`` (the simulation draws Poisson arrivals)."""
    max_batch: int | None = None
    """Engine limit on running sequences (``max_num_seqs`` / ``max_batch_size``); None = memory only."""
    prefix_hit_rate: float = 0.0
    """Fraction of each prompt already in the prefix cache."""
    scheduler: Scheduler = "continuous"
    max_num_tokens: int = DEFAULT_MAX_NUM_TOKENS
    kv_memory_fraction: float = DEFAULT_KV_MEMORY_FRACTION
    """Share of the memory left after weights that the KV pool takes (lower when a trainer shares the GPUs)."""
    attention_dp: bool = False
    """MoE only: attention and the other non-expert layers data-parallel over the ``tp`` GPUs, experts split by
    ``ep == tp`` (TensorRT-LLM ``enable_attention_dp``, SGLang ``--enable-dp-attention``)."""
    attention_precision: str | None = None
    """Precision of the attention blocks' projections when the checkpoint keeps them apart from ``precision``
    (None = ``precision``); NVIDIA's NVFP4 DeepSeek-R1 checkpoints keep attention in bf16."""
    gqa_kv_sharing: bool = True
    """False: decode attention reads each KV head once per query head (TensorRT-LLM before v0.7)."""
    samples_per_prompt: int = 1
    """Sequences generated from one prompt together (vLLM ``SamplingParams.n``, SGLang ``n``; an RL rollout's
    samples): they share the prompt's full KV blocks (:meth:`fmstack.perfmodel.inference_kv.ServeMemory.
    max_concurrency`). 1: independent requests, each holding its own prompt (``estimate serve``)."""
    speculative: SpecDecode | None = None
    """Speculative decoding (None: off): a decode iteration emits ``speculative.mean_tokens_per_step`` tokens per
    sequence on average (:mod:`fmstack.perfmodel.inference_speculative`)."""

    @property
    def kv(self) -> str:
        if self.kv_dtype is not None:
            return self.kv_dtype
        return "fp8" if self.precision in ("fp8", "fp4") else "bf16"


def check_rate(rate_per_s: float, field: str = "qps") -> None:
    """InputError ``field`` unless ``rate_per_s`` is a finite number > 0 (nan and inf name themselves)."""
    if not math.isfinite(rate_per_s):
        raise InputError(field, f"must be a finite number > 0, got {rate_per_s}")
    if not rate_per_s > 0:
        raise InputError(field, f"must be > 0, got {rate_per_s}")


def validate_serve(cfg: ServeConfig, model: ModelArch, cluster: Cluster) -> None:
    """Shapes and ranges; InputError names the field and what is allowed."""
    for name in ("input_len", "output_len", "pp", "ep", "max_num_tokens"):
        if getattr(cfg, name) < 1:
            raise InputError(name.replace("_", "-"), f"must be >= 1, got {getattr(cfg, name)}")
    if cfg.samples_per_prompt < 1:
        raise InputError("samples", f"must be >= 1, got {cfg.samples_per_prompt}")
    for name in ("concurrency", "max_batch"):
        value = getattr(cfg, name)
        if value is not None and value < 1:
            raise InputError(name.replace("_", "-"), f"must be >= 1, got {value}")
    if cfg.request_rate_per_s is not None:
        if cfg.concurrency is not None:
            raise InputError("qps", "give a concurrency or a request rate, not both")
        check_rate(cfg.request_rate_per_s)
    if not 0.0 < cfg.kv_memory_fraction <= 1.0:
        raise InputError("kv-memory-fraction", f"must be in (0, 1], got {cfg.kv_memory_fraction}")
    if not 0.0 <= cfg.prefix_hit_rate < 1.0:
        raise InputError("prefix-hit-rate", f"must be in [0, 1), got {cfg.prefix_hit_rate}")
    if cfg.kv not in KV_BYTES:
        raise InputError("kv-dtype", f"{cfg.kv!r} unknown; allowed: {', '.join(KV_BYTES)}")
    check_tp(model, cfg.tp, cluster.gpus_per_domain)
    if cfg.tp > cluster.num_gpus:  # TP across NVLink domains: the replica spans whole nodes
        gpn = cluster.instance.num_gpus
        raise InputError(
            "nodes", f"tp({cfg.tp}) needs {-(-cfg.tp // gpn)} nodes of {gpn} GPUs; the cluster has {cluster.num_nodes} "
            f"({cluster.num_gpus} GPUs)",
        )  # fmt: skip
    if cfg.tp * cfg.pp > cluster.num_gpus:
        raise InputError("pp", f"tp({cfg.tp}) * pp({cfg.pp}) = {cfg.tp * cfg.pp} > {cluster.num_gpus} GPUs")
    if cfg.pp > model.num_layers:
        raise InputError("pp", f"pp({cfg.pp}) > num_layers({model.num_layers})")
    if cfg.input_len + cfg.output_len > model.max_seq_len:
        raise InputError(
            "input-len",
            f"input_len({cfg.input_len}) + output_len({cfg.output_len}) > max_seq_len({model.max_seq_len}) of {model.name}",
        )


def deployment(
    model: ModelArch, cluster: Cluster, cfg: ServeConfig, efficiency: Efficiency | None = None
) -> Deployment:
    return Deployment(
        model=model, cluster=cluster, efficiency=efficiency or default_efficiency(cluster.gpu), tp=cfg.tp,
        pp=cfg.pp, ep=cfg.ep, precision=cfg.precision, kv_dtype=cfg.kv, attention_dp=cfg.attention_dp,
        gqa_kv_sharing=cfg.gqa_kv_sharing, attention_precision=cfg.attention_precision, spec=cfg.speculative,
    )  # fmt: skip


def deployment_for(
    model: ModelArch, cluster: Cluster, cfg: ServeConfig, efficiency_for: EfficiencyFor | None = None
) -> Deployment:
    """:func:`deployment` with the cluster's efficiency from ``efficiency_for`` (None: the default curves)."""
    return deployment(model, cluster, cfg, None if efficiency_for is None else efficiency_for(cluster))


def memory_of(d: Deployment, kv_memory_fraction: float = DEFAULT_KV_MEMORY_FRACTION) -> ServeMemory:
    """Weights, reserve and KV pool per GPU; a speculative draft adds its weights (MTP and EAGLE share the
    target's embedding and LM head: not counted again) and its own KV cache per token (the MTP module's layer)."""
    extra_w, extra_kv = 0.0, 0.0
    dd = d.draft_deploy
    if dd is not None and d.spec is not None:
        dmc = dd.mc
        w = weight_bytes_per_gpu(
            dmc, dd.precision, dd.tp, 1, dd.attention_dp, attention_precision=dd.attention_precision,
            attention_params=dd.attention_linear_params,
        )  # fmt: skip
        if d.spec.method in ("mtp", "eagle"):
            w -= dmc.params_embedding * 2.0 / (1 if dd.attention_dp else dd.tp)
        extra_w = w / 2**30
        extra_kv = kv_bytes_per_token(dd.model, KV_BYTES[d.kv_dtype]) / kv_split(dd.model, dd.attn_split)
    return serve_memory(
        d.model, d.mc, hbm_gib=d.cluster.gpu.hbm_gib, tp=d.tp, pp=d.pp, precision=d.precision, kv_dtype=d.kv_dtype,
        kv_memory_fraction=kv_memory_fraction, attention_dp=d.attention_dp, attention_precision=d.attention_precision,
        extra_weights_gib=extra_w, extra_kv_bytes_per_token_gpu=extra_kv,
    )  # fmt: skip


def max_concurrency(d: Deployment, cfg: ServeConfig) -> int:
    """Sequences of ``input_len + output_len`` tokens that fit at once (memory, then the engine limit); the
    ``samples_per_prompt`` samples of a prompt hold its full blocks once."""
    n = memory_of(d, cfg.kv_memory_fraction).max_concurrency(
        cfg.input_len + cfg.output_len, shared_tokens=cfg.input_len, sharers=cfg.samples_per_prompt
    )
    return min(n, cfg.max_batch) if cfg.max_batch is not None else n
