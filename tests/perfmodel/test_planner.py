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
                        flash_attention=False),
        ),
        # T065: NeMo 24.07 Llama 3 70B on 64 H100, FP8
        (
            "llama3-70b", "dgx-h100", 8,
            TrainConfig(tp=4, pp=4, dp=2, cp=2, virtual_stages=5, micro_batch=1, global_batch=128, seq_len=8192,
                        precision="fp8", recompute="none", sharding="zero1", sequence_parallel=True),
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
