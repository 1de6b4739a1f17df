"""PyTorch FSDP mixed precision (``--master-weights fp32-params``) and the gradient dtype (``--grad-dtype``): bytes
per parameter by hand for memory, the optimizer step and the gathers, the refusals, and the RL default on veRL's
FSDP backend (docs/perfmodel.md "Storage layouts")."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fmstack.catalog import load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel.columns import columns_of
from fmstack.perfmodel.config import TrainConfig, fill_defaults, reduce_bytes_of, validate_layout
from fmstack.perfmodel.efficiency import default_efficiency
from fmstack.perfmodel.memory import layout_bytes_per_param
from fmstack.perfmodel.planner import SearchSpace, plan_training
from fmstack.perfmodel.rl import RLConfig, estimate_rl
from fmstack.perfmodel.rl_config import train_master_weights
from fmstack.perfmodel.training import estimate_training

CAT = load_catalog(None)
GIB = 2.0**30
LLAMA31_8B = 8_030_261_248
"""Llama 3.1 8B's parameters (tests/perfmodel/test_optimizer_layouts.py works them out)."""
FSDP = TrainConfig(dp=16, global_batch=16, seq_len=8192, sharding="fsdp")
PARAMS = replace(FSDP, master_weights="fp32-params", reduce_bytes=4)


def _est(cfg: TrainConfig):  # type: ignore[no-untyped-def]
    return estimate_training(CAT.model("llama3.1-8b"), build_cluster(CAT, "p5.48xlarge", 2), cfg)


def test_layout_bytes_by_hand() -> None:
    b = layout_bytes_per_param(columns_of(PARAMS))
    assert (b.weights, b.optimizer, b.gather, b.cast) == (4.0, 8.0, 2.0, 4.0 + 2.0)  # fp32 param; m + v; bf16; cast
    d = layout_bytes_per_param(columns_of(FSDP))
    assert (d.weights, d.optimizer, d.gather, d.cast) == (2.0, 12.0, 2.0, 0.0)


def test_memory_16_bytes_per_sharded_parameter_against_18() -> None:
    """Llama 3.1 8B on 16 GPUs: weights 4, grads 4, Adam 8 B per parameter / 16, vs 2 + 4 + 12 by default."""
    new, old = _est(PARAMS).memory, _est(FSDP).memory
    local = LLAMA31_8B / 16
    assert new.weights_gib == pytest.approx(local * 4 / GIB, rel=1e-12)
    assert new.grads_gib == pytest.approx(local * 4 / GIB, rel=1e-12)
    assert new.optimizer_gib == pytest.approx(local * 8 / GIB, rel=1e-12)
    state_new = new.weights_gib + new.grads_gib + new.optimizer_gib
    state_old = old.weights_gib + old.grads_gib + old.optimizer_gib
    assert state_old - state_new == pytest.approx(local * 2 / GIB, rel=1e-12)  # 0.935 GiB
    assert new.temporary_gib == pytest.approx(old.temporary_gib, rel=1e-12)  # two layers gathered in bf16 both ways


def test_optimizer_step_32_over_38_bytes() -> None:
    assert _est(PARAMS).optimizer_s / _est(FSDP).optimizer_s == pytest.approx(32 / 38, rel=1e-12)


def test_gather_adds_the_cast_of_the_local_shard() -> None:
    """Same gather bytes (bf16) on the wire; with the same reduction bytes the link time grows by the cast of the local
    fp32 shard (read 4, write 2 B per local parameter over HBM) before each of the 2 gathers (forward, backward) of the
    one micro-batch (gb 16 = dp 16 x mb 1)."""
    cluster = build_cluster(CAT, "p5.48xlarge", 2)
    hbm_bps = cluster.gpu.hbm_bw_gbps * 1e9 * default_efficiency(cluster.gpu).memory
    local = LLAMA31_8B / 16
    extra = _est(PARAMS).comm["dp"].link_s - _est(FSDP).comm["dp"].link_s  # both 4 B: FSDP's fp32 gradients
    assert extra == pytest.approx(2 * local * 6 / hbm_bps, rel=1e-9)


