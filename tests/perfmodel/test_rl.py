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
    assert e.rollout_gpus == e.train_gpus == 16


def test_weight_sync_gathers_sharded_weights(catalog: Catalog) -> None:
    """FSDP (the default at train tp = pp = 1) shards the weights over the 16 data-parallel ranks: each rank
    gathers the whole bf16 model before the rollout engine loads it (veRL's ``full_tensor()``); ZeRO-1 keeps a
    replica on every rank and the same TP layout leaves nothing to move."""
    from fmstack.perfmodel.collectives import GroupPlacement, collective_time_s
    from fmstack.perfmodel.modelconsts import model_consts

    cluster = build_cluster(catalog, "p5.48xlarge", 2)
    weights_b = 2.0 * model_consts(catalog.model("llama3.1-8b")).params_total
    gather_s = float(
        collective_time_s("all_gather", weights_b, GroupPlacement(num_ranks=16, ranks_per_domain=8), cluster)
    )
    assert _est(catalog).parts_s["weight_sync"] == pytest.approx(gather_s)
    # each node must take in the other node's 8 GB over its 3,200 Gb/s of EFA: at least 20 ms
    assert 0.02 < gather_s < 1.0
    assert _est(catalog, train_sharding="zero1").parts_s["weight_sync"] == 0.0
    hsdp = _est(catalog, train_sharding="hsdp").parts_s["weight_sync"]  # gathered inside a node only
    assert 0.0 < hsdp < gather_s


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
    with pytest.raises(InputError, match=r"^samples: must be >= 1"):
        _est(catalog, samples_per_prompt=0)
    with pytest.raises(InputError, match="train-sharding"):
        _est(catalog, train_sharding="zero9")


@pytest.mark.parametrize(
    ("field", "flag"),
    [("train_tp", "train-tp"), ("train_pp", "train-pp"), ("rollout_tp", "rollout-tp"), ("epochs", "epochs"),
     ("minibatches", "minibatches")],
)  # fmt: skip
@pytest.mark.parametrize("value", [0, -1])
def test_parallel_degrees_and_counts_below_one_are_refused(catalog: Catalog, field: str, flag: str, value: int) -> None:
    # a degree of 0 used to reach `num_gpus % 0` (ZeroDivisionError); it is refused up front, by its CLI flag
    with pytest.raises(InputError, match=rf"^{flag}: must be >= 1, got {value}$"):
        _est(catalog, **{field: value})


def test_split_only_options_are_refused_colocated(catalog: Catalog) -> None:
    with pytest.raises(InputError, match=r"^async: needs --placement split"):
        _est(catalog, async_split=True)
    with pytest.raises(InputError, match=r"^rollout-nodes: needs --placement split"):
        _est(catalog, rollout_nodes=1)
    with pytest.raises(InputError, match=r"^rollout-nodes: must be >= 1, got 0"):
        _est(catalog, placement="split", rollout_nodes=0)
    # --compare from a split configuration: its colocated row drops the split-only options instead of refusing
    cfg = RLConfig(rollout_tp=1, train_tp=1, prompts_per_step=128, prompt_len=512, response_len=512,
                   placement="split", rollout_nodes=1, async_split=True)  # fmt: skip
    rows = compare_placements(catalog.model("llama3.1-8b"), build_cluster(catalog, "p5.48xlarge", 2), cfg)
    assert rows["colocated"].config.rollout_nodes is None and not rows["colocated"].config.async_split


