"""The colocated switch: host <-> device copies of the rollout weights and (offload) the training state."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from fmstack.catalog import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel.rl import RLConfig, RLEstimate, estimate_rl
from fmstack.perfmodel.rl_switch import HOST_COPY_EFFICIENCY, colocated_switch


def _est(catalog: Catalog, nodes: int = 2, **kw: Any) -> RLEstimate:
    cfg = RLConfig(prompts_per_step=64, samples_per_prompt=8, prompt_len=256, response_len=512, rollout_tp=1,
                   train_tp=1, **kw)  # fmt: skip
    return estimate_rl(catalog.model("llama3.1-8b"), build_cluster(catalog, "dgx-h100", nodes), cfg)


def test_copy_efficiency_is_vllms_measured_wake_up() -> None:
    # vLLM blog: 61.0 GB of bf16 weights woken in 2.867 s on a PCIe Gen4 x16 A100 (32 GB/s)
    eff = HOST_COPY_EFFICIENCY
    assert eff == pytest.approx(61.0e9 / 2.8667 / 32e9, rel=1e-3)
    assert eff == pytest.approx(0.665, abs=0.002)


def test_hand_computed_switch(catalog: Catalog) -> None:
    cluster = build_cluster(catalog, "dgx-h100", 1)
    # 15 GiB of rollout weights + 6 GiB of training state, each out and back: 42 GiB over 64 GB/s x efficiency
    sw = colocated_switch(cluster, rollout_weights_gib=15.0, train_state_gib=6.0, offload=True)
    assert sw.moved_gib == 42.0
    assert sw.host_link_gbps == 64.0
    assert sw.time_s == pytest.approx(42 * 2**30 / (64e9 * HOST_COPY_EFFICIENCY))
    off = colocated_switch(cluster, rollout_weights_gib=15.0, train_state_gib=6.0, offload=False)
    assert off.moved_gib == 30.0 and off.train_state_gib == 0.0
    # GB200: NVLink-C2C, 225 GB/s per GPU and direction
    gb = colocated_switch(build_cluster(catalog, "dgx-gb200", 1), rollout_weights_gib=15.0, train_state_gib=6.0,
                          offload=True)  # fmt: skip
    assert gb.time_s == pytest.approx(sw.time_s * 64 / 225)


def test_colocated_step_holds_the_switch_and_parts_add_up(catalog: Catalog) -> None:
    est = _est(catalog, offload=True)
    assert est.parts_s["colocated_switch"] == pytest.approx(est.switch["time_s"]) and est.switch["time_s"] > 0
    assert est.step_time_s == pytest.approx(sum(est.parts_s.values()))
    # the rollout engine's weights (8B bf16 at TP 1: 15 GiB) always move; offload adds the training state
    assert est.switch["rollout_weights_gib"] == pytest.approx(8.03e9 * 2 / 2**30, rel=0.02)
    assert est.switch["train_state_gib"] > 0


def test_split_has_no_switch(catalog: Catalog) -> None:
    for kw in ({"placement": "split"}, {"placement": "split", "async_split": True}):
        est = _est(catalog, **kw)
        assert est.parts_s["colocated_switch"] == 0.0 and est.switch == {}


def test_offload_frees_the_rollout_phase_and_costs_copies(catalog: Catalog) -> None:
    on, off = _est(catalog, offload=True), _est(catalog, offload=False)
    assert _est(catalog).step_time_s == off.step_time_s  # colocated default: no offload (veRL's)
    assert on.parts_s["colocated_switch"] > off.parts_s["colocated_switch"]
    assert "actor_state" not in on.memory["phase_parts"]["rollout"]
    assert "actor_state" in off.memory["phase_parts"]["rollout"]
    saved = off.memory["phases_gib"]["rollout"] - on.memory["phases_gib"]["rollout"]
    assert saved == pytest.approx(on.memory["parts_gib"]["actor_state"])
    # training is unchanged: the state is back on the GPU
    assert on.memory["phases_gib"]["actor_train"] == off.memory["phases_gib"]["actor_train"]
    rest = {k: v for k, v in on.parts_s.items() if k != "colocated_switch"}
    assert rest == {k: v for k, v in off.parts_s.items() if k != "colocated_switch"}


def test_offload_needs_colocated(catalog: Catalog) -> None:
    with pytest.raises(InputError) as e:
        _est(catalog, placement="split", offload=True)
    assert e.value.field == "offload"
    assert _est(catalog, placement="split", offload=False).parts_s["colocated_switch"] == 0.0


def test_compare_placements_with_offload(catalog: Catalog) -> None:
    from fmstack.perfmodel.rl import compare_placements

    cfg = RLConfig(prompts_per_step=64, samples_per_prompt=8, prompt_len=256, response_len=512, rollout_tp=1,
                   train_tp=1, offload=True)  # fmt: skip
    out = compare_placements(catalog.model("llama3.1-8b"), build_cluster(catalog, "dgx-h100", 2), cfg)
    assert out["colocated"].parts_s["colocated_switch"] > 0
    assert out["split"].parts_s["colocated_switch"] == 0.0
    assert replace(cfg, offload=None).offload is None


@pytest.mark.parametrize(("flag", "moves_state"), [("--offload", True), ("--no-offload", False), (None, False)])
def test_cli_offload_flag(flag: str | None, moves_state: bool) -> None:
    import json

    from click.testing import CliRunner

    from fmstack.cli.rl_cmd import rl_cmd

    args = ["--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--prompts", "64", "--rollout-tp", "1",
            "--train-tp", "1", "--json", *([flag] if flag else [])]  # fmt: skip
    res = CliRunner().invoke(rl_cmd, args)
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["config"]["offload"] == {"--offload": True, "--no-offload": False, None: None}[flag]
    assert (data["switch"]["train_state_gib"] > 0) is moves_state
    assert data["parts_s"]["colocated_switch"] == pytest.approx(data["switch"]["time_s"])
    assert ("actor_state" in data["memory"]["phase_parts"]["rollout"]) is not moves_state
