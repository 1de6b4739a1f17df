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
