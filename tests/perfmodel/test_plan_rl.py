"""`plan_rl`: the bound-pruned search ranks what the exhaustive search ranks; every row is estimate_rl's own number;
the colocated / split choice moves in the direction a hand argument gives."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fmstack.catalog import load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel.rl import RLConfig, estimate_rl
from fmstack.perfmodel.rl_plan import CAVEAT, config_of, plan_rl
from fmstack.perfmodel.rl_plan_space import placements, rollout_tps, train_layouts

CAT = load_catalog(None)
P5 = "p5.48xlarge"
LONG = RLConfig(prompts_per_step=64, prompt_len=256, response_len=8192, reference=False, old_logprob=False)
"""Long responses, a cheap trainer (no reference, no old log-prob pass)."""


def _rows(plan):  # (point, step) of each ranked row
    return [(r.point, r.estimate.step_time_s) for r in plan.ranked]


@pytest.mark.parametrize(("model", "nodes", "age"), [("llama3.1-8b", 2, 2), ("llama3.1-70b", 4, 1)])
def test_pruned_search_ranks_what_the_exhaustive_search_ranks(model: str, nodes: int, age: int) -> None:
    arch, cl = CAT.model(model), build_cluster(CAT, P5, nodes)
    pruned = plan_rl(arch, [cl], RLConfig(), top=5, max_trajectory_age=age)
    full = plan_rl(arch, [cl], RLConfig(), top=5, max_trajectory_age=age, prune=False)
    assert _rows(pruned) == _rows(full)
    assert pruned.considered == full.considered and full.pruned == 0
    for plan in (pruned, full):
        assert plan.evaluated + plan.pruned + plan.rejected_shape == plan.considered
    assert pruned.evaluated < full.evaluated / 3
    assert any("lower bound" in n for n in pruned.notes) and pruned.notes[-1] == CAVEAT


def test_every_row_is_estimate_rl_and_the_best_is_never_slower() -> None:
    arch, cl = CAT.model("llama3.1-8b"), build_cluster(CAT, P5, 2)
    plan = plan_rl(arch, [cl], RLConfig(), top=10**6, prune=False)  # every point that fits, ranked
    steps = [r.estimate.step_time_s for r in plan.ranked]
    assert steps == sorted(steps) and all(r.estimate.fits for r in plan.ranked)
    assert len(plan.ranked) + plan.rejected_memory == plan.evaluated
    assert plan.evaluated + plan.rejected_shape == plan.considered
    for row in plan.ranked[:: max(1, len(plan.ranked) // 12)]:
        again = estimate_rl(arch, cl, config_of(RLConfig(), row.point))
        assert again.step_time_s == row.estimate.step_time_s  # bit for bit: the plan prices with estimate_rl itself


def test_space_sizes_by_hand() -> None:
    arch, cl = CAT.model("llama3.1-8b"), build_cluster(CAT, P5, 4)
    # colocated x 2 + (sync, async, async age 2) x 3 rollout-node counts
    assert len(placements(4, 2)) == 2 + 3 * 3 and len(placements(4, 1)) == 2 + 2 * 3
    # 32 heads, 8 kv heads: tp 1..8 in a node, 16 over two whole nodes; 24 GPUs (3 nodes) take 1, 2, 4, 8 only
    assert rollout_tps(arch, cl, 32) == [1, 2, 4, 8, 16] and rollout_tps(arch, cl, 24) == [1, 2, 4, 8]
    # 2048 tokens: no cp; tp 1..8 x pp 1, 2, 4, 8
    assert len(train_layouts(arch, cl, 2048)) == 16
    assert {lay.cp for lay in train_layouts(arch, cl, 16384)} == {1, 2, 4}  # 16384 / 4 = 4096 tokens per rank


def test_short_responses_pick_colocated() -> None:
    """64-token responses: the rollout is a few seconds and training the step; split trains on half the GPUs, so
    its training cannot be shorter than colocated's on all of them."""
    arch, cl = CAT.model("llama3.1-8b"), build_cluster(CAT, P5, 2)
    base = RLConfig(prompt_len=2048, response_len=64)
    best = plan_rl(arch, [cl], base, top=3).best
    assert best.point.placement.placement == "colocated"
    assert best.estimate.parts_s["rollout"] < 0.1 * best.estimate.step_time_s
    split = plan_rl(arch, [cl], base, top=1, kinds=("split", "async")).best
    assert split.estimate.step_time_s > best.estimate.step_time_s
    rest = sum(v for k, v in split.estimate.parts_s.items() if k not in ("rollout", "weight_sync"))
    assert rest > best.estimate.parts_s["actor_train"]


