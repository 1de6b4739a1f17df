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
from fmstack.perfmodel.step import _elementwise_bytes_per_token_layer, step_model
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


def test_ep_overlap_exposes_only_the_excess_over_compute(catalog: Catalog) -> None:
    mc = model_consts(catalog.model("qwen3-235b-a22b"))
    cluster = build_cluster(catalog, "dgx-h100", 32)
    eff = default_efficiency(cluster.gpu)
    base = TrainConfig(tp=2, pp=8, dp=16, ep=32, virtual_stages=4, sequence_parallel=True, global_batch=2048,
                       seq_len=4096, precision="fp8")  # fmt: skip
    plain, ovl = (step_model(mc, cluster, eff, columns_from_configs([base.with_(overlap_ep=o)])) for o in (False, True))
    assert plain.ep_exposed_s[0] == plain.ep_link_s[0] > 0
    assert ovl.ep_link_s[0] == plain.ep_link_s[0]
    compute = plain.gemm_s[0] + plain.attention_s[0] + plain.memory_bound_s[0] + plain.recompute_s[0]
    # 2048 / (1 x 16) = 128 micro-batches: 127 overlap with the next one's compute, the last one's link is exposed
    m = 128
    excess = max(0.0, plain.ep_link_s[0] - compute)
    assert ovl.ep_exposed_s[0] == pytest.approx((m - 1) / m * excess + plain.ep_link_s[0] / m)
    assert ovl.step_s[0] < plain.step_s[0]
    # one micro-batch per step: nothing to overlap with, the link is exposed in full
    one = base.with_(dp=16, global_batch=16)
    alone, alone_ovl = (
        step_model(mc, cluster, eff, columns_from_configs([one.with_(overlap_ep=o)])) for o in (False, True)
    )
    assert alone_ovl.ep_exposed_s[0] == alone.ep_exposed_s[0] == alone.ep_link_s[0] > 0
    assert alone_ovl.step_s[0] == alone.step_s[0]
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


@pytest.mark.xfail(
    strict=True,
    reason="EP overlap gain over-estimated on this run: model 1.51x, measured 1.32x (tokens/s +32 %); "
    "docs/perfmodel.md, Validation",
)
def test_plain_alltoall_dispatcher_with_ep_overlap_ep16(catalog: Catalog) -> None:
    assert abs(_plain_a2a_ep16_tokens_error(catalog, overlap_ep=True)) <= 0.25
