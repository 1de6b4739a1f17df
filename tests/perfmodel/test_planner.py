"""Planner: vectorised equals scalar, published configurations are found and beaten, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from fmstack.catalog import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel.config import TrainConfig
from fmstack.perfmodel.efficiency import default_efficiency
from fmstack.perfmodel.modelconsts import model_consts
from fmstack.perfmodel.planner import SearchSpace, enumerate_space, evaluate, plan_training
from fmstack.perfmodel.step import step_model
from fmstack.perfmodel.training import estimate_training


def test_vectorised_and_scalar_paths_agree(catalog: Catalog) -> None:
    model = catalog.model("llama3.1-70b")
    cluster = build_cluster(catalog, "p5.48xlarge", 32)
    cols, _ = enumerate_space(model, cluster, SearchSpace(seq_len=4096, global_batch=512))
    arrays = evaluate(model, cluster, cols)
    rng = np.random.default_rng(7)
    for i in rng.choice(len(cols), size=25, replace=False):
        est = estimate_training(model, cluster, cols.row(int(i)))
        assert est.step_time_s == pytest.approx(float(arrays.step_s[i]), rel=1e-12)
        assert est.memory.total_gib * 2**30 == pytest.approx(float(arrays.memory.total[i]), rel=1e-12)
        assert est.mfu == pytest.approx(float(arrays.model_flops[i] / (arrays.step_s[i] * 256 * 989.5e12)), rel=1e-12)


def test_chunked_evaluation_equals_one_pass(catalog: Catalog) -> None:
    model = catalog.model("llama3.1-8b")
    cluster = build_cluster(catalog, "p5.48xlarge", 4)
    cols, _ = enumerate_space(model, cluster, SearchSpace(seq_len=4096, global_batch=256))
    whole = step_model(model_consts(model), cluster, default_efficiency(cluster.gpu), cols)
    chunked = evaluate(model, cluster, cols, chunk=97)
    np.testing.assert_allclose(whole.step_s, chunked.step_s, rtol=1e-12)


@pytest.mark.parametrize(
    ("model", "system", "nodes", "published", "space"),
    [
        # T026: Korthikanti et al. 2022 Table 5, GPT-3 175B on 64 A100, selective recompute + SP
        (
            "gpt3-175b", "dgx-a100", 8,
            TrainConfig(tp=8, pp=8, dp=1, virtual_stages=3, micro_batch=1, global_batch=64, seq_len=2048,
                        precision="fp16", recompute="selective", sharding="none", sequence_parallel=True,
                        flash_attention=False),
            SearchSpace(seq_len=2048, global_batch=64, precisions=("fp16",), sharding=("none", "zero1", "fsdp"),
                        flash_attention=False, overlap_tp=False),  # 2022 Megatron-LM: no TE userbuffers overlap
        ),
        # T065: NeMo 24.07 Llama 3 70B on 64 H100, FP8 (the launcher's llama3_70b.yaml: ub_tp_comm_overlap true)
        (
            "llama3-70b", "dgx-h100", 8,
            TrainConfig(tp=4, pp=4, dp=2, cp=2, virtual_stages=5, micro_batch=1, global_batch=128, seq_len=8192,
                        precision="fp8", recompute="none", sharding="zero1", sequence_parallel=True, overlap_tp=True),
            SearchSpace(seq_len=8192, global_batch=128, precisions=("fp8",)),
        ),
    ],
)  # fmt: skip
def test_best_is_at_least_as_fast_as_published_and_published_is_ranked(
    catalog: Catalog, model: str, system: str, nodes: int, published: TrainConfig, space: SearchSpace
) -> None:
    arch = catalog.model(model)
    cluster = build_cluster(catalog, system, nodes)
    result = plan_training(arch, [cluster], tokens=1e11, space=space, include=published)
    assert result.included_rank is not None, "the published configuration must be in the ranking"
    published_est = estimate_training(arch, cluster, published)
    assert published_est.fits
    assert result.best.step_time_s <= published_est.step_time_s
    assert result.considered == result.rejected_shape + result.rejected_memory + _fitting(result, arch, cluster, space)


def _fitting(result: object, arch: object, cluster: object, space: SearchSpace) -> int:
    from fmstack.perfmodel.memory import GIB

    cols, _ = enumerate_space(arch, cluster, space)  # type: ignore[arg-type]
    arrays = evaluate(arch, cluster, cols)  # type: ignore[arg-type]
    usable = cluster.gpu.hbm_gib - 3.0  # type: ignore[attr-defined]
    return int((arrays.memory.total / GIB <= usable).sum())


def test_several_instances_and_cost_objective(catalog: Catalog) -> None:
    arch = catalog.model("llama3.1-8b")
    clusters = [build_cluster(catalog, name, 4) for name in ("p5.48xlarge", "p5en.48xlarge", "p6-b200.48xlarge")]
    result = plan_training(arch, clusters, tokens=1e12, objective="cost", top=5, space=SearchSpace(seq_len=4096))
    costs = [c for c in result.cost_usd if c is not None]
    assert costs == sorted(costs) and len(costs) == 5
    est = result.best
    price = next(c for c in clusters if c.name == est.instance).instance.price_per_hour_usd
    assert costs[0] == pytest.approx(1e12 / est.tokens_per_s / 3600 * price * 4)


def test_nothing_fits_names_the_shortfall(catalog: Catalog) -> None:
    arch = catalog.model("llama3.1-405b")
    cluster = build_cluster(catalog, "p5.48xlarge", 1)
    with pytest.raises(InputError, match=r"no configuration of llama3.1-405b fits: .*GiB short"):
        plan_training(arch, [cluster], tokens=1e12, space=SearchSpace(seq_len=8192))


def test_bad_objective_and_tokens(catalog: Catalog) -> None:
    arch = catalog.model("llama3.1-8b")
    cluster = build_cluster(catalog, "p5.48xlarge", 1)
    with pytest.raises(InputError, match="allowed: time, cost, mfu"):
        plan_training(arch, [cluster], tokens=1e12, objective="speed")
    with pytest.raises(InputError, match="tokens"):
        plan_training(arch, [cluster], tokens=0)


def test_moe_space_overlaps_the_all_to_all_where_it_can_and_both_paths_agree(catalog: Catalog) -> None:
    model = catalog.model("qwen3-30b-a3b")
    cluster = build_cluster(catalog, "p5.48xlarge", 4)
    cols, considered = enumerate_space(model, cluster, SearchSpace(seq_len=4096, global_batch=256))
    assert cols.overlap_ep is not None
    overlapped = cols.overlap_ep == 1.0
    m = cols.gb / (cols.dp * cols.mb)
    # the overlap is used exactly where it can hide something: ep > 1, more than one micro-batch and, with pp > 1,
    # virtual stages (Megatron-Core's rule); it never costs memory nor time, so the row without it is dominated;
    # SearchSpace(overlap_ep=False) turns it off
    assert overlapped.any() and np.array_equal(overlapped, (cols.ep > 1) & (m > 1) & ((cols.pp == 1) | (cols.vpp > 1)))
    off, _ = enumerate_space(model, cluster, SearchSpace(seq_len=4096, global_batch=256, overlap_ep=False))
    assert off.overlap_ep is not None and not off.overlap_ep.any() and len(off) == len(cols)
    # selective module sets beyond Megatron's default (layernorm + moe_act; qwen3 has no MLA), only with selective
    assert set(np.unique(cols.rc_modules[cols.recompute == 1]).tolist()) == {0.0, 1.0 * 2 + 1.0 * 4}
    assert np.all(cols.rc_modules[cols.recompute != 1] == 0)
    arrays = evaluate(model, cluster, cols)
    rng = np.random.default_rng(3)
    picks = np.concatenate([rng.choice(np.nonzero(overlapped)[0], 10, replace=False),
                            rng.choice(np.nonzero(cols.rc_modules > 0)[0], 10, replace=False)])  # fmt: skip
    for i in picks:
        row = cols.row(int(i))
        est = estimate_training(model, cluster, row)
        assert est.step_time_s == float(arrays.step_s[i])  # same formulas: same bits (test_scalar_path)
        assert est.memory.total_gib * 2**30 == float(arrays.memory.total[i])
    assert considered >= len(cols)
    no_overlap = evaluate(model, cluster, off)
    assert np.all(arrays.step_s <= no_overlap.step_s) and np.any(arrays.step_s < no_overlap.step_s)
    assert np.array_equal(arrays.memory.total, no_overlap.memory.total)


def test_deepseek_v3_plan_finds_the_hand_config_and_beats_it_with_ep_overlap(catalog: Catalog) -> None:
    # the review's hand configuration on 2,048 H100 (DeepSeek-V3 report: 4k sequences, 15,360 per step, FP8); it has
    # pp 16 without virtual stages, where Megatron-Core does not allow the expert all-to-all overlap
    arch = catalog.model("deepseek-v3")
    cluster = build_cluster(catalog, "p5.48xlarge", 256)
    hand = TrainConfig(pp=16, ep=64, dp=128, global_batch=15360, seq_len=4096, precision="fp8", recompute="selective",
                       recompute_modules=("layernorm", "mla_up_proj", "moe_act"))  # fmt: skip
    with pytest.raises(InputError, match="overlap-ep"):
        estimate_training(arch, cluster, hand.with_(overlap_ep=True))
    space = SearchSpace(seq_len=4096, global_batch=15360, precisions=("fp8",))
    result = plan_training(arch, [cluster], tokens=1e12, space=space, include=hand, top=3)
    hand_est = estimate_training(arch, cluster, hand)
    assert hand_est.fits and result.included_rank is not None
    assert result.best.step_time_s <= hand_est.step_time_s
    assert result.best.config.overlap_ep  # the all-to-all overlap is part of the winner