def test_long_responses_and_a_cheap_trainer_pick_async() -> None:
    """8192-token responses of a 70B actor: the rollout is most of a colocated step; overlapping it with training on
    other nodes (async) is shorter than running them one after the other on all of them."""
    arch, cl = CAT.model("llama3.1-70b"), build_cluster(CAT, P5, 4)
    best = plan_rl(arch, [cl], LONG, top=3).best
    e = best.estimate
    assert best.point.placement.kind == "async"
    rest = sum(v for k, v in e.parts_s.items() if k not in ("rollout", "weight_sync"))
    assert e.step_time_s == pytest.approx(max(e.parts_s["rollout"], rest) + e.parts_s["weight_sync"], rel=1e-12)
    colocated = plan_rl(arch, [cl], LONG, top=1, kinds=("colocated",)).best.estimate
    assert colocated.parts_s["rollout"] > 0.6 * colocated.step_time_s and colocated.step_time_s > e.step_time_s


def test_objectives_and_several_clusters() -> None:
    arch = CAT.model("llama3.1-8b")
    clusters = [build_cluster(CAT, P5, 1), build_cluster(CAT, P5, 2), build_cluster(CAT, "p4d.24xlarge", 2)]
    for objective in ("time", "throughput", "cost"):
        plan = plan_rl(arch, clusters, RLConfig(), objective=objective, top=8)
        values = [r.value for r in plan.ranked]
        assert values == sorted(values)
        for r in plan.ranked:
            c, s = r.cluster, r.estimate.step_time_s
            expect = {"time": s, "throughput": s * c.num_gpus,
                      "cost": s / 3600 * c.instance.price_per_hour_usd * c.num_nodes}[objective]  # fmt: skip
            assert r.value == pytest.approx(expect, rel=1e-12)
            assert r.samples_per_s == 256 * 8 / s
    # more nodes: a shorter step; fewer: less GPU time per sample (both are the model's, not forced)
    assert plan_rl(arch, clusters, RLConfig(), objective="time", top=1).best.cluster.num_nodes == 2


def test_cost_needs_a_price() -> None:
    arch = CAT.model("llama3.1-8b")
    with pytest.raises(InputError, match="cost needs a price for dgx-h100"):
        plan_rl(arch, [build_cluster(CAT, "dgx-h100", 2)], RLConfig(), objective="cost")
    plan = plan_rl(arch, [build_cluster(CAT, "dgx-h100", 2), build_cluster(CAT, P5, 2)], RLConfig(),
                   objective="cost", top=2)  # fmt: skip
    assert "dgx-h100 skipped: no price (cost)" in plan.notes
    assert {r.cluster.instance.name for r in plan.ranked} == {P5}


def test_nothing_fits_names_the_closest_miss() -> None:
    arch = CAT.model("llama3.1-70b")
    with pytest.raises(InputError) as err:
        plan_rl(arch, [build_cluster(CAT, P5, 1)], RLConfig())
    msg = str(err.value)
    assert err.value.field == "model" and "nothing fits in GPU memory on 1 x p5.48xlarge" in msg
    # 70.6 B parameters x 16 B / 8 GPUs = 131.4 GiB of actor training state per GPU (veRL's FSDP fp32-params): no
    # layout on 8 GPUs holds it
    assert "closest is" in msg and "131.4" in msg and "more --nodes" in msg
    with pytest.raises(InputError, match=r"no placement and layout of llama3\.1-405b is valid on 1 x p5\.48xlarge"):
        plan_rl(CAT.model("llama3.1-405b"), [build_cluster(CAT, P5, 1)], RLConfig())


def test_deterministic_and_filtered() -> None:
    arch, cl = CAT.model("llama3.1-8b"), build_cluster(CAT, P5, 2)
    base = replace(RLConfig(), length_spread=0.0)
    a = plan_rl(arch, [cl], base, top=6, max_trajectory_age=2)
    b = plan_rl(arch, [cl], base, top=6, max_trajectory_age=2)
    assert _rows(a) == _rows(b) and a.notes == b.notes and a.evaluated == b.evaluated
    only = plan_rl(arch, [cl], base, top=6, kinds=("split",))
    assert {r.point.placement.kind for r in only.ranked} == {"split"}
    with pytest.raises(InputError, match="placement: 'hybrid' unknown"):
        plan_rl(arch, [cl], base, kinds=("hybrid",))
