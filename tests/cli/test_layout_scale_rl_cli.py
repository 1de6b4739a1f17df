"""The storage-layout flags of ``scale``, ``estimate rl`` and ``plan rl``: passed through to every point and row, the
default flags given explicitly change nothing, and a plan row's ``estimate rl`` command reproduces it."""

from __future__ import annotations

import contextlib
import io
import json
import shlex
from typing import Any

from fmstack.cli.main import main

_SCALE = ["scale", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "8", "--tokens", "1e12",
          "--values", "1,2", "--seq-len", "4096", "--global-batch", "256", "--json"]  # fmt: skip
_RL = ["estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--prompts", "64", "--samples", "8",
       "--prompt-len", "256", "--response-len", "256", "--json"]  # fmt: skip
_PLAN_RL = ["plan", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "1", "--prompts", "64",
            "--samples", "8", "--prompt-len", "256", "--response-len", "256", "--top", "20", "--json"]  # fmt: skip
_DEFAULTS = ["--optimizer-state", "fp32", "--master-weights", "fp32", "--grad-dtype", "fp32"]
_RL_DEFAULTS = ["--optimizer-state", "fp32", "--grad-dtype", "fp32"]
"""RL's master default is each backend's (fp32 on zero1, fp32-params on veRL's FSDP): no one value gives it back."""


def _json(*args: str) -> dict[str, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main(list(args))
    return dict(json.loads(out.getvalue()))


def test_scale_passes_the_layout_to_every_point() -> None:
    base = _json(*_SCALE)
    assert _json(*_SCALE, *_DEFAULTS) == base
    data = _json(*_SCALE, "--optimizer-state", "bf16", "--master-weights", "none", "--grad-shard-buffer")
    assert [p["value"] for p in data["points"]] == ["1", "2"]
    for point in data["points"]:
        assert "opt-bf16 master-none" in point["config"]
        assert ("grad-shard" in point["config"]) == (" zero1" in point["config"])


def test_estimate_rl_layout_flags() -> None:
    base = _json(*_RL)
    assert _json(*_RL, *_RL_DEFAULTS) == base
    # the default trains at tp 8 (zero1): an explicit fp32 master is the same layout
    assert _json(*_RL, *_DEFAULTS)["train_step"] == base["train_step"]
    data = _json(*_RL, "--optimizer-state", "bf16", "--master-weights", "remainder", "--grad-shard-buffer")
    cfg = data["train_step"]["config"]
    assert (cfg["optimizer_state_dtype"], cfg["master_weights"], cfg["grad_shard_buffer"]) == (
        "bf16",
        "remainder",
        True,
    )
    # tp 8, zero1 over dp 1: 2 + (4 + 4) + (4 + 2) = 16 B instead of 18 B per local parameter (1/8 of 8.03e9)
    state, state0 = data["memory"]["parts_gib"]["actor_state"], base["memory"]["parts_gib"]["actor_state"]
    assert abs(state - 16 * 8_030_261_248 / 8 / 2**30) < 1e-6 and abs(state0 - 18 * 8_030_261_248 / 8 / 2**30) < 1e-6


def test_plan_rl_rows_carry_the_layout_into_their_estimate_command() -> None:
    assert _json(*_PLAN_RL, *_RL_DEFAULTS) == _json(*_PLAN_RL)
    data = _json(*_PLAN_RL, "--master-weights", "remainder", "--grad-shard-buffer")
    for row in data["ranked"][:3]:
        argv = shlex.split(row["estimate_command"])
        assert "--master-weights" in argv and argv[argv.index("--master-weights") + 1] == "remainder"
        assert ("--grad-shard-buffer" in argv) == (row["train_sharding"] == "zero1")
        again = _json(*argv[1:], "--json")
        assert again["step_time_s"] == row["step_time_s"]
