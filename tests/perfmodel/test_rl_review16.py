"""Session 16 RL review: PPO memory with host offload, and the log-normal draws that cannot stand for their mean."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fmstack.catalog import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.perfmodel.rl import RLConfig, estimate_rl


def test_ppo_offload_holds_one_trained_model_at_a_time(catalog: Catalog) -> None:
    """Colocated PPO with offload: veRL's FSDP workers load a model's state (and optimizer) around its own update and
    offload it after, so the actor's training phase holds the actor's state, the forward-only weights and the actor's
    activations, not the critic's state (and the other way round). Without offload both states stay resident."""
    m, cl = catalog.model("llama3.1-70b"), build_cluster(catalog, "p5.48xlarge", 4)
    cfg = RLConfig(algorithm="ppo", prompts_per_step=512, samples_per_prompt=1, prompt_len=1024, response_len=2048,
                   rollout_tp=8, train_tp=1)  # fmt: skip
    for offload in (False, True):
        mem = estimate_rl(m, cl, replace(cfg, offload=offload)).memory
        p, ph = mem["parts_gib"], mem["phases_gib"]
        shared = p["reference_weights"] + p["reward_weights"]
        other = {"actor_train": p["critic_state"], "critic_train": p["actor_state"]}
        own = {"actor_train": p["actor_state"] + p["actor_activations"],
               "critic_train": p["critic_state"] + p["critic_activations"]}  # fmt: skip
        for phase in ("actor_train", "critic_train"):
            expected = own[phase] + shared + (0.0 if offload else other[phase])
            assert ph[phase] == pytest.approx(expected)
    # 70B actor + 70B critic on 32 H100 under FSDP: 2 x 70.6e9 x 18 B / 32 = 74 GiB of state alone, so only offload fits
    assert not estimate_rl(m, cl, replace(cfg, offload=False)).fits
    assert estimate_rl(m, cl, replace(cfg, offload=True)).fits


def test_forward_pass_of_a_sharded_model_waits_for_its_weight_gather(catalog: Catalog) -> None:
    """FSDP: a forward-only pass (old log-probs, reference) all-gathers the sharded bf16 weights for each of its
    micro-batches (as the training model's forward does), so on a slow fabric it takes the gathers' link time, not a
    third of the training compute. Llama 3.1 8B on 4 x p4d (EFA 400 Gb/s per node): 2048 sequences over 32 ranks at
    micro-batch 1 are 64 gathers of 16 GB over 32 ranks (8 per node), longer than the pass's compute; on 2 x p5 the
    gathers hide."""
    from fmstack.perfmodel.collectives import GroupPlacement, collective_time_s
    from fmstack.perfmodel.modelconsts import model_consts
    from fmstack.perfmodel.rl import _train, forward_s

    m = catalog.model("llama3.1-8b")
    cfg = RLConfig(prompts_per_step=256, samples_per_prompt=8, prompt_len=1024, response_len=1024, rollout_tp=8,
                   train_tp=1)  # fmt: skip
    slow = build_cluster(catalog, "p4d.24xlarge", 4)
    weights_b = 2.0 * model_consts(m).params_total
    one_s = float(collective_time_s("all_gather", weights_b, GroupPlacement(num_ranks=32, ranks_per_domain=8), slow))
    gather_s = 64 * one_s
    compute_only = forward_s(_train(m, slow, cfg, 2048, None))
    assert gather_s > compute_only  # the case the fix is about
    est = estimate_rl(m, slow, cfg)
    assert est.parts_s["reference_forward"] == pytest.approx(gather_s)
    assert est.parts_s["old_logprob_forward"] == pytest.approx(gather_s)
    fast = build_cluster(catalog, "p5.48xlarge", 2)
    assert estimate_rl(m, fast, cfg).parts_s["reference_forward"] == pytest.approx(
        forward_s(_train(m, fast, cfg, 2048, None))
    )
