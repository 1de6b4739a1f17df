"""The storage layout beyond ``estimate train``: the planner's gradient shard on its zero1 rows, every point of a
scale sweep re-planned with the layout, and the trained models of an RL step in it (bytes per parameter by hand)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fmstack.catalog import load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel.config import describe_config
from fmstack.perfmodel.efficiency import default_efficiency
from fmstack.perfmodel.planner import SearchSpace, plan_training
from fmstack.perfmodel.rl import RLConfig, estimate_rl
from fmstack.perfmodel.rl_plan import config_of, plan_rl
from fmstack.perfmodel.scaling import run_sweep
from fmstack.perfmodel.training import estimate_training

CAT = load_catalog(None)
GIB = 2.0**30
LLAMA31_8B = 8_030_261_248
"""Llama 3.1 8B's parameters (tests/perfmodel/test_optimizer_layouts.py works them out)."""
SHORT = RLConfig(prompts_per_step=64, samples_per_prompt=8, prompt_len=256, response_len=256)


def test_planner_puts_the_gradient_shard_on_its_zero1_rows_only() -> None:
    arch = CAT.model("llama3.1-8b")
    cluster = build_cluster(CAT, "p5.48xlarge", 1)
    space = SearchSpace(seq_len=4096, global_batch=64, grad_shard_buffer=True, master_weights="remainder")
    plan = plan_training(arch, [cluster], tokens=1e12, top=50, space=space)
    shardings = {est.config.sharding for est in plan.ranked}
    assert shardings == {"zero1", "fsdp"}  # both kinds of row ranked, so the test sees both
    for est in plan.ranked:
        assert est.config.grad_shard_buffer == (est.config.sharding == "zero1")
        assert est.config.master_weights == "remainder"
        again = estimate_training(arch, cluster, est.config)  # the row is the estimate of its own config
        assert again.step_time_s == pytest.approx(est.step_time_s, rel=1e-12)
        assert again.memory.total_gib == pytest.approx(est.memory.total_gib, rel=1e-12)


def test_planner_refuses_the_gradient_shard_without_zero1() -> None:
    arch = CAT.model("llama3.1-8b")
    space = SearchSpace(sharding=("fsdp",), grad_shard_buffer=True)
    with pytest.raises(InputError) as err:
        plan_training(arch, [build_cluster(CAT, "p5.48xlarge", 1)], tokens=1e12, space=space)
    assert err.value.field == "grad-shard-buffer"


def test_every_scale_point_is_planned_with_the_layout() -> None:
    arch = CAT.model("llama3.1-8b")
    base = SearchSpace(seq_len=4096, global_batch=256)
    layout = replace(base, optimizer_state_dtype="bf16", master_weights="remainder")
    sweep = run_sweep(CAT, arch, axis="nodes", values=["1", "2"], instance="p5.48xlarge", gpus=8, tokens=1e12,
                      space=layout)  # fmt: skip
    assert len(sweep.points) == 2
    for point in sweep.points:
        assert "opt-bf16 master-remainder" in point.config
        cluster = build_cluster(CAT, "p5.48xlarge", point.num_nodes)
        best = plan_training(arch, [cluster], tokens=1e12, top=1, space=layout).best
        assert point.step_time_s == best.step_time_s and point.config == describe_config(best.config)


def test_rl_trained_models_take_the_layout_by_hand() -> None:
    """Llama 3.1 8B trained on 8 H100 at tp 8 (zero1, dp 1: each GPU holds 1/8 of the parameters): weights 2 +
    gradients 4 + optimizer 12 = 18 B by default; bf16 m and v with a 16-bit remainder: 2 + 4 + (4 + 2) = 12 B. The
    optimizer step moves 38 B (default) and 8 + 8 + 4 + 4 = 24 B (optimizer_step.py)."""
    arch = CAT.model("llama3.1-8b")
    cluster = build_cluster(CAT, "p5.48xlarge", 1)
    base = estimate_rl(arch, cluster, SHORT)
    small = estimate_rl(arch, cluster, replace(SHORT, optimizer_state_dtype="bf16", master_weights="remainder"))
    assert base.memory["parts_gib"]["actor_state"] == pytest.approx(18 * LLAMA31_8B / 8 / GIB, rel=1e-9)
    assert small.memory["parts_gib"]["actor_state"] == pytest.approx(12 * LLAMA31_8B / 8 / GIB, rel=1e-9)
    cfg = small.train_step["config"]
    assert (cfg["optimizer_state_dtype"], cfg["master_weights"], cfg["sharding"]) == ("bf16", "remainder", "zero1")
    # the training step differs by its optimizer step only: (38 - 24) B per local parameter over HBM
    hbm_bps = cluster.gpu.hbm_bw_gbps * 1e9 * default_efficiency(cluster.gpu).memory
    gain = base.parts_s["actor_train"] - small.parts_s["actor_train"]
    assert gain == pytest.approx(LLAMA31_8B / 8 * (38 - 24) / hbm_bps, rel=1e-9)
    assert base.parts_s["rollout"] == small.parts_s["rollout"]


def test_rl_gradient_shard_needs_zero1() -> None:
    arch = CAT.model("llama3.1-8b")
    cluster = build_cluster(CAT, "p5.48xlarge", 1)
    with pytest.raises(InputError) as err:
        estimate_rl(arch, cluster, replace(SHORT, train_tp=1, grad_shard_buffer=True))  # fsdp by default at tp 1
    assert err.value.field == "grad-shard-buffer"
    with_shard = estimate_rl(arch, cluster, replace(SHORT, grad_shard_buffer=True))  # tp 8: zero1
    base = estimate_rl(arch, cluster, SHORT)
    # dp 1: the gradient shard is the whole local gradient again, 4 B per local parameter
    extra = with_shard.memory["parts_gib"]["actor_state"] - base.memory["parts_gib"]["actor_state"]
    assert extra == pytest.approx(4 * LLAMA31_8B / 8 / GIB, rel=1e-9)


def test_plan_rl_keeps_the_gradient_shard_on_zero1_rows() -> None:
    arch = CAT.model("llama3.1-8b")
    cluster = build_cluster(CAT, "p5.48xlarge", 1)
    plan = plan_rl(
        arch, [cluster], replace(SHORT, grad_shard_buffer=True, optimizer_state_dtype="bf16"), top=10**6, prune=False
    )
    shardings = set()
    for row in plan.ranked:
        cfg = row.estimate.train_step["config"]
        shardings.add(cfg["sharding"])
        assert cfg["grad_shard_buffer"] == (cfg["sharding"] == "zero1")
        assert cfg["optimizer_state_dtype"] == "bf16"
        assert row.estimate.config == config_of(replace(SHORT, grad_shard_buffer=True,
                                                        optimizer_state_dtype="bf16"), row.point)  # fmt: skip
    assert shardings == {"zero1", "fsdp"}
