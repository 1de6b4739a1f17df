"""The rollout's tail to the engine's per-response token limit (``--response-cap``) and the rlcheck bound."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fmstack.catalog import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel.inference import ServeConfig, estimate_serve
from fmstack.perfmodel.rl import RLConfig, estimate_rl
from fmstack.perfmodel.rl_rollout import cap_tail_s, rollout_time

SERVE = ServeConfig(tp=1, input_len=130, output_len=795, prefix_hit_rate=31 / 32, kv_memory_fraction=0.5)


def test_cap_tail_is_the_extra_steps_at_one_sequence(catalog: Catalog) -> None:
    m, cl = catalog.model("llama3.1-8b"), build_cluster(catalog, "dgx-h100", 1)
    alone = estimate_serve(m, cl, replace(SERVE, concurrency=1, output_len=3966))
    # (3966 - 795) = 3171 more decode steps, each the ITL of one running 3966-token response
    assert cap_tail_s(m, cl, SERVE, 3966) == pytest.approx(3171 * alone.itl_s)
    assert 3171 * 0.004 < cap_tail_s(m, cl, SERVE, 3966) < 3171 * 0.012  # 4-12 ms per token: 16 GB read per step
    assert cap_tail_s(m, cl, SERVE, 795) == 0.0
    plain = rollout_time(m, cl, SERVE, 64, 64)
    capped = rollout_time(m, cl, SERVE, 64, 64, response_cap=3966)
    assert plain.tail_s == 0.0
    assert capped.tail_s == pytest.approx(cap_tail_s(m, cl, SERVE, 3966))
    assert capped.time_s == pytest.approx(plain.time_s + capped.tail_s)
    assert capped.steady_s == pytest.approx(plain.steady_s)
    assert capped.drain_s == pytest.approx(plain.drain_s + capped.tail_s)


def test_cap_in_the_step(catalog: Catalog) -> None:
    # NeMo RL v0.3's Llama 3.1 8B GRPO on 8 H100 (64 x 32, max_total_sequence_length 4096): the cap adds to the
    # rollout only, and only the tail
    m, cl = catalog.model("llama3.1-8b"), build_cluster(catalog, "dgx-h100", 1)
    cfg = RLConfig(prompts_per_step=64, samples_per_prompt=32, prompt_len=130, response_len=795, rollout_tp=1,
                   train_tp=1, train_pp=2, minibatches=4, rollout_memory_fraction=0.6, offload=True)  # fmt: skip
    plain = estimate_rl(m, cl, cfg)
    capped = estimate_rl(m, cl, replace(cfg, response_cap=4096 - 130))
    assert capped.rollout["tail_s"] > 0 and plain.rollout["tail_s"] == 0
    assert capped.parts_s["rollout"] == pytest.approx(plain.parts_s["rollout"] + capped.rollout["tail_s"])
    assert capped.step_time_s == pytest.approx(plain.step_time_s + capped.rollout["tail_s"])
    for k in ("old_logprob_forward", "reference_forward", "actor_train", "weight_sync", "colocated_switch"):
        assert capped.parts_s[k] == pytest.approx(plain.parts_s[k])


def test_streamed_rollout_bounds_the_cap_by_the_age(catalog: Catalog) -> None:
    """Streamed (age >= 2): no batch tail, but the longest response must finish within ``age`` steps, so the rollout
    is max(a step's share at the steady rate, longest x ITL / age); the cap is the longest response (it was dropped
    here before the session-11 review)."""
    m, cl = catalog.model("llama3.1-8b"), build_cluster(catalog, "dgx-h100", 4)
    cfg = RLConfig(prompts_per_step=64, samples_per_prompt=32, prompt_len=130, response_len=795, rollout_tp=1,
                   train_tp=1, placement="split", rollout_nodes=2, async_split=True, max_trajectory_age=4)  # fmt: skip
    free, capped = estimate_rl(m, cl, cfg), estimate_rl(m, cl, replace(cfg, response_cap=3966))
    share = free.rollout["streamed_s"]
    assert share > 0 and capped.rollout["streamed_s"] == share  # the stream itself does not change
    # equal lengths: the longest response is the mean; capped: the cap, at the same ITL
    assert capped.rollout["streamed_longest_s"] == pytest.approx(free.rollout["streamed_longest_s"] * 3966 / 795)
    for est in (free, capped):
        assert est.parts_s["rollout"] == max(share, est.rollout["streamed_longest_s"] / 4)
    assert capped.parts_s["rollout"] > free.parts_s["rollout"]  # 3966 tokens at the stream's ITL exceed 4 shares


def test_cap_below_the_mean_is_refused(catalog: Catalog) -> None:
    m, cl = catalog.model("llama3.1-8b"), build_cluster(catalog, "dgx-h100", 1)
    with pytest.raises(InputError) as err:
        estimate_rl(m, cl, RLConfig(response_len=1024, response_cap=512, rollout_tp=1, train_tp=1))
    assert err.value.field == "response-cap"


def test_rlcheck_cap_is_the_recipe_limit_minus_the_prompt(catalog: Catalog) -> None:
    from fmstack.perfmodel import validation_rl

    checks = {c.id: c for c in validation_rl.check_nemorl(catalog)}
    c = checks["h100-dsv3-256"]  # max_total_sequence_length 1536, prompt 110
    assert c.response_cap == 1536 - 110
    assert c.predicted_step_cap_s is not None and c.predicted_step_s is not None
    assert c.predicted_step_cap_s > c.predicted_step_s
    assert checks["h100-q30-192-8off"].predicted_step_cap_s == checks["h100-q30-192-8off"].predicted_step_s
    s = validation_rl.summarize(list(checks.values()), "cap_all")
    assert s.compared == 25
