"""RL step model: the parts add up, PPO vs GRPO phases, colocated vs split, async overlap."""

from __future__ import annotations

from typing import Any

import pytest

from fmstack.catalog import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel.rl import RLConfig, RLEstimate, compare_placements, estimate_rl, forward_s


def _est(catalog: Catalog, **kw: Any) -> RLEstimate:
    values: dict[str, Any] = {"rollout_tp": 1, "train_tp": 1, "prompts_per_step": 128, "prompt_len": 512,
                              "response_len": 512} | kw  # fmt: skip
    return estimate_rl(catalog.model("llama3.1-8b"), build_cluster(catalog, "p5.48xlarge", 2), RLConfig(**values))


def test_grpo_colocated_parts_add_up(catalog: Catalog) -> None:
    e = _est(catalog)
    assert e.step_time_s == pytest.approx(sum(e.parts_s.values()))
    assert e.parts_s["critic_forward"] == e.parts_s["critic_train"] == 0.0
    assert e.parts_s["weight_sync"] == 0.0  # same TP layout: nothing to reshard
    assert e.rollout_gpus == e.train_gpus == 16


def test_ppo_adds_the_critic(catalog: Catalog) -> None:
    e = _est(catalog, algorithm="ppo", samples_per_prompt=1)
    assert e.parts_s["critic_forward"] > 0 and e.parts_s["critic_train"] > 0
    assert e.parts_s["critic_train"] == pytest.approx(e.parts_s["actor_train"])


def test_forward_is_a_third_of_training_compute(catalog: Catalog) -> None:
    from fmstack.perfmodel.config import TrainConfig
    from fmstack.perfmodel.training import estimate_training

    est = estimate_training(catalog.model("llama3.1-8b"), build_cluster(catalog, "p5.48xlarge", 1),
                            TrainConfig(dp=8, global_batch=64, seq_len=2048))  # fmt: skip
    assert forward_s(est) == pytest.approx((est.gemm_s + est.attention_s + est.memory_bound_s + est.overhead_s) / 3)


def test_split_and_async(catalog: Catalog) -> None:
    seq = _est(catalog, placement="split")
    overlapped = _est(catalog, placement="split", async_split=True)
    assert seq.rollout_gpus == seq.train_gpus == 8
    assert seq.parts_s["weight_sync"] > 0  # broadcast to the rollout nodes
    rest = sum(v for k, v in seq.parts_s.items() if k not in ("rollout", "weight_sync"))
    assert overlapped.step_time_s == pytest.approx(max(seq.parts_s["rollout"], rest) + seq.parts_s["weight_sync"])
    assert overlapped.step_time_s < seq.step_time_s


def test_prefix_cache_shares_the_prompt_across_samples(catalog: Catalog) -> None:
    one = _est(catalog, samples_per_prompt=1, prompts_per_step=1024)
    eight = _est(catalog, samples_per_prompt=8, prompts_per_step=128)
    assert eight.parts_s["rollout"] < one.parts_s["rollout"]


def test_bad_rl_input(catalog: Catalog) -> None:
    with pytest.raises(InputError, match="split placement needs >= 2 nodes"):
        estimate_rl(catalog.model("llama3.1-8b"), build_cluster(catalog, "p5.48xlarge", 1),
                    RLConfig(placement="split", rollout_tp=1, train_tp=1))  # fmt: skip
    with pytest.raises(InputError, match="samples-per-prompt"):
        _est(catalog, samples_per_prompt=0)


def test_compare_placements(catalog: Catalog) -> None:
    cfg = RLConfig(rollout_tp=1, train_tp=1, prompts_per_step=128, prompt_len=512, response_len=512)
    both = compare_placements(catalog.model("llama3.1-8b"), build_cluster(catalog, "p5.48xlarge", 2), cfg)
    assert set(both) == {"colocated", "split", "split_async"}
    assert both["split_async"].step_time_s <= both["split"].step_time_s
    one_node = compare_placements(catalog.model("llama3.1-8b"), build_cluster(catalog, "p5.48xlarge", 1), cfg)
    assert set(one_node) == {"colocated"}