def test_rollout_engine_errors_name_the_rl_flags(catalog: Catalog) -> None:
    cluster = build_cluster(catalog, "p5.48xlarge", 1)
    hbm = cluster.gpu.hbm_gib
    w = catalog.model("llama3.1-70b")
    # colocated: the engine may take half of the HBM (39.8 GiB); 70.6e9 bf16 params / 2 GPUs = 65.7 GiB of weights
    with pytest.raises(InputError, match=r"^rollout-tp: colocated") as err:
        estimate_rl(w, cluster, RLConfig(rollout_tp=2))
    assert f"{hbm:.1f} GiB per GPU ({0.5 * hbm:.1f} GiB" in err.value.message
    assert "weights take 65.7 GiB per GPU at rollout_tp(2)" in err.value.message
    # the serving model's own refusals come back under the RL flags
    with pytest.raises(InputError, match=r"^rollout-tp: rollout_tp\(3\) must divide"):
        estimate_rl(catalog.model("llama3.1-8b"), cluster, RLConfig(rollout_tp=3, train_tp=1))
    with pytest.raises(InputError, match=r"^prompt-len: "):
        _est(catalog, prompt_len=200_000)


def test_compare_placements(catalog: Catalog) -> None:
    cfg = RLConfig(rollout_tp=1, train_tp=1, prompts_per_step=128, prompt_len=512, response_len=512)
    both = compare_placements(catalog.model("llama3.1-8b"), build_cluster(catalog, "p5.48xlarge", 2), cfg)
    assert set(both) == {"colocated", "split", "split_async"}
    assert both["split_async"].step_time_s <= both["split"].step_time_s
    one_node = compare_placements(catalog.model("llama3.1-8b"), build_cluster(catalog, "p5.48xlarge", 1), cfg)
    assert set(one_node) == {"colocated"}


GIB = 2**30


def test_70b_critic_does_not_fit_on_one_node(catalog: Catalog) -> None:
    """The user's case: qwen3-8b actor, llama3.1-70b critic, PPO, colocated on 8 H100s, tp 1 (FSDP over 8)."""
    from fmstack.catalog.params import count_params

    cluster = build_cluster(catalog, "p5.48xlarge", 1)
    # veRL's defaults: no host offload (with offload the critic's 131.4 GiB state still fails its training phase)
    cfg = RLConfig(algorithm="ppo", rollout_tp=1, train_tp=1, offload=False)
    e = estimate_rl(catalog.model("qwen3-8b"), cluster, cfg, critic=catalog.model("llama3.1-70b"))
    actor_p, critic_p = count_params(catalog.model("qwen3-8b")).total, count_params(catalog.model("llama3.1-70b")).total
    assert critic_p == 70_553_706_496 and actor_p == 8_190_735_360
    parts = e.memory["parts_gib"]
    # veRL's FSDP over 8 GPUs (fp32-params): fp32 parameters 4 + fp32 grads 4 + Adam m, v 8 = 16 B per parameter, / 8
    assert parts["critic_state"] == pytest.approx(critic_p * 16 / 8 / GIB)  # 131.4 GiB: ~2x the GPU on its own
    assert parts["actor_state"] == pytest.approx(actor_p * 16 / 8 / GIB)  # 15.3 GiB
    assert parts["reference_weights"] == pytest.approx(actor_p * 2 / 8 / GIB)  # 1.9 GiB
    assert parts["reward_weights"] == 0.0  # rule-based reward
    hbm = cluster.gpu.hbm_gib
    assert parts["rollout_engine"] == pytest.approx(0.5 * hbm)  # veRL gpu_memory_utilization 0.5 of total HBM
    rollout = parts["critic_state"] + parts["actor_state"] + parts["reference_weights"] + parts["rollout_engine"]
    assert e.memory["phases_gib"]["rollout"] == pytest.approx(rollout)  # 206.7 GiB
    assert e.memory["usable_gib"] == pytest.approx(hbm - 3.0)  # 76.6 GiB
    assert e.fits is False and e.memory["fits"] is False
    verdict = e.memory["verdict"]
    assert "does NOT fit" in verdict and "largest part: critic training state" in verdict
    assert f"{rollout - (hbm - 3.0):.1f} GiB over" in verdict  # 130.1 GiB over
    assert e.train_step["fits"] is True  # the actor alone fits: what was reported before


