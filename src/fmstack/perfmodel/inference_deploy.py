"""A serving deployment (a model on ``tp * pp`` GPUs with its precisions) and what it fixes once for every
iteration: the attention's decode FLOPs and KV reads per cached token, the MoE permutation traffic, and the TP / EP
collectives tabulated over message sizes. :mod:`fmstack.perfmodel.inference_step` prices iterations of it."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fmstack.catalog.params import attention_params
from fmstack.catalog.schema import ModelArch
from fmstack.catalog.topology import Cluster
from fmstack.errors import InputError
from fmstack.perfmodel.collectives import GroupPlacement, collective_time_s
from fmstack.perfmodel.efficiency import Efficiency
from fmstack.perfmodel.inference_kv import KV_BYTES, WEIGHT_BYTES, check_tp, kv_split
from fmstack.perfmodel.inference_speculative import SpecDecode
from fmstack.perfmodel.modelconsts import ModelConsts, model_consts

F = NDArray[np.float64]


@dataclass(frozen=True, kw_only=True, slots=True)
class Deployment:
    """One serving replica: a model on ``tp * pp`` GPUs of a cluster, with weight and KV precisions."""

    model: ModelArch
    cluster: Cluster
    efficiency: Efficiency
    tp: int = 1
    pp: int = 1
    ep: int = 1
    """Expert parallel degree inside the TP group (MoE); 1 = experts split by TP."""
    precision: str = "bf16"
    kv_dtype: str = "bf16"
    attention_dp: bool = False
    """Attention and the other non-expert layers data-parallel over the ``tp`` GPUs (each runs its own
    sequences, holds their KV cache and a full copy of the non-expert weights); experts split by ``ep == tp``."""
    attention_precision: str | None = None
    """Precision of the attention blocks' projections (None = ``precision``): NVIDIA's NVFP4 DeepSeek-R1
    checkpoints quantise the MoE layers and keep attention in bf16."""
    gqa_kv_sharing: bool = True
    """Decode attention reads each KV head once for its whole query-head group (False: once per query head,
    as TensorRT-LLM's masked-MHA kernel before v0.7 did)."""
    spec: SpecDecode | None = None
    """Speculative decoding (None: one token per sequence and iteration); a decode iteration then verifies
    ``spec.tokens + 1`` tokens per sequence after ``spec.tokens`` draft passes (:mod:`fmstack.perfmodel.
    inference_speculative`)."""
    draft_deploy: Deployment | None = field(init=False)
    """The draft model on the same GPUs (its own TP, EP only for an MoE draft, one pipeline stage); None without a
    draft model (no speculation, or n-gram lookup)."""
    mc: ModelConsts = field(init=False)
    attention_linear_params: float = field(init=False)
    """Weights of every attention block's projections (all layers)."""
    comm_tables: dict[str, tuple[F, F]] = field(init=False)
    """log10(bytes) -> log10(seconds) of the TP all-reduce and EP all-to-all, tabulated once per deployment."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "mc", model_consts(self.model))
        object.__setattr__(self, "attention_linear_params", float(self.model.num_layers * attention_params(self.model)))
        for name in ("precision", "attention_precision"):
            value = getattr(self, name)
            if value is not None and value not in WEIGHT_BYTES:
                raise InputError(name.replace("_", "-"), f"{value!r} unknown; allowed: {', '.join(WEIGHT_BYTES)}")
        if self.kv_dtype not in KV_BYTES:
            raise InputError("kv_dtype", f"{self.kv_dtype!r} unknown; allowed: {', '.join(KV_BYTES)}")
        if self.ep > 1 and (self.model.moe is None or self.tp % self.ep or self.model.moe.num_experts % self.ep):
            n = self.model.moe.num_experts if self.model.moe is not None else 0
            ok = [str(e) for e in range(1, self.tp + 1) if self.tp % e == 0 and n % e == 0]
            raise InputError(
                "ep", f"ep({self.ep}) needs an MoE model, must divide tp({self.tp}) and the experts: "
                + (f"{self.model.name} has {n}; allowed: {', '.join(ok)}" if n else f"{self.model.name} is dense"),
            )  # fmt: skip
        if self.attention_dp and (self.model.moe is None or self.ep != self.tp):
            raise InputError(
                "attention-dp",
                f"attention data parallelism needs an MoE model and ep == tp, got ep({self.ep}) tp({self.tp})",
            )
        gpd = self.cluster.gpus_per_domain
        for name, ranks in (("tp", self.tp), ("ep", self.ep)):
            if ranks > gpd and ranks % gpd:
                raise InputError(
                    name, f"{name}({ranks}) > {gpd} GPUs per NVLink domain and not a multiple of it: the group must "
                    "stay inside one domain or span whole domains",
                )  # fmt: skip
        self.peak_linear_flops()  # the GPU must have the precision
        if self.attention_precision is not None:
            try:
                self.cluster.gpu.peak_tflops(self.attention_precision)
            except InputError as exc:
                raise InputError("attention-precision", exc.message) from None
        object.__setattr__(self, "comm_tables", _comm_tables(self))  # after the checks: it needs valid degrees
        object.__setattr__(self, "draft_deploy", self._draft())

    def _draft(self) -> Deployment | None:
        draft = self.spec.draft if self.spec is not None else None
        if draft is None:
            return None
        try:
            check_tp(draft, self.tp, self.cluster.gpus_per_domain)
        except InputError as e:
            raise InputError("draft-model", f"the draft runs on the target's tp({self.tp}) GPUs: {e.message}") from e
        moe = draft.moe is not None
        ep = self.ep if moe and draft.moe is not None and draft.moe.num_experts % self.ep == 0 else 1
        return Deployment(
            model=draft, cluster=self.cluster, efficiency=self.efficiency, tp=self.tp, pp=1, ep=ep,
            precision=self.precision, kv_dtype=self.kv_dtype, attention_dp=self.attention_dp and moe and ep == self.tp,
            attention_precision=self.attention_precision, gqa_kv_sharing=self.gqa_kv_sharing,
        )  # fmt: skip

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp

    @property
    def attn_split(self) -> int:
        """Ways the non-expert layers are split by tensor parallelism (1 under attention data parallelism)."""
        return 1 if self.attention_dp else self.tp

    def peak_linear_flops(self) -> float:
        return self.cluster.gpu.peak_tflops(self.precision) * 1e12


def decode_core_per_ctx(d: Deployment) -> float:
    """Decode attention FLOPs per GPU, per layer, per (token, cached token). MHA/GQA: the prefill core's
    (``4 * heads * head_dim`` split over TP). MLA decodes in the weight-absorbed form (DeepSeek-V2, arXiv
    2405.04434, sec. 2.1.2; TensorRT-LLM's DeepSeek-R1 throughput blog, 'Weights absorb and MQA'): every
    query head scores the cached latent plus its RoPE key (``kv_lora_rank + qk_rope_head_dim``) and sums the
    latent (``kv_lora_rank``): ``2 * heads * (2 * kv_lora_rank + qk_rope_head_dim)``."""
    m, mc = d.model, d.mc
    if m.mla is None:
        return mc.fwd_core_per_token_per_ctx / mc.layers / d.tp
    return 2.0 * m.num_heads * (2.0 * m.mla.kv_lora_rank + m.mla.qk_rope_head_dim) / d.tp


def kv_read_factor(d: Deployment) -> float:
    """Bytes decode attention reads per byte of cached KV on a GPU: 1 when a KV head is read once for its
    query-head group; the query heads per KV head on the GPU when each query head reads it again (pre-v0.7
    TensorRT-LLM masked MHA: one thread block per query head; MQA/GQA optimisation in v0.7, CHANGELOG)."""
    m = d.model
    if d.gqa_kv_sharing or m.mla is not None:
        return 1.0
    heads_gpu = m.num_heads / d.attn_split
    kv_heads_gpu = m.num_kv_heads / kv_split(m, d.attn_split)
    return heads_gpu / kv_heads_gpu


def moe_permute_bytes(d: Deployment) -> float:
    """HBM bytes per token per MoE layer on one GPU of a fused MoE's token permutation, the accounting the
    training model uses (:func:`fmstack.perfmodel.step._elementwise_bytes_per_token_layer`, less Megatron's sort of
    received chunks): expand each token's ``top_k`` routed copies into expert order (read and write ``top_k x h``
    in 2 B), finalize (read the ``top_k`` expert outputs, write ``h`` weighted back into token order), and the
    router's fp32 logits over the experts (12 B each: write, softmax read and write). The copies are split over
    the ``ep`` ranks (with experts split by TP every rank expands every copy at full ``h``); the per-token part
    over the ranks that hold a token (``tp / attn_split``: all TP ranks repeat it, attention-DP ranks split it)."""
    copies, per_token = _moe_permute_parts(d)
    return copies + per_token / (d.tp / d.attn_split)


def _moe_permute_parts(d: Deployment) -> tuple[float, float]:
    """(bytes per token of all ranks: the routed copies on this GPU; bytes per token this GPU holds)."""
    mc = d.mc
    if mc.experts <= 0:
        return 0.0, 0.0
    return float(mc.top_k * mc.h * 2.0 * 3.0 / d.ep), float(2.0 * mc.h + 12.0 * mc.experts)


def _f(x: ArrayLike) -> F:
    return np.asarray(x, dtype=np.float64)


COMM_GRID_BYTES = np.logspace(2.0, 12.0, 401)
"""Message sizes at which a deployment tabulates its collectives (40 points per decade: the log-log
interpolation between them is within 1 % of the collectives model; tested)."""


def _comm(op: str, size: F, ranks: int, per_domain: int, cluster: Cluster) -> F:
    if ranks <= 1:
        return np.zeros_like(size)
    t = collective_time_s(op, size, GroupPlacement(num_ranks=ranks, ranks_per_domain=per_domain), cluster)
    return np.where(size > 0, _f(t), 0.0)


def _comm_tables(d: Deployment) -> dict[str, tuple[F, F]]:
    """A group within one NVLink domain has all its ranks there; a larger one (TP across nodes) spans
    ``ranks / gpus_per_domain`` whole domains with ``gpus_per_domain`` ranks in each, so its all-reduce is the
    collectives model's on that placement (NCCL's best of ring, tree and the hierarchical reduce-scatter /
    inter-domain all-reduce / all-gather) and its all-to-all crosses the scale-out fabric."""
    gpd = d.cluster.gpus_per_domain
    out: dict[str, tuple[F, F]] = {}
    for op, ranks in (("all_reduce", d.tp), ("all_to_all", d.ep)):
        if ranks > 1:
            t = _comm(op, COMM_GRID_BYTES, ranks, min(ranks, gpd), d.cluster)
            out[op] = (np.log10(COMM_GRID_BYTES), np.log10(t))
    return out


def _comm_lookup(d: Deployment, op: str, size: F) -> F:
    """The tabulated collective time of ``size`` bytes (0 for a group of one or an empty message)."""
    table = d.comm_tables.get(op)
    if table is None:
        return np.zeros_like(size)
    x = np.log10(np.clip(size, COMM_GRID_BYTES[0], COMM_GRID_BYTES[-1]))
    return np.where(size > 0, 10.0 ** np.interp(x, table[0], table[1]), 0.0)
