"""Session 20 upper bounds (helper C): each limit holds at its value and refuses one past it; the planner's batch
message gives hand-checked numbers; more devices visible than expected is refused by the health engine."""

from __future__ import annotations

import pytest

from fmstack.catalog import load_catalog
from fmstack.catalog.topology import MAX_CLUSTER_GPUS, build_cluster
from fmstack.errors import InputError
from fmstack.observability.health import Action, HealthEngine, NodeSignals
from fmstack.orchestration.jobspec import MAX_TIME_LIMIT_MIN, parse_jobspec
from fmstack.perfmodel.batch_limits import MAX_BATCH_SEQUENCES, check_batch
from fmstack.perfmodel.inference_plan import MAX_PLAN_GPUS
from fmstack.perfmodel.planner_space import SearchSpace, batch_limit
from fmstack.sim.recovery import MAX_CKPT_COST_S, MAX_CKPT_INTERVAL_MIN, RecoverySettings


def test_cluster_gpu_limit_is_plan_serves_and_holds_at_its_value() -> None:
    cat = load_catalog()
    assert MAX_CLUSTER_GPUS == MAX_PLAN_GPUS == 2**20
    assert build_cluster(cat, "p5.48xlarge", 2**17).num_gpus == 2**20  # 131,072 nodes x 8 GPUs
    with pytest.raises(InputError, match=r"131,073 nodes x 8 GPUs = 1,048,584 GPUs; allowed: at most 1,048,576"):
        build_cluster(cat, "p5.48xlarge", 2**17 + 1)


def test_batch_limit_holds_at_its_value() -> None:
    assert MAX_BATCH_SEQUENCES == 2**24
    check_batch("global_batch", 2**24)
    with pytest.raises(InputError, match=r"^global_batch: 16,777,217 sequences per step; allowed: at most 16,777,216"):
        check_batch("global_batch", 2**24 + 1)
    # 2^24 sequences of 4 x a 10M-token context stay below 2^53: exact in float64
    assert 2**24 * 4 * 10_000_000 < 2**53


def test_batch_limit_message_numbers() -> None:
    """llama3.1-8b (32 heads, 8 kv heads, 32 layers) on 2^20 p5 GPUs at seq 131,072: tp <= 8 (one node's NVLink),
    pp <= 32 (its layers), cp <= 8 (the space) -> 2,048 GPUs per replica, dp = 2^20 / 2,048 = 512; the default batch
    is round(4 Mi / 131,072) = 32 sequences, at most 2 x 32 = 64 once rounded to whole micro-batches of 1."""
    cat = load_catalog()
    text = batch_limit(cat.model("llama3.1-8b"), build_cluster(cat, "p5.48xlarge", 2**17), SearchSpace(seq_len=131072))
    assert "allows dp <= 64" in text and "(tp 8 x pp 32 x cp 8 = 2,048 GPUs per replica) leaves dp = 512" in text
    assert "use at most 131,072 GPUs, or give --global-batch as a multiple of 512" in text  # 64 x 2,048


def test_more_devices_visible_than_expected_is_refused() -> None:
    engine = HealthEngine()
    with pytest.raises(InputError, match=r"^gpus_visible: 9 > gpus_expected 8"):
        engine.decide(NodeSignals(gpus_visible=9, gpus_expected=8))
    with pytest.raises(InputError, match=r"^efa_visible: 33 > efa_expected 32"):
        engine.decide(NodeSignals(efa_visible=33, efa_expected=32))
    assert engine.decide(NodeSignals(gpus_visible=8, gpus_expected=8)).action is Action.NONE
    assert engine.decide(NodeSignals(gpus_visible=7, gpus_expected=8)).action is Action.REBOOT_NODE


def test_checkpoint_limits_hold_at_their_values() -> None:
    assert MAX_CKPT_COST_S == 86_400 and MAX_CKPT_INTERVAL_MIN == 527_040  # a day; 366 days
    RecoverySettings(ckpt_cost_s=86_400.0, interval="527040")
    with pytest.raises(InputError, match=r"^ckpt_cost: must be 0 to 86,400 seconds"):
        RecoverySettings(ckpt_cost_s=86_400.5)
    with pytest.raises(InputError, match=r"^ckpt_interval: 527041 minutes; allowed: at most 527,040"):
        RecoverySettings(interval="527041")


def test_time_limit_holds_at_its_value() -> None:
    assert MAX_TIME_LIMIT_MIN == 525_600  # 365 x 24 x 60
    base = {"name": "j", "command": ["true"]}
    assert parse_jobspec({**base, "time_limit_min": 525_600}).time_limit_min == 525_600
    with pytest.raises(InputError, match=r"525,601 minutes; allowed: 1 to 525,600"):
        parse_jobspec({**base, "time_limit_min": 525_601})