def test_same_size_critic_fits_and_phases_add_up(catalog: Catalog) -> None:
    e = _est(catalog, algorithm="ppo", samples_per_prompt=1)
    m = e.memory
    assert e.fits and m["verdict"].startswith("fits: peak")
    assert m["parts_gib"]["critic_state"] == pytest.approx(m["parts_gib"]["actor_state"])
    for phase, names in m["phase_parts"].items():
        assert m["phases_gib"][phase] == pytest.approx(sum(m["parts_gib"][k] for k in names))
    assert "rollout_engine" not in m["phase_parts"]["actor_train"]  # freed after generation (free_cache_engine)


def test_split_keeps_the_rollout_engine_on_its_own_gpus(catalog: Catalog) -> None:
    e = _est(catalog, placement="split", reward_model=True)
    m = e.memory
    assert m["phase_parts"]["rollout"] == ["rollout_engine"]
    assert m["phase_parts"]["actor_train"] == [
        "actor_state",
        "reference_weights",
        "reward_weights",
        "actor_activations",
    ]
    # training on 8 GPUs with FSDP (fp32-params): the bf16 reward model (the actor's architecture) holds 2 B of 16
    assert m["parts_gib"]["reward_weights"] == pytest.approx(m["parts_gib"]["actor_state"] * 2 / 16)


def test_reward_forward_uses_the_reward_models_size(catalog: Catalog) -> None:
    cluster = build_cluster(catalog, "p5.48xlarge", 2)
    cfg = RLConfig(rollout_tp=1, train_tp=1, prompts_per_step=64, prompt_len=512, response_len=512, reward_model=True)
    small = estimate_rl(catalog.model("llama3.1-8b"), cluster, cfg)
    big = estimate_rl(catalog.model("llama3.1-8b"), cluster, cfg, critic=catalog.model("llama3.1-70b"))
    assert small.parts_s["reward_forward"] == pytest.approx(small.parts_s["reference_forward"])
    assert big.parts_s["reward_forward"] > 5 * big.parts_s["reference_forward"]  # 70.6 B vs 8.0 B parameters


def test_old_logprob_pass_and_training_layout(catalog: Catalog) -> None:
    """The trainer's own log-prob pass costs one actor forward, like the reference's; training CP and EP reach the
    training model, with sequences padded to what the layout needs."""
    e = _est(catalog)
    assert e.parts_s["old_logprob_forward"] == pytest.approx(e.parts_s["reference_forward"])
    assert e.parts_s["old_logprob_forward"] > 0
    off = _est(catalog, old_logprob=False)
    assert off.parts_s["old_logprob_forward"] == 0.0
    assert e.step_time_s - off.step_time_s == pytest.approx(e.parts_s["old_logprob_forward"])
    moe = estimate_rl(catalog.model("qwen3-30b-a3b"), build_cluster(catalog, "p5.48xlarge", 2),
                      RLConfig(rollout_tp=2, train_tp=2, train_cp=2, train_ep=8, prompts_per_step=64,
                               prompt_len=500, response_len=1001))  # fmt: skip
    cfg = moe.train_step["config"]
    assert (cfg["tp"], cfg["cp"], cfg["ep"]) == (2, 2, 8)
    assert cfg["seq_len"] == 1504  # 1501 tokens padded to a multiple of 2 cp x tp = 8


def test_rollout_memory_fraction(catalog: Catalog) -> None:
    """A larger engine share (vLLM's gpu_memory_utilization) holds more sequences at once."""
    small = _est(catalog, rollout_memory_fraction=0.3, prompts_per_step=512)
    large = _est(catalog, rollout_memory_fraction=0.7, prompts_per_step=512)
    assert small.rollout_concurrency < large.rollout_concurrency
    assert (
        _est(catalog, prompts_per_step=512).rollout_concurrency
        == _est(catalog, rollout_memory_fraction=0.5, prompts_per_step=512).rollout_concurrency
    )  # 0.5 is the colocated default
    with pytest.raises(InputError, match=r"^rollout-memory-fraction: must be in \(0, 1\], got 0.0"):
        _est(catalog, rollout_memory_fraction=0.0)
    with pytest.raises(InputError, match=r"^train-cp: must be >= 1, got 0"):
        _est(catalog, train_cp=0)
