"""MoE terms of the training step model, checked by hand (Qwen3-30B-A3B: h 2048, 128 experts, top 8, f_e 768)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fmstack.catalog import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.perfmodel.columns import columns_from_configs
from fmstack.perfmodel.config import TrainConfig
from fmstack.perfmodel.efficiency import default_efficiency
from fmstack.perfmodel.modelconsts import model_consts
from fmstack.perfmodel.step import _elementwise_bytes_per_token_layer, _ep_pair_excess, step_model
from fmstack.perfmodel.training import estimate_training


def test_moe_memory_bound_bytes_per_token_layer(catalog: Catalog) -> None:
    mc = model_consts(catalog.model("qwen3-30b-a3b"))
    assert (mc.h, mc.experts, mc.top_k, mc.expert_ffn, mc.moe_layers, mc.layers) == (2048, 128, 8, 768, 48, 48)
    h, k, f, e = 2048.0, 8.0, 768.0, 128.0
    common = 8 * h + 12 * h + 6 * k * f  # two norms, residual adds, SwiGLU of the 8 routed copies
    # ep 8 (16 local experts): permute 4kh, sort + unsort chunks 8kh, unpermute 2kh + 2h, router 12 E (bytes)
    ep8 = columns_from_configs([TrainConfig(dp=8, ep=8)])
    assert _elementwise_bytes_per_token_layer(mc, ep8)[0] == pytest.approx(common + 14 * k * h + 2 * h + 12 * e)
    # ep 1 keeps every expert local, but 128 of them: the chunk sort still runs
    ep1 = columns_from_configs([TrainConfig(dp=8, ep=1)])
    assert _elementwise_bytes_per_token_layer(mc, ep1)[0] == pytest.approx(common + 14 * k * h + 2 * h + 12 * e)
    # fp8 adds 3 B per element of every GEMM input: QKV reads h, the output projection 32 heads x 128 = 4096
    # (the model card's num_attention_heads and head_dim, twice h), each routed copy h + f_e
    assert mc.q_width == 32 * 128
    fp8 = columns_from_configs([TrainConfig(dp=8, ep=8, precision="fp8")])
    extra = 3.0 * (h + 4096 + k * (h + f))
    assert _elementwise_bytes_per_token_layer(mc, fp8)[0] == pytest.approx(common + 14 * k * h + 2 * h + 12 * e + extra)


def test_ep_overlap_pairs_each_all_to_all_with_one_node(catalog: Catalog) -> None:
    """Megatron-Core's combined 1F1B, one MoE layer of a forward (F) / backward (B) pair: F.attn | B.combine,
    B.expert | F.dispatch, F.expert | B.dispatch, B.attn | F.combine, each phase as long as its longer node; the
    unpermute and the MLP residual add run in the combine node, on the communication stream."""
    mc = model_consts(catalog.model("qwen3-30b-a3b"))
    c = columns_from_configs([TrainConfig(dp=16, ep=16, seq_len=4096)])
    h, k, f, e = 2048.0, 8.0, 768.0, 128.0
    tokens, fps, hbm, a2a = 4096.0, 1e15, 1e12, 1.5e-3
    # attention node: QKV (32 x 128 query, 2 x 4 x 128 key/value) + output projection + router (the q/k norms'
    # 2 x 128 weights count as attention parameters), causal core 4 x 4096 x seq / 2; norms 8h, the attention
    # residual 6h, permute 4kh, router 12E bytes
    attn_flops = 2 * (h * (4096 + 1024) + 4096 * h + 2 * 128) + 2 * h * e + 4 * 4096 * 4096 / 2
    attn = tokens * (attn_flops / fps + (8 * h + 6 * h + 4 * k * h + 12 * e) / hbm)
    # expert node: 8 routed SwiGLU experts (3 GEMMs of h x f), SwiGLU 6kf, chunk sort + unsort 8kh bytes
    expert = tokens * (k * 3 * 2 * h * f / fps + (6 * k * f + 8 * k * h) / hbm)
    # combine node's compute: unpermute 2kh + 2h, the MLP residual add 6h bytes
    unperm = tokens * (2 * k * h + 2 * h + 6 * h) / hbm
    phases = max(attn, a2a + 2 * unperm) + max(2 * expert, a2a) + max(expert, a2a) + max(2 * attn, a2a + unperm)
    want = phases - 3 * (attn + expert + unperm)
    got = _ep_pair_excess(mc, c, a2a, 0.0, tokens, fps, fps, fps, hbm, 0.5, 0.0)
    assert got[0] == pytest.approx(want)
    # the pairing hides no more than the layer's whole compute would (the bound the model used before)
    assert want > max(0.0, 4 * a2a - 3 * (attn + expert + unperm)) > 0
    # an all-to-all far shorter than every node hides entirely
    assert _ep_pair_excess(mc, c, 1e-6, 0.0, tokens, fps, fps, fps, hbm, 0.5, 0.0)[0] == 0.0


def test_ep_overlap_exposes_the_pairs_excess(catalog: Catalog) -> None:
    mc = model_consts(catalog.model("qwen3-235b-a22b"))
    cluster = build_cluster(catalog, "dgx-h100", 32)
    eff = default_efficiency(cluster.gpu)
    base = TrainConfig(tp=2, pp=8, dp=16, ep=32, virtual_stages=4, sequence_parallel=True, global_batch=2048,
                       seq_len=4096, precision="fp8")  # fmt: skip
    plain, ovl = (step_model(mc, cluster, eff, columns_from_configs([base.with_(overlap_ep=o)])) for o in (False, True))
    assert plain.ep_exposed_s[0] == plain.ep_link_s[0] > 0
    assert ovl.ep_link_s[0] == plain.ep_link_s[0]
    # 2048 / (1 x 16) = 128 micro-batches: 127 pairs, the first forward and last backward expose one link
    m = 128
    exposed_pair = (ovl.ep_exposed_s[0] - plain.ep_link_s[0] / m) / (m - 1)  # all MoE layers of a stage
    assert 0 < exposed_pair < plain.ep_link_s[0] / m
    compute = plain.gemm_s[0] + plain.attention_s[0] + plain.memory_bound_s[0] + plain.recompute_s[0]
    assert exposed_pair >= max(0.0, plain.ep_link_s[0] - compute) / m
    assert ovl.step_s[0] < plain.step_s[0]
    # one micro-batch per step: nothing to overlap with, the link is exposed in full
    one = base.with_(dp=16, global_batch=16)
    alone, alone_ovl = (
        step_model(mc, cluster, eff, columns_from_configs([one.with_(overlap_ep=o)])) for o in (False, True)
    )
    assert alone_ovl.ep_exposed_s[0] == alone.ep_exposed_s[0] == alone.ep_link_s[0] > 0
    assert alone_ovl.step_s[0] == alone.step_s[0]
    # pp > 1 without virtual stages: Megatron-Core has no combined schedule for it, nothing is hidden
    flat = base.with_(virtual_stages=1)
    flat_plain, flat_ovl = (
        step_model(mc, cluster, eff, columns_from_configs([flat.with_(overlap_ep=o)])) for o in (False, True)
    )
    assert flat_ovl.step_s[0] == flat_plain.step_s[0]
    # the planner's columns have no overlap_ep column: the same as all False
    cols = columns_from_configs([base])
    no_col = step_model(mc, cluster, eff, replace(cols, overlap_ep=None))
    assert np.array_equal(no_col.step_s, plain.step_s)


# Megatron-Bridge docs/training/communication-overlap.md (PR #3862, 2026-05-18): Qwen3-30B-A3B on 16 H100 (2 nodes),
# the H100 BF16 v1 recipe (TP1 PP1 EP16, MBS 1, GBS 1024, seq 4096, grad_reduce_in_fp32=False, force-balanced,
# dropless) with the plain all-to-all dispatcher forced (`moe_flex_dispatcher_backend None`), no CUDA graphs,
# moe_permute_fusion off: 41.25 s per step without EP overlap, 31.31 s with it (steady mean, iterations 3-8).
# docs/training/cuda-graphs.md (PR #3868), the same shape: CUDA graphs of attn + moe_router + moe_preprocess
# 42.00 s vs 41.36 s eager.
PLAIN_A2A_EP16_STEP_S = {False: 41.25, True: 31.31}


def _plain_a2a_ep16_tokens_error(catalog: Catalog, overlap_ep: bool) -> float:
    """Predicted over measured tokens/s - 1 (the validation's error) on the run above."""
    cfg = TrainConfig(tp=1, pp=1, dp=16, ep=16, micro_batch=1, global_batch=1024, seq_len=4096, precision="bf16",
                      grad_bytes=2, overlap_ep=overlap_ep)  # fmt: skip
    est = estimate_training(catalog.model("qwen3-30b-a3b"), build_cluster(catalog, "dgx-h100", 2), cfg)
    return PLAIN_A2A_EP16_STEP_S[overlap_ep] / est.step_time_s - 1.0


def test_plain_alltoall_dispatcher_without_cuda_graphs_ep16(catalog: Catalog) -> None:
    """The plain all-to-all dispatcher on H100 without CUDA graphs, predicted within the issue's 25 % (model 35.9 s
    vs 41.25 s: +15 %). A host cost per MoE layer and micro-batch of the size T069 / T070 miss by (7-20 ms) would
    put this run at -30 to -57 % (docs/perfmodel.md, Validation): this test keeps such a term out."""
    err = _plain_a2a_ep16_tokens_error(catalog, overlap_ep=False)
    assert 0.0 < err <= 0.25


def test_plain_alltoall_dispatcher_with_ep_overlap_ep16(catalog: Catalog) -> None:
    """The same run with EP overlap, within the issue's 25 % (model 25.12 s vs 31.31 s: +24.7 %; the overlap gains
    1.43x in the model, 1.32x measured). Before each all-to-all was paired with its one node of the other
    micro-batch (step._ep_pair_excess) the model hid it behind the whole layer's compute: 23.80 s, +31.5 %, 1.51x."""
    assert abs(_plain_a2a_ep16_tokens_error(catalog, overlap_ep=True)) <= 0.25


def test_expert_tensor_parallelism_charges_its_gather_and_scatter(catalog: Catalog) -> None:
    """etp 2: after each dispatch the 2 ranks of an expert all-gather its tokens and reduce-scatter the outputs
    before the combine, over NVLink (the expert TP group is innermost). Qwen3-30B-A3B, 2 p5 nodes, ep 8, dp 16,
    mb 1, seq 4096: each rank sends 4096 x 8 x 2048 x 2 B = 128 MiB to the all-to-all and gathers 2 x that; per
    micro-batch, 48 MoE layers x (all-gather + reduce-scatter) x 2 (forward, backward)."""
    from fmstack.perfmodel.collectives import GroupPlacement, collective_time_s

    cluster = build_cluster(catalog, "p5.48xlarge", 2)
    model = catalog.model("qwen3-30b-a3b")
    base = TrainConfig(dp=16, ep=8, global_batch=16, seq_len=4096)
    one, two = estimate_training(model, cluster, base), estimate_training(model, cluster, base.with_(etp=2))
    size = 4096 * 8 * 2048 * 2.0 * 2
    pair = GroupPlacement(num_ranks=2, ranks_per_domain=2)
    xchg = float(
        collective_time_s("all_gather", size, pair, cluster) + collective_time_s("reduce_scatter", size, pair, cluster)
    )
    assert two.comm["ep"].link_s - one.comm["ep"].link_s == pytest.approx(48 * xchg * 2, rel=1e-9)
    assert two.memory.total_gib < one.memory.total_gib  # each rank holds half of each local expert
