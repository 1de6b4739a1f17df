"""One estimate runs the step model on plain floats; the planner on arrays. Same formulas, so the same bits."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest

from fmstack.catalog import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.perfmodel.columns import columns_from_configs, columns_of
from fmstack.perfmodel.config import TrainConfig
from fmstack.perfmodel.efficiency import default_efficiency
from fmstack.perfmodel.memory import MemoryArrays
from fmstack.perfmodel.modelconsts import model_consts
from fmstack.perfmodel.num import gcd, maximum, minimum, where
from fmstack.perfmodel.step import StepArrays, step_model

T = TrainConfig
CASES = [
    ("llama3.1-70b", 64, T(tp=8, pp=4, dp=16, sequence_parallel=True, global_batch=1024, seq_len=8192)),
    ("llama3.1-70b", 64, T(tp=8, pp=4, dp=16, global_batch=1024, seq_len=8192, virtual_stages=5, recompute="full")),
    ("llama3.1-70b", 64, T(tp=8, dp=64, sharding="fsdp", global_batch=512, seq_len=8192, overlap_dp=False)),
    ("llama3.1-70b", 64, T(tp=8, dp=64, sharding="hsdp", hsdp_shard_size=16, global_batch=512, seq_len=8192)),
    ("llama3.1-8b", 1, T(dp=8, sharding="none", global_batch=64, seq_len=4096, flash_attention=False)),
    ("llama3.1-8b", 4, T(dp=32, sharding="zero3", global_batch=256, micro_batch=2, precision="fp8")),
    ("llama3.1-405b", 2048, T(tp=8, pp=16, cp=16, dp=8, global_batch=128, seq_len=131072, recompute="selective")),
    ("qwen3-30b-a3b", 8, T(ep=8, dp=64, sharding="fsdp", global_batch=512, seq_len=4096, overlap_ep=True)),
    ("deepseek-v3", 256, T(pp=16, ep=64, dp=128, global_batch=4096, seq_len=4096, precision="fp8", virtual_stages=2)),
    ("deepseek-v3", 256, T(tp=2, pp=8, ep=32, etp=2, dp=128, global_batch=4096, seq_len=4096, recompute="full")),
    ("qwen3-30b-a3b", 8, T(ep=8, dp=64, global_batch=512, seq_len=4096, precision="fp8", recompute="selective",
                           recompute_modules=("layernorm", "moe_act"))),
    ("deepseek-v3", 256, T(pp=16, ep=64, dp=128, global_batch=4096, seq_len=4096, recompute="selective",
                           recompute_modules=("moe_act", "mla_up_proj"), recompute_layers=2)),
]  # fmt: skip


@pytest.mark.parametrize(("model", "nodes", "cfg"), CASES)
def test_float_columns_give_the_bits_of_one_row_arrays(
    catalog: Catalog, model: str, nodes: int, cfg: TrainConfig
) -> None:
    arch = catalog.model(model)
    cluster = build_cluster(catalog, "p5.48xlarge", nodes)
    mc, eff = model_consts(arch), default_efficiency(cluster.gpu)
    one = step_model(mc, cluster, eff, columns_of(cfg))
    rows = step_model(mc, cluster, eff, columns_from_configs([cfg, cfg.with_(global_batch=cfg.global_batch * 2)]))
    for f in fields(StepArrays):
        if f.name != "memory":
            value = getattr(one, f.name)
            assert type(value) is float, f.name
            assert value == float(getattr(rows, f.name)[0]), f.name
    for f in fields(MemoryArrays):
        assert getattr(one.memory, f.name) == float(getattr(rows.memory, f.name)[0]), f.name


def test_helpers_take_floats_and_arrays() -> None:
    a, b = np.array([1.0, 6.0]), np.array([4.0, 4.0])
    assert where(True, 1.0, 2.0) == 1.0
    assert where(a > b, a, b).tolist() == [4.0, 6.0]
    assert maximum(1.0, 4.0) == 4.0
    assert maximum(a, b).tolist() == [4.0, 6.0]
    assert minimum([6.0, 4.0, 5.0]) == 4.0
    assert minimum([a, 2.0]).tolist() == [1.0, 2.0]
    assert gcd(12.0, 8.0) == 4.0
    assert gcd(np.array([12.0, 9.0]), np.array([8.0, 6.0])).tolist() == [4.0, 3.0]


def test_columns_round_trip_to_the_configs() -> None:
    configs = [cfg for _, _, cfg in CASES]
    cols = columns_from_configs(configs)
    assert [cols.row(i) for i in range(len(configs))] == configs
