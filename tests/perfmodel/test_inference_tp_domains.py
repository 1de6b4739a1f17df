"""Serving TP across NVLink domains (TP 16 over two 8-GPU H100 nodes, as vLLM and SGLang serve DeepSeek-V3):
the collectives on the hierarchical placement, memory and KV replication, and the errors."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fmstack.catalog import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel.collectives import GroupPlacement, collective_time_s
from fmstack.perfmodel.inference import ServeConfig, deployment, estimate_serve, memory_of
from fmstack.perfmodel.inference_step import COMM_GRID_BYTES, _comm_lookup, step_time


def test_decode_all_reduce_is_the_hierarchical_placement(catalog: Catalog) -> None:
    # Llama 3.1 70B TP 16 on 2 x p5.48xlarge: 16 ranks, 8 in each NVLink domain; two all-reduces of the
    # activations (b x 8192 x 2 B) per layer, 80 layers: 160 all-reduces an iteration
    cluster = build_cluster(catalog, "p5.48xlarge", 2)
    d = deployment(catalog.model("llama3.1-70b"), cluster, ServeConfig(tp=16))
    hier = GroupPlacement(num_ranks=16, ranks_per_domain=8)
    grid = COMM_GRID_BYTES[::40]  # table nodes: the lookup is the collectives model there
    want = np.asarray(collective_time_s("all_reduce", grid, hier, cluster))
    assert np.allclose(_comm_lookup(d, "all_reduce", grid), want, rtol=1e-9, atol=0.0)
    for b in (1.0, 16.0, 256.0):
        act = b * 8192 * 2.0
        t = float(step_time(d, b, 1500.0).tp_comm_s)
        assert t == pytest.approx(160 * float(collective_time_s("all_reduce", act, hier, cluster)), rel=0.01)
        # the same message inside one domain (TP 8 on one node) is faster: the fabric step costs
        one = float(collective_time_s("all_reduce", act, GroupPlacement(num_ranks=8, ranks_per_domain=8), cluster))
        assert t / 160 > one


def test_ep_all_to_all_across_nodes(catalog: Catalog) -> None:
    cluster = build_cluster(catalog, "p5.48xlarge", 2)
    d = deployment(catalog.model("deepseek-v3"), cluster, ServeConfig(tp=16, ep=16, precision="fp8"))
    grid = COMM_GRID_BYTES[::40]
    want = collective_time_s("all_to_all", grid, GroupPlacement(num_ranks=16, ranks_per_domain=8), cluster)
    assert np.allclose(_comm_lookup(d, "all_to_all", grid), np.asarray(want), rtol=1e-9, atol=0.0)
    # EP 8 inside TP 16: the expert group stays in one node
    d8 = deployment(catalog.model("deepseek-v3"), cluster, ServeConfig(tp=16, ep=8, precision="fp8"))
    in_node = collective_time_s("all_to_all", grid, GroupPlacement(num_ranks=8, ranks_per_domain=8), cluster)
    assert np.allclose(_comm_lookup(d8, "all_to_all", grid), np.asarray(in_node), rtol=1e-9, atol=0.0)


def test_memory_weights_halve_kv_heads_replicate(catalog: Catalog) -> None:
    m = catalog.model("llama3.1-70b")  # 8 kv heads: at TP 16 each is held by 2 GPUs
    m8 = memory_of(deployment(m, build_cluster(catalog, "p5.48xlarge", 1), ServeConfig(tp=8)))
    m16 = memory_of(deployment(m, build_cluster(catalog, "p5.48xlarge", 2), ServeConfig(tp=16)))
    assert m16.weights_gib == pytest.approx(m8.weights_gib / 2, rel=1e-12)
    assert m16.kv_bytes_per_token_gpu == m8.kv_bytes_per_token_gpu == 2 * 80 * 8 * 128 * 2 / 8
    # the replica's tokens grow only with the pool per GPU (replicated heads), not with the GPU count
    assert m16.kv_tokens / m8.kv_tokens == pytest.approx(m16.kv_pool_gib / m8.kv_pool_gib, rel=1e-3)
    ds = catalog.model("deepseek-v3")  # MLA: the latent is replicated over TP at any degree
    mem = memory_of(deployment(ds, build_cluster(catalog, "p5.48xlarge", 2), ServeConfig(tp=16, precision="fp8")))
    assert mem.kv_bytes_per_token_gpu == 61 * (512 + 64) * 1


def test_tp16_pays_for_the_fabric(catalog: Catalog) -> None:
    m = catalog.model("llama3.1-70b")
    one, two = build_cluster(catalog, "p5.48xlarge", 1), build_cluster(catalog, "p5.48xlarge", 2)
    for c in (1, 16, 64):
        e8 = estimate_serve(m, one, ServeConfig(tp=8, input_len=1000, output_len=1000, concurrency=c))
        e16 = estimate_serve(m, two, ServeConfig(tp=16, input_len=1000, output_len=1000, concurrency=c))
        assert e16.num_gpus == 16 and e8.num_gpus == 8
        assert e16.iteration_parts_s["weight_reads"] < e8.iteration_parts_s["weight_reads"]
        assert e16.iteration_parts_s["tp_all_reduce"] > e8.iteration_parts_s["tp_all_reduce"]
        assert e16.output_tokens_per_s_per_gpu < e8.output_tokens_per_s_per_gpu
    assert "efa" in e16.bottleneck and "efa" not in e8.bottleneck


def test_deepseek_v3_fp8_fits_on_two_h100_nodes(catalog: Catalog) -> None:
    ds = catalog.model("deepseek-v3")
    cfg = ServeConfig(tp=8, precision="fp8", input_len=1000, output_len=1000, concurrency=16)
    with pytest.raises(InputError, match="does not fit at tp"):
        estimate_serve(ds, build_cluster(catalog, "p5.48xlarge", 1), cfg)
    est = estimate_serve(ds, build_cluster(catalog, "p5.48xlarge", 2), replace(cfg, tp=16))
    assert est.num_gpus == 16 and est.max_concurrency > 16 and est.itl_s > 0


def test_errors(catalog: Catalog) -> None:
    cfg = ServeConfig(tp=16, input_len=128, output_len=128)
    with pytest.raises(InputError, match=r"^nodes: tp\(16\) needs 2 nodes of 8 GPUs; the cluster has 1"):
        estimate_serve(catalog.model("llama3.1-70b"), build_cluster(catalog, "p5.48xlarge", 1), cfg)
    # 96 heads: TP 12 divides them but is not a multiple of the 8-GPU domain; TP 24 on 3 nodes is fine
    gpt = catalog.model("gpt3-175b")
    with pytest.raises(InputError, match="TP must stay inside one domain or span whole domains"):
        estimate_serve(gpt, build_cluster(catalog, "p5.48xlarge", 2), ServeConfig(tp=12, input_len=128, output_len=128))
    est = estimate_serve(
        gpt, build_cluster(catalog, "p5.48xlarge", 3), ServeConfig(tp=24, input_len=128, output_len=128)
    )
    assert est.num_gpus == 24
    with pytest.raises(InputError, match=r"^tp: tp\(12\) > 8 GPUs per NVLink domain"):  # the Deployment alone too
        deployment(gpt, build_cluster(catalog, "p5.48xlarge", 2), ServeConfig(tp=12))