def test_refusals() -> None:
    for cfg, field in [
        (replace(PARAMS, sharding="zero1"), "master-weights"),
        (replace(PARAMS, sharding="zero3"), "master-weights"),
        (replace(PARAMS, precision="fp8"), "master-weights"),
        (replace(PARAMS, grad_bytes=2), "grad-dtype"),
        (replace(FSDP, grad_bytes=3), "grad-dtype"),
    ]:
        with pytest.raises(InputError) as err:
            validate_layout(cfg)
        assert err.value.field == field


def test_grad_dtype_flag_sets_grad_and_wire_bytes() -> None:
    bf16 = fill_defaults(8, {"grad_dtype": "bf16"})
    assert (bf16.grad_bytes, reduce_bytes_of(bf16)) == (2, 2)
    params = fill_defaults(8, {"sharding": "fsdp", "master_weights": "fp32-params"})
    assert (params.grad_bytes, params.reduce_bytes) == (4, 4)
    dflt = fill_defaults(8, {})
    assert (dflt.grad_bytes, reduce_bytes_of(dflt)) == (4, 4)  # fp32 gradients reduced in fp32 (Megatron-Core, bf16)


def test_bf16_gradients_halve_the_gradient_memory() -> None:
    zero1 = TrainConfig(dp=16, global_batch=16, seq_len=8192)
    g32, g16 = _est(zero1).memory.grads_gib, _est(replace(zero1, grad_bytes=2)).memory.grads_gib
    assert g32 == pytest.approx(LLAMA31_8B * 4 / GIB, rel=1e-12)
    assert g16 == pytest.approx(g32 / 2, rel=1e-12)


def test_planner_with_fp32_params_ranks_fsdp_rows_with_it() -> None:
    from fmstack.cli.plan_cmd import with_layout

    space = with_layout(SearchSpace(seq_len=4096, global_batch=64), None, "fp32-params", None, None)
    assert space.sharding == ("fsdp",)
    plan = plan_training(CAT.model("llama3.1-8b"), [build_cluster(CAT, "p5.48xlarge", 1)], tokens=1e12, top=5,
                         space=space)  # fmt: skip
    for est in plan.ranked:
        assert (est.config.master_weights, reduce_bytes_of(est.config)) == ("fp32-params", 4)
        again = _rank_again(est.config)
        assert again.memory.total_gib == pytest.approx(est.memory.total_gib, rel=1e-12)
        assert again.step_time_s == pytest.approx(est.step_time_s, rel=1e-12)


def _rank_again(cfg: TrainConfig):  # type: ignore[no-untyped-def]
    return estimate_training(CAT.model("llama3.1-8b"), build_cluster(CAT, "p5.48xlarge", 1), cfg)


def test_rl_fsdp_default_is_veRLs_fp32_parameters() -> None:
    short = RLConfig(prompts_per_step=64, samples_per_prompt=8, prompt_len=256, response_len=256, train_tp=1)
    assert train_master_weights(short) == "fp32-params"
    assert train_master_weights(replace(short, train_tp=8)) == "fp32"
    cluster = build_cluster(CAT, "p5.48xlarge", 2)
    est = estimate_rl(CAT.model("llama3.1-8b"), cluster, short)
    assert est.train_step["config"]["master_weights"] == "fp32-params"
    old = estimate_rl(CAT.model("llama3.1-8b"), cluster, replace(short, master_weights="fp32"))
    assert old.train_step["config"]["master_weights"] == "fp32"
    with pytest.raises(InputError) as err:
        estimate_rl(CAT.model("llama3.1-8b"), cluster, replace(short, grad_dtype="bf16"))
    assert err.value.field == "grad-dtype"


def test_estimate_command_gives_the_layout_back() -> None:
    from fmstack.cli.estimate_cmd import estimate_argv

    argv = estimate_argv("llama3.1-8b", "p5.48xlarge", 16, PARAMS)
    assert argv[argv.index("--master-weights") + 1] == "fp32-params" and "--grad-dtype" not in argv
    argv = estimate_argv("llama3.1-8b", "p5.48xlarge", 16, replace(FSDP, grad_bytes=2))
    assert argv[argv.index("--grad-dtype") + 1] == "bf16"
