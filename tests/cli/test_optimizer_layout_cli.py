"""The storage-layout flags of ``estimate train`` and ``plan train``: JSON keys, the estimate line a plan prints, and a
planner that keeps its default layout unless asked."""

from __future__ import annotations

import contextlib
import io
import json

from fmstack.cli.estimate_cmd import estimate_argv
from fmstack.cli.main import main
from fmstack.perfmodel.config import TrainConfig

GIB = 2.0**30
_EST = ["estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "1", "--json"]
_PLAN = ["plan", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "8", "--tokens", "1e12",
         "--top", "3", "--json"]  # fmt: skip


def _json(*args: str) -> dict[str, object]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main(list(args))
    return dict(json.loads(out.getvalue()))


def test_estimate_flags_set_the_layout_and_the_bytes() -> None:
    base = _json(*_EST)
    data = _json(*_EST, "--optimizer-state", "bf16", "--master-weights", "remainder")
    cfg = data["config"]
    assert isinstance(cfg, dict)
    assert (cfg["optimizer_state_dtype"], cfg["master_weights"], cfg["fp8_param_gather"]) == (
        "bf16",
        "remainder",
        False,
    )
    # ZeRO-1 over dp 8: (2 + 2 + 2) B instead of 12 B per parameter over 8 GPUs, 8,030,261,248 parameters
    mem, mem0 = data["breakdown"]["memory_gib"], base["breakdown"]["memory_gib"]  # type: ignore[index]
    assert abs(mem["optimizer_gib"] - 6 / 8 * 8_030_261_248 / GIB) < 1e-6
    assert abs(mem0["optimizer_gib"] - 12 / 8 * 8_030_261_248 / GIB) < 1e-6
    assert "memory_gib_per_gpu" in data and "step_time_s" in data  # the existing keys stay


def test_estimate_argv_writes_the_layout_back() -> None:
    cfg = TrainConfig(dp=8, global_batch=8, precision="fp8", fp8_param_gather=True, optimizer_state_dtype="bf16")
    argv = estimate_argv("llama3.1-8b", "p5.48xlarge", 8, cfg)
    assert argv[argv.index("--optimizer-state") + 1] == "bf16" and "--fp8-param-gather" in argv
    assert "--master-weights" not in argv and "--grad-shard-buffer" not in argv  # defaults are not written
    again = _json(*argv[1:], "--json")["config"]
    assert isinstance(again, dict)
    assert (again["optimizer_state_dtype"], again["fp8_param_gather"], again["precision"]) == ("bf16", True, "fp8")


def test_plan_keeps_its_default_layout_unless_asked() -> None:
    plain = _json(*_PLAN, "--precision", "bf16,fp8")
    asked = _json(*_PLAN, "--precision", "bf16,fp8", "--fp8-param-gather")
    assert plain["considered"] == asked["considered"]  # the layout is fixed, not another axis of the search
    for est in plain["ranked"]:  # type: ignore[attr-defined]
        assert not est["config"]["fp8_param_gather"] and est["config"]["master_weights"] == "fp32"
    fp8_rows = [e for e in asked["ranked"] if e["config"]["precision"] == "fp8"]  # type: ignore[attr-defined]
    assert fp8_rows and all(e["config"]["fp8_param_gather"] for e in fp8_rows)
    assert all("--fp8-param-gather" in e["estimate_command"] for e in fp8_rows)
