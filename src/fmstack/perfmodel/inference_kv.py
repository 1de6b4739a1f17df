"""Serving memory: weights and KV cache in HBM, paged KV blocks, and how many sequences fit.

KV cache per token (all layers, K and V):
- MHA / GQA / MQA: ``2 * layers * kv_heads * head_dim * bytes`` (Pope et al. 2022, "Efficiently Scaling
  Transformer Inference", sec. 3.1; GQA: Ainslie et al. 2023). Under tensor parallelism the kv heads are split
  over ``min(tp, kv_heads)`` GPUs; with tp > kv_heads each head is replicated (vLLM, TensorRT-LLM).
- MLA: ``layers * (kv_lora_rank + qk_rope_head_dim) * bytes``: the compressed latent and the decoupled RoPE key
  are cached, not per-head K and V (DeepSeek-V2, arXiv 2405.04434, sec. 2.1.2 and Table 1); replicated over TP.
Paged KV (Kwon et al. 2023, "Efficient Memory Management for LLM Serving with PagedAttention", sec. 4.2): a
sequence of n tokens holds ``ceil(n / block)`` blocks of ``block`` tokens; the waste is < one block per sequence.
The KV pool is ``kv_memory_fraction`` of what is left after weights and a workspace reserve (TensorRT-LLM's
``kv_cache_free_gpu_mem_fraction``, default 0.9; vLLM's ``gpu_memory_utilization`` plays the same role).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fmstack.catalog.params import attention_params
from fmstack.catalog.schema import ModelArch
from fmstack.errors import InputError
from fmstack.perfmodel.modelconsts import ModelConsts

GIB = float(2**30)
WEIGHT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5 + 1.0 / 16.0}
"""Bytes per weight: FP4 (NVFP4) stores 4-bit values plus one FP8 scale per 16 (NVIDIA Blackwell NVFP4 format)."""
KV_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0}
PRECISIONS = tuple(WEIGHT_BYTES)
KV_DTYPES = tuple(KV_BYTES)
DEFAULT_BLOCK_TOKENS = 16
"""vLLM's default KV block size (``--block-size 16``)."""
DEFAULT_KV_MEMORY_FRACTION = 0.9
"""TensorRT-LLM ``kv_cache_free_gpu_mem_fraction`` default: 90 % of the memory free after weights."""
DEFAULT_RESERVE_GIB = 4.0
"""CUDA context, NCCL and cuBLAS workspaces, activations of one iteration (fmstack default)."""


def kv_bytes_per_token(model: ModelArch, kv_bytes: float) -> float:
    """KV cache bytes of one token over all layers, whole model (no TP split)."""
    if model.mla is not None:
        return float(model.num_layers * (model.mla.kv_lora_rank + model.mla.qk_rope_head_dim) * kv_bytes)
    return float(2 * model.num_layers * model.num_kv_heads * model.head_dim_eff * kv_bytes)


def kv_split(model: ModelArch, tp: int) -> int:
    """How many ways one token's KV is split over a TP group (replication beyond the kv heads)."""
    if model.mla is not None:
        return 1
    return min(tp, model.num_kv_heads)


def check_tp(model: ModelArch, tp: int, gpus_per_domain: int) -> None:
    """TP must divide the query heads, divide or be a multiple of the kv heads, and stay in one NVLink domain or
    span whole domains (``tp`` a multiple of ``gpus_per_domain``: vLLM and SGLang run TP 16 over two 8-GPU H100
    nodes; the all-reduces then cross the scale-out fabric). Whether the cluster has the GPUs is the caller's."""
    if tp < 1:
        raise InputError("tp", f"must be >= 1, got {tp}")
    if tp > model.num_heads or model.num_heads % tp:
        raise InputError(
            "tp", f"tp({tp}) must divide num_heads({model.num_heads}) of {model.name}; allowed: "
            + ", ".join(str(d) for d in range(1, model.num_heads + 1) if model.num_heads % d == 0 and d <= 64),
        )  # fmt: skip
    if model.mla is None and model.num_kv_heads % tp and tp % model.num_kv_heads:
        raise InputError("tp", f"num_kv_heads({model.num_kv_heads}) and tp({tp}) must divide one another")
    if tp > gpus_per_domain and tp % gpus_per_domain:
        raise InputError(
            "tp", f"tp({tp}) > {gpus_per_domain} GPUs per NVLink domain and not a multiple of it: TP must stay "
            f"inside one domain or span whole domains (tp {gpus_per_domain}, {2 * gpus_per_domain}, ...)",
        )  # fmt: skip


