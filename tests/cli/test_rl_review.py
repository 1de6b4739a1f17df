"""`estimate rl --compare` and `plan rl` report a step's phases by one definition, and ``--critic`` under GRPO is
refused rather than ignored (session 13 review)."""

from __future__ import annotations

import json
import shlex

import pytest
from click.testing import CliRunner

from fmstack.catalog import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.cli.main import cli
from fmstack.errors import InputError
from fmstack.perfmodel.rl import RLConfig, estimate_rl
from fmstack.perfmodel.rl_plan import plan_rl

BASE = ["--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "2"]
FORWARDS = ("old_logprob_forward", "reference_forward", "reward_forward", "critic_forward")


def _json(argv: list[str]) -> dict[str, object]:
    res = CliRunner().invoke(cli, [*argv, "--json"])
    assert res.exit_code == 0, res.output
    out: dict[str, object] = json.loads(res.output)
    return out


def test_compare_train_column_is_plan_rls() -> None:
    """The plan's best row reproduced with ``--compare``: the same ``train_s`` (the forward passes and the updates),
    ``sync_s`` and ``switch_s``; before, --compare's train column left out the forward passes (actor and critic
    updates only: 27.6 s of this 40.4 s)."""
    plan = _json(["plan", "rl", *BASE])
    row = plan["ranked"][0]  # type: ignore[index]
    assert row["placement_kind"] == "colocated"
    argv = [*shlex.split(row["estimate_command"])[1:], "--compare"]
    est = _json(argv)
    placed = est["placements"]["colocated"]  # type: ignore[index]
    parts = est["parts_s"]
    assert parts == row["parts_s"] == placed["parts_s"]
    by_hand = sum(parts[k] for k in FORWARDS) + parts["actor_train"] + parts["critic_train"]  # type: ignore[index]
    for key in ("rollout_s", "train_s", "sync_s", "switch_s"):
        assert placed[key] == row[key]
    assert placed["train_s"] == pytest.approx(by_hand, rel=1e-12)
    assert parts["old_logprob_forward"] + parts["reference_forward"] > 0  # type: ignore[index]
    assert placed["train_s"] > parts["actor_train"] + parts["critic_train"]  # type: ignore[index]
    # colocated: the phases add up to the step
    total = placed["rollout_s"] + placed["train_s"] + placed["sync_s"] + placed["switch_s"]
    assert total == pytest.approx(placed["step_time_s"], rel=1e-12)
    # the table prints the same figure in both commands
    text = CliRunner().invoke(cli, argv).output
    line = next(ln for ln in text.splitlines() if ln.startswith("│ colocated "))
    assert f"{placed['train_s']:.2f}" in line and f"{placed['sync_s'] + placed['switch_s']:.2f}" in line


def test_split_async_step_is_the_longer_side_plus_sync() -> None:
    """The caption's rule, with the same ``train_s``: split --async steps take ``max(rollout, train) + sync``."""
    est = _json(["estimate", "rl", *BASE, "--compare"])
    a = est["placements"]["split_async"]  # type: ignore[index]
    assert a["step_time_s"] == pytest.approx(max(a["rollout_s"], a["train_s"]) + a["sync_s"], rel=1e-12)
    assert a["switch_s"] == 0.0


@pytest.mark.parametrize("command", ["estimate", "plan"])
def test_critic_under_grpo_is_refused(command: str) -> None:
    """(exit 2 and one line: tests/bad_inputs.py, helper S's block)"""
    res = CliRunner().invoke(cli, [command, "rl", *BASE, "--critic", "llama3.1-8b"])
    assert isinstance(res.exception, InputError) and res.exception.field == "critic"
    assert "GRPO has no critic" in res.exception.message and "--algorithm ppo" in res.exception.message


def test_critic_is_taken_where_it_is_used(catalog: Catalog) -> None:
    """PPO trains the critic; a learned reward model under GRPO takes the critic's architecture: a 70B critic costs
    more than the 8B actor's own architecture in both, and nothing is refused."""
    actor, big = catalog.model("llama3.1-8b"), catalog.model("llama3.1-70b")
    cluster = build_cluster(catalog, "p5.48xlarge", 4)
    for cfg in (RLConfig(algorithm="ppo", prompts_per_step=64), RLConfig(reward_model=True, prompts_per_step=64)):
        own = estimate_rl(actor, cluster, cfg)
        with_big = estimate_rl(actor, cluster, cfg, critic=big)
        part = "critic_train" if cfg.algorithm == "ppo" else "reward_forward"
        assert with_big.parts_s[part] > own.parts_s[part] > 0
    with pytest.raises(InputError, match=r"^critic: GRPO has no critic"):
        estimate_rl(actor, cluster, RLConfig(prompts_per_step=64), critic=big)
    with pytest.raises(InputError, match=r"^critic: GRPO has no critic"):
        plan_rl(actor, [build_cluster(catalog, "p5.48xlarge", 2)], RLConfig(prompts_per_step=64), critic=big)


@pytest.mark.parametrize(("instance", "tp"), [("p6e-gb200.36xlarge", 4), ("p5.4xlarge", 1), ("p5.48xlarge", 8)])
def test_default_tp_stays_inside_one_node(instance: str, tp: int) -> None:
    """Session 14: the defaults were tp 8 everywhere, so ``estimate rl`` with no TP flag failed on a 4-GPU GB200 node
    ("rollout_tp(8) must divide the 4 rollout GPUs"); now 8 or the GPUs of one node where fewer."""
    out = _json(["estimate", "rl", "--model", "llama3.1-8b", "--instance", instance])
    assert out["rollout_gpus"] == tp and out["train_gpus"] == tp
    assert out["config"]["rollout_tp"] == tp and out["config"]["train_tp"] == tp  # type: ignore[index]
