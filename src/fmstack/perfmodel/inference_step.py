"""One engine iteration of a serving replica by roofline, vectorised over NumPy arrays of batch shapes.

An iteration runs ``decode_seqs`` sequences one token forward (each attending ``decode_ctx`` cached tokens) and
``prefill_tokens`` prompt tokens (chunked or whole prompts) through every layer. Per operator, time is the larger
of its FLOPs at the GPU's peak times the size-dependent efficiency and its HBM bytes at the achievable bandwidth
(Williams, Waterman and Patterson 2009, "Roofline", CACM 52(4)); the operators run one after another, so their
times add. The linear layers read every weight once per iteration (decode at small batch is bound by it: Pope et
al. 2022, sec. 2; vLLM/PagedAttention, Kwon et al. 2023, sec. 2.2); decode attention reads each sequence's KV
cache; prefill attention is causal (FlashAttention: half the full product; Dao 2023). Tensor parallelism adds two
all-reduces of the activations per layer (Shoeybi et al. 2019, Megatron-LM, sec. 3); MoE expert parallelism two
all-to-alls per MoE layer (dispatch and combine; Lepikhin et al. 2020, GShard, sec. 2.2); pipeline parallelism
splits the batch into ``m = min(pp, sequences)`` micro-batches (whole sequences: vLLM's virtual engines schedule a
sequence in one at a time) that flow through ``pp`` stages of ``layers / pp`` layers (Narayanan et al. 2021,
sec. 2.2), so an iteration is ``pp`` stage-times of one micro-batch plus the point-to-point transfers; with fewer
sequences than stages the stages idle (one prompt alone crosses them in order, in the time of the whole model).
FLOPs come from :mod:`fmstack.perfmodel.modelconsts` (2 per multiply-accumulate), collectives from
:mod:`fmstack.perfmodel.collectives`, efficiencies from :mod:`fmstack.perfmodel.efficiency`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fmstack.perfmodel.inference_deploy import COMM_GRID_BYTES as COMM_GRID_BYTES  # re-exported
from fmstack.perfmodel.inference_deploy import Deployment as Deployment
from fmstack.perfmodel.inference_deploy import _comm as _comm
from fmstack.perfmodel.inference_deploy import _comm_lookup as _comm_lookup
from fmstack.perfmodel.inference_deploy import _f, _moe_permute_parts
from fmstack.perfmodel.inference_deploy import decode_core_per_ctx as decode_core_per_ctx
from fmstack.perfmodel.inference_deploy import kv_read_factor as kv_read_factor
from fmstack.perfmodel.inference_deploy import moe_permute_bytes as moe_permute_bytes
from fmstack.perfmodel.inference_kv import KV_BYTES, WEIGHT_BYTES, kv_bytes_per_token, kv_split
from fmstack.perfmodel.modelconsts import expert_gemm_flops

F = NDArray[np.float64]

ITERATION_OVERHEAD_S = 1.0e-3
"""Scheduler, sampling and output processing of one engine iteration that no GPU kernel overlaps (fmstack
default; vLLM's v0.6 blog measured CPU work to be most of the time before it was overlapped, INF-052)."""
LAYER_OVERHEAD_S = 8.0e-6
"""Kernel launch gaps per layer and iteration with CUDA graphs (about 8 kernels of ~1 us; fmstack default)."""
ACT_BYTES = 2.0
"""Activations on the wire and in HBM are bf16."""
EP_EXCHANGE_FIXED_S = 40.3e-6
"""Fixed time of one MoE layer's expert-parallel exchange (dispatch + combine) beyond the collectives model's two
all-to-alls: TensorRT-LLM tech blog 18 (one-sided AlltoAll over NVLink, GB200 NVL72, DeepSeek-V3 profile, EP8,
BF16) measures dispatch + combine at 49.0-51.1 us for 1..16 tokens per rank, which the collectives model prices
at 7.1-11.2 us; the mean gap over 1..32 tokens is 40.3 us, and with it the model is within 18 % of the measured
table at every size 1..2048 (tested). The kernels' barriers and routing work, not bandwidth; applied to every
EP exchange (other engines' kernels and Hopper: an assumption, no measurement found)."""
MOE_LAYER_FIXED_S = 24.8e-6
"""Fixed time of one MoE layer's module per iteration (router GEMM, top-k, quantisation, the two grouped GEMMs'
launch and tail), measured: the intercept of TensorRT-LLM's NVFP4 MoE module on one B200 (tech blog 24, 'MoE as
Dense GEMM', table 'Per-Rank MoE Module Latency', TRTLLM-Gen column; DeepSeek-V3 experts sharded TP8) fitted as
24.8 us + touched expert bytes / 5.55 TB/s over 1..256 tokens (within 7.2 us; ``efficiency.yaml``
``grouped_memory``). A latency of a fixed kernel sequence under CUDA graphs, applied to every MoE layer of every
GPU (Hopper included: no Hopper measurement found). ``LAYER_OVERHEAD_S`` (the layer's other kernels) is kept:
the two overlap by at most its 8 us."""
K = TypeVar("K", bound=Hashable)

STEP_MEMO_LOADS = 1 << 15
"""Most iteration loads a simulation keeps the time of (a bound on its memory: a few hundred bytes each, about 1 KB
with eight attention-DP ranks, so at most about 32 MB); past it the table starts again, which changes no result."""


def kept_s(table: dict[K, float], key: K, compute: Callable[[], float]) -> float:
    """``table[key]``, from ``compute()`` the first time (a simulation's table of iteration times by load: the same
    call, the same float); past :data:`STEP_MEMO_LOADS` keys the table starts again."""
    t = table.get(key)
    if t is None:
        if len(table) >= STEP_MEMO_LOADS:
            table.clear()
        t = table[key] = compute()
    return t


@dataclass(frozen=True, kw_only=True, slots=True)
class RankLoad:
    """One attention-DP rank's share of an iteration (scalars or arrays): its decode sequences and their mean
    context, its prompt tokens, their attended-context sum and the prompts they complete."""

    decode_seqs: ArrayLike = 0.0
    decode_ctx: ArrayLike = 0.0
    prefill_tokens: ArrayLike = 0.0
    prefill_token_ctx: ArrayLike = 0.0
    prefill_seqs: ArrayLike = 0.0


@dataclass(frozen=True, kw_only=True, slots=True)
class StepParts:
    """Seconds of one iteration by part (arrays); the parts add up to ``total_s``."""

    gemm_s: F
    """Linear layers where Tensor-core compute bounds them."""
    weights_s: F
    """Linear layers where reading the weights from HBM bounds them."""
    attention_s: F
    """Attention FLOPs (prefill, and decode where compute-bound)."""
    kv_read_s: F
    """Decode attention where reading the KV cache bounds it."""
    elementwise_s: F
    moe_fixed_s: F
    """Fixed time of the MoE layers' modules (``MOE_LAYER_FIXED_S`` each)."""
    draft_s: F
    """Speculative decoding's draft passes (the draft model's own iterations, without their scheduler overhead)."""
    tp_comm_s: F
    ep_comm_s: F
    pp_comm_s: F
    overhead_s: F
    total_s: F

    def parts(self) -> dict[str, F]:
        return {
            "gemm_compute": self.gemm_s,
            "weight_reads": self.weights_s,
            "attention_compute": self.attention_s,
            "kv_cache_reads": self.kv_read_s,
            "elementwise": self.elementwise_s,
            "moe_layer_fixed": self.moe_fixed_s,
            "speculative_draft": self.draft_s,
            "tp_all_reduce": self.tp_comm_s,
            "ep_all_to_all": self.ep_comm_s,
            "pp_send_recv": self.pp_comm_s,
            "overhead": self.overhead_s,
        }


def step_time(
    d: Deployment,
    decode_seqs: ArrayLike,
    decode_ctx: ArrayLike,
    prefill_tokens: ArrayLike = 0.0,
    prefill_token_ctx: ArrayLike = 0.0,
    prefill_seqs: ArrayLike = 0.0,
    busiest: RankLoad | None = None,
) -> StepParts:
    """Time of one iteration: ``decode_seqs`` decode tokens of mean context ``decode_ctx`` plus ``prefill_tokens``
    prompt tokens whose attended-context sum is ``prefill_token_ctx`` (a whole causal prompt of n tokens:
    n (n + 1) / 2), from ``prefill_seqs`` prompts (their last token goes through the LM head).

    Under attention DP the arguments are the totals over the ``tp`` ranks and ``busiest`` is the load of the
    busiest rank (None: every rank carries ``1/tp`` of each total). The iteration ends at the MoE exchange,
    a barrier, so it takes the busiest rank's time: the non-expert layers, attention, the KV cache and the
    exchange run that rank's own tokens, the routed experts the tokens of all ranks (TensorRT-LLM tech blog 10,
    'ADP Balance Strategy': "the iteration time is dominated by the slowest rank").

    Speculative decoding (``d.spec``): each decode sequence verifies ``k + 1`` tokens (the linear layers, the MoE
    routing, the LM head and the collectives see ``k + 1`` rows per sequence; attention reads the sequence's KV
    cache once for its ``k + 1`` queries) after ``k`` draft passes of the draft model (:func:`draft_time`)."""
    mc, gpu, eff = d.mc, d.cluster.gpu, d.efficiency
    b, ctx = _f(decode_seqs), _f(decode_ctx)
    q = 1.0 if d.spec is None else d.spec.tokens + 1.0  # tokens per decode sequence
    p, p_ctx, p_seqs = _f(prefill_tokens), _f(prefill_token_ctx), _f(prefill_seqs)
    tp, pp = float(d.tp), float(d.pp)
    ta = float(d.attn_split)
    dp = tp / ta  # ranks that hold distinct sequences (attention DP); 1 otherwise
    if busiest is None or not d.attention_dp:
        rb, rctx, rp, rp_ctx, rp_seqs = b / dp, ctx, p / dp, p_ctx / dp, p_seqs / dp
    else:
        rb, rctx = _f(busiest.decode_seqs), _f(busiest.decode_ctx)
        rp, rp_ctx, rp_seqs = _f(busiest.prefill_tokens), _f(busiest.prefill_token_ctx), _f(busiest.prefill_seqs)
    bq, rbq = (b, rb) if d.spec is None else (b * q, rb * q)  # decode tokens (all ranks, the busiest rank)
    hbm = gpu.hbm_bw_gbps * 1e9 * eff.memory
    expert_hbm = gpu.hbm_bw_gbps * 1e9 * eff.expert_memory  # grouped GEMMs read weights slower (measured, B200)
    peak = d.peak_linear_flops()
    peak_attn = gpu.bf16_dense_tflops * 1e12 * eff.attention
    layers = mc.layers / pp  # per stage
    moe_frac = mc.moe_layers / mc.layers
    # micro-batches in flight: pp when the rank runs at least pp sequences, else one per sequence; the running
    # sequences are the decodes or the prompts, whichever is more (the mixture counts a client whose prompt is in
    # the iteration among its decodes, so the sum would count it twice: one client would make two micro-batches)
    mb = np.clip(np.maximum(rb, rp_seqs), 1.0, pp) if d.pp != 1 else 1.0
    # every stage waits for the largest micro-batch, the one with a whole prompt when there are fewer prompts
    # than micro-batches: its share of the prompts (1 with pp = 1)
    pf = 1.0 / np.clip(rp_seqs, 1.0, mb) if d.pp != 1 else 1.0
    tok = bq / mb + p * pf  # tokens of that micro-batch (all ranks)
    # the busiest rank's tokens; attention DP: each GPU runs its own tokens through full non-expert layers (the
    # mean rank the same FLOPs per GPU as TP); otherwise every rank holds all tokens and TP splits the layers
    rtok = rbq / mb + rp * pf
    head_tok = rbq / mb + rp_seqs * pf

    # linear layers, per operator group (roofline each): the non-expert layers (attention projections in
    # ``attention_precision``, the rest in ``precision``, the LM head in bf16) and the routed experts, whose grouped
    # GEMM runs at the size of one expert's GEMM (tokens routed to it), the size training prices them at
    attn_lin = d.attention_linear_params / mc.layers * 2.0  # FLOPs per token per layer (2 per weight)
    dense_lin = (mc.fwd_linear_per_token - mc.fwd_head_per_token - mc.fwd_expert_per_token) / mc.layers - attn_lin
    expert_lin = mc.fwd_expert_per_token / mc.layers
    call = 2.0 * np.maximum(rtok, 1.0) * mc.h * max(mc.ffn, mc.q_width) / ta
    attn_prec = d.attention_precision or d.precision
    peak_attn_lin = d.cluster.gpu.peak_tflops(attn_prec) * 1e12
    # the LM head stays bf16 in FP8 / NVFP4 checkpoints (ModelOpt's export writes "exclude_modules":
    # ["lm_head"]), so its GEMM runs at the bf16 peak, at its own call size (vocab wide)
    head_prec = d.precision if d.precision in ("bf16", "fp16") else "bf16"
    # the head runs on the last stage, once per micro-batch: with pp micro-batches that stage is the slowest and
    # sets every stage-time (pp heads per iteration); one micro-batch crosses the stages in order, its head once;
    # in between, mb heads (as pp stage-times, mb / pp of a head in each)
    head_share = mb / pp if d.pp != 1 else 1.0
    head_flops = head_tok * head_share * mc.fwd_head_per_token / ta
    head_call = np.maximum(head_tok, 1.0) * mc.fwd_head_per_token / ta
    dense_gemm = (
        rtok * layers * dense_lin / ta / (peak * eff.gemm_at(d.precision, call))
        + rtok * layers * attn_lin / ta / (peak_attn_lin * eff.gemm_at(attn_prec, call))
        + head_flops / (gpu.peak_tflops(head_prec) * 1e12 * eff.gemm_at(head_prec, head_call))
    )
    expert_call = expert_gemm_flops(mc, tok / d.ep, d.ep, tp / d.ep)
    expert_gemm = tok * layers * expert_lin / tp / (peak * eff.gemm_at(d.precision, expert_call))
    wbytes = WEIGHT_BYTES[d.precision]
    expert_params_layer = mc.params_expert / max(mc.moe_layers, 1.0)
    dense_params_layer = (mc.params_total - mc.params_embedding - mc.params_expert) / mc.layers
    attn_params_layer = d.attention_linear_params / mc.layers
    # expected share of experts that at least one token routes to (uniform routing)
    share = mc.top_k / mc.experts if mc.experts > 0 else 1.0
    touched = 1.0 - (1.0 - share) ** np.maximum(tok, 0.0)
    head_params = mc.vocab * mc.h
    dense_bytes = (
        layers * ((dense_params_layer - attn_params_layer) * wbytes + attn_params_layer * WEIGHT_BYTES[attn_prec]) / ta
        + head_params * 2.0 / ta * head_share
    )
    dense_weights = dense_bytes / (gpu.hbm_bw_gbps * 1e9 * eff.weight_read_memory)
    expert_weights = layers * moe_frac * expert_params_layer * touched / tp * wbytes / expert_hbm
    gemm = np.where(dense_gemm >= dense_weights, dense_gemm, 0.0) + np.where(
        expert_gemm >= expert_weights, expert_gemm, 0.0
    )
    weights = np.where(dense_gemm >= dense_weights, 0.0, dense_weights) + np.where(
        expert_gemm >= expert_weights, 0.0, expert_weights
    )

    # attention: decode reads the KV cache, prefill is causal FLOPs
    core = mc.fwd_core_per_token_per_ctx / mc.layers * layers / tp
    kv_tok = kv_bytes_per_token(d.model, KV_BYTES[d.kv_dtype]) / mc.layers * layers / kv_split(d.model, d.attn_split)
    kv_read = kv_tok * kv_read_factor(d)
    dec_flops = (rbq * dp / mb) * rctx * decode_core_per_ctx(d) * layers
    dec_bytes = (rb / mb) * rctx * kv_read + rtok * kv_tok  # read the cache, write the new tokens' K and V
    dec_compute = dec_flops / peak_attn
    dec_mem = dec_bytes / hbm
    pre_attn = (rp_ctx * dp * pf) * core / peak_attn

    # norms, residual adds, activation function: replicated over TP except the MLP activation; the routed
    # experts' activations and permuted copies are spread over all ranks, the rest is the rank's own tokens
    if mc.experts == 0:
        rank_act, routed_act = float(mc.ffn), 0.0
    else:
        rank_act, routed_act = float(mc.shared_experts * mc.expert_ffn), float(mc.top_k * mc.expert_ffn)
    copies, per_token = _moe_permute_parts(d)
    elem_rank = 8.0 * mc.h + 12.0 * mc.h + 6.0 * rank_act / ta + per_token * moe_frac
    elem_all = 6.0 * routed_act / tp + copies * moe_frac
    elementwise = (rtok * elem_rank + tok * elem_all) * layers / hbm
    moe_fixed = np.full_like(tok, layers * moe_frac * MOE_LAYER_FIXED_S if mc.experts > 0 else 0.0)

    gpd = d.cluster.gpus_per_domain
    act = tok * mc.h * ACT_BYTES
    n_ar = 0.0 if d.attention_dp else 2.0 * layers - (layers * moe_frac if d.ep > 1 else 0.0)
    tp_comm = n_ar * _comm_lookup(d, "all_reduce", act)
    ep_comm = np.zeros_like(tok)
    if d.ep > 1:
        a2a = rtok / ta * mc.top_k * mc.h * ACT_BYTES  # the busiest rank's dispatch ends the barrier
        ep_comm = layers * moe_frac * (2.0 * _comm_lookup(d, "all_to_all", a2a) + EP_EXCHANGE_FIXED_S)
    pp_comm = np.zeros_like(tok)
    if d.pp > 1:
        cross = d.tp * d.pp > gpd
        pp_comm = _comm("send_recv", act / tp, 2, 1 if cross else 2, d.cluster)

    overhead = np.full_like(tok, ITERATION_OVERHEAD_S / pp + layers * LAYER_OVERHEAD_S)
    parts = {
        "gemm": gemm,
        "weights": weights,
        "attention": pre_attn + np.where(dec_compute >= dec_mem, dec_compute, 0.0),
        "kv": np.where(dec_compute >= dec_mem, 0.0, dec_mem),
        "elementwise": elementwise,
        "moe_fixed": moe_fixed,
        "draft": draft_time(d, b, ctx, p, p_ctx, p_seqs, busiest) / pp if d.spec is not None else np.zeros_like(tok),
        "tp": tp_comm,
        "ep": ep_comm,
        "pp": pp_comm,
        "overhead": overhead,
    }
    # pp stage-times per iteration (x 1.0 changes no float: skipped, it costs a pass over large arrays)
    scaled = {k: np.asarray(v * pp if d.pp != 1 else v, dtype=np.float64) for k, v in parts.items()}
    total = np.asarray(sum(scaled.values()), dtype=np.float64)
    return StepParts(
        gemm_s=scaled["gemm"],
        weights_s=scaled["weights"],
        attention_s=scaled["attention"],
        kv_read_s=scaled["kv"],
        elementwise_s=scaled["elementwise"],
        moe_fixed_s=scaled["moe_fixed"],
        draft_s=scaled["draft"],
        tp_comm_s=scaled["tp"],
        ep_comm_s=scaled["ep"],
        pp_comm_s=scaled["pp"],
        overhead_s=scaled["overhead"],
        total_s=total,
    )


def draft_time(d: Deployment, b: F, ctx: F, p: F, p_ctx: F, p_seqs: F, busiest: RankLoad | None = None) -> F:
    """Seconds of the ``k`` draft passes of a speculative iteration: the first runs the iteration's prompt tokens and
    decode sequences through the draft (MTP: the prompt's hidden states feed the module, TensorRT-LLM tech blog 2,
    'MTP Eagle'), the other ``k - 1`` one token per decode sequence; each is the draft's own :func:`step_time` less
    ``ITERATION_OVERHEAD_S`` (one scheduler pass: the drafts run inside the target's iteration). No draft model
    (n-gram lookup): no GPU time."""
    dd, spec = d.draft_deploy, d.spec
    if dd is None or spec is None:
        return np.zeros(np.broadcast(b, p).shape)
    first = step_time(dd, b, ctx, p, p_ctx, p_seqs, busiest=busiest).total_s - ITERATION_OVERHEAD_S
    if spec.tokens == 1:
        return np.asarray(first, dtype=np.float64)
    decode_only = None if busiest is None else RankLoad(decode_seqs=busiest.decode_seqs, decode_ctx=busiest.decode_ctx)
    rest = step_time(dd, b, ctx, busiest=decode_only).total_s - ITERATION_OVERHEAD_S
    return np.asarray(first + (spec.tokens - 1) * rest, dtype=np.float64)


BOTTLENECK_LABELS = {
    "gemm_compute": "Tensor-core compute of the linear layers (compute-bound)",
    "weight_reads": "HBM bandwidth reading the weights (memory-bound decode)",
    "attention_compute": "attention FLOPs",
    "kv_cache_reads": "HBM bandwidth reading the KV cache",
    "elementwise": "memory-bound elementwise kernels",
    "moe_layer_fixed": "fixed latency of the MoE layers' router, top-k and grouped-GEMM kernels",
    "speculative_draft": "speculative decoding's draft passes",
    "tp_all_reduce": "tensor-parallel all-reduce on {link}",
    "ep_all_to_all": "expert-parallel all-to-all on {link}",
    "pp_send_recv": "pipeline send/recv on {link}",
    "overhead": "per-iteration scheduler and launch overhead",
}


def bottleneck(parts: dict[str, float], link: str) -> str:
    """The largest part of an iteration, in words, with its share."""
    total = sum(parts.values())
    top = max(parts, key=lambda k: parts[k])
    return f"{BOTTLENECK_LABELS[top].format(link=link)}: {100 * parts[top] / total:.0f} % of an iteration"