@dataclass(frozen=True, kw_only=True, slots=True)
class ServeMemory:
    """GiB per GPU of one serving replica and the KV capacity it leaves."""

    weights_gib: float
    reserve_gib: float
    kv_pool_gib: float
    capacity_gib: float
    kv_bytes_per_token_gpu: float
    """KV bytes one token occupies on each GPU of the replica."""
    kv_tokens: int
    """Tokens the KV pool holds (per replica)."""
    block_tokens: int

    @property
    def fits(self) -> bool:
        return self.kv_tokens > 0

    def max_concurrency(self, tokens_per_seq: int, *, shared_tokens: int = 0, sharers: int = 1) -> int:
        """Sequences of ``tokens_per_seq`` tokens whose paged KV blocks fit in the pool at once. ``sharers``
        sequences that begin with the same ``shared_tokens`` (the ``n`` samples of one prompt: vLLM
        ``SamplingParams.n``, SGLang ``n``) hold that prefix's full blocks once, forked copy-on-write (vLLM's block
        manager, Kwon et al. 2023, sec. 4.4 "Parallel sampling"); each keeps its own partial block and the rest, so
        ``sharers`` of them take ``sharers x own + shared`` blocks."""
        blocks = math.ceil(tokens_per_seq / self.block_tokens)
        if sharers <= 1 or shared_tokens <= 0:
            return int(self.kv_tokens // (blocks * self.block_tokens))
        shared = min(shared_tokens, tokens_per_seq) // self.block_tokens  # full blocks only
        pool_blocks = self.kv_tokens // self.block_tokens
        if pool_blocks < blocks:  # not one sequence whole
            return 0
        return int(pool_blocks * sharers // (sharers * (blocks - shared) + shared))


def weight_bytes_per_gpu(
    mc: ModelConsts,
    precision: str,
    tp: int,
    pp: int,
    attention_dp: bool = False,
    *,
    attention_precision: str | None = None,
    attention_params: float = 0.0,
) -> float:
    """Linear-layer weights in ``precision`` (the ``attention_params`` weights of the attention blocks in
    ``attention_precision`` when given); embedding and LM head kept in bf16 (ModelOpt's default).
    Under attention data parallelism the non-expert layers and the embeddings are replicated on every GPU and
    only the routed experts are split (over ``ep == tp``)."""
    wb = WEIGHT_BYTES[precision]
    attn_extra = attention_params * (WEIGHT_BYTES[attention_precision or precision] - wb)
    nonexpert = mc.params_layers_nonexpert * wb + attn_extra
    if attention_dp:
        full = nonexpert + mc.params_embedding * 2.0
        return (full + mc.params_expert * wb / tp) / pp
    return (nonexpert + mc.params_expert * wb + mc.params_embedding * 2.0) / (tp * pp)


def serve_memory(
    model: ModelArch,
    mc: ModelConsts,
    *,
    hbm_gib: float,
    tp: int,
    pp: int,
    precision: str,
    kv_dtype: str,
    block_tokens: int = DEFAULT_BLOCK_TOKENS,
    kv_memory_fraction: float = DEFAULT_KV_MEMORY_FRACTION,
    reserve_gib: float = DEFAULT_RESERVE_GIB,
    attention_dp: bool = False,
    attention_precision: str | None = None,
    extra_weights_gib: float = 0.0,
    extra_kv_bytes_per_token_gpu: float = 0.0,
) -> ServeMemory:
    """Weights, reserve and KV pool per GPU; the pool's capacity in tokens (paged blocks). Under attention
    data parallelism each of the ``tp`` GPUs caches whole tokens of its own sequences, so the replica holds
    ``tp`` times one GPU's tokens. ``extra_weights_gib`` and ``extra_kv_bytes_per_token_gpu``: a speculative
    draft's weights and KV cache per GPU (:func:`fmstack.perfmodel.inference.memory_of`)."""
    attn = float(model.num_layers * attention_params(model))
    weights = (
        weight_bytes_per_gpu(
            mc, precision, tp, pp, attention_dp, attention_precision=attention_precision, attention_params=attn
        )
        / GIB
        + extra_weights_gib
    )
    pool = max(0.0, hbm_gib - weights - reserve_gib) * kv_memory_fraction
    per_tok = kv_bytes_per_token(model, KV_BYTES[kv_dtype]) / kv_split(model, 1 if attention_dp else tp) / pp
    per_tok += extra_kv_bytes_per_token_gpu
    tokens = int(pool * GIB // per_tok) // block_tokens * block_tokens * (tp if attention_dp else 1)
    return ServeMemory(
        weights_gib=weights,
        reserve_gib=reserve_gib,
        kv_pool_gib=pool,
        capacity_gib=hbm_gib,
        kv_bytes_per_token_gpu=per_tok,
        kv_tokens=tokens,
        block_tokens=block_tokens,
    )
