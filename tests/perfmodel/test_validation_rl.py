"""The NeMo RL side check (`fmstack validate --only rlcheck`): invariants only; the errors are reported, not bounded."""

from __future__ import annotations

import json
import math

from click.testing import CliRunner

from fmstack.catalog import load_catalog
from fmstack.cli.main import cli
from fmstack.perfmodel.validation_rl import STAGES, check_nemorl, prompt_lengths, row_config, rows, summarize


def test_every_row_predicted_or_explained() -> None:
    checks = check_nemorl(load_catalog(None))
    assert [c.id for c in checks] == [r["id"] for r in rows()]
    assert len(checks) == 25
    for c in checks:
        if c.not_expressible:
            assert c.predicted_step_s is None
            continue
        assert c.predicted_step_s is not None and c.step_error_pct is not None
        assert math.isfinite(c.step_error_pct) and c.predicted_step_s > 0
        assert set(c.predicted_stages_s) == set(STAGES)
        # the stages add up: in sequence on-policy, rollout overlapped with the rest one step off
        s = c.predicted_stages_s
        if c.policy == "on":
            assert math.isclose(sum(s.values()), c.predicted_step_s, rel_tol=1e-9)
        else:
            rest = s["logprobs"] + s["training"]
            assert math.isclose(max(s["rollout"], rest) + s["weight_sync"], c.predicted_step_s, rel_tol=1e-9)
        tokens = c.samples * (c.prompt_len + c.response_len)
        assert c.predicted_tokens_per_s_per_gpu is not None
        assert math.isclose(c.predicted_tokens_per_s_per_gpu * c.predicted_step_s * c.num_gpus, tokens, rel_tol=1e-9)
    # the dense rows (Llama 3.1 8B, Qwen3-32B) are expressed exactly and all predicted
    dense = [c for c in checks if c.model in ("llama3.1-8b", "qwen3-32b")]
    assert len(dense) == 8 and all(c.exact and c.predicted_step_s is not None for c in dense)
    # every row runs, the H100 rows with generation TP 16 / 32 included (TP across whole NVLink domains)
    assert {c.id for c in checks if c.not_expressible} == set()
    assert summarize(checks, "all").compared == 25


def test_prompt_length_from_the_table() -> None:
    """tokens/s/GPU x step x GPUs / samples - mean response: 100-130 tokens of math prompt on every model."""
    lengths = prompt_lengths(rows())
    assert set(lengths) == {"deepseek-v3", "qwen3-235b-a22b", "qwen3-30b-a3b", "llama3.1-8b", "qwen3-32b"}
    assert all(100 <= v <= 135 for v in lengths.values()), lengths
    # hand check, Llama 3.1 8B on-policy H100: 1581 x 92.8 x 16 / 2048 - 1019 = 127.2
    assert math.isclose(1581 * 92.8 * 16 / 2048 - 1019, 127.2, abs_tol=0.1)


def test_cli_rlcheck_prints_and_json() -> None:
    runner = CliRunner()
    res = runner.invoke(cli, ["validate", "--only", "rlcheck", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert list(data) == ["rl_check_nemorl", "rl_stage_check"]  # session 10: the per-stage rows beside the step
    block = data["rl_check_nemorl"]
    assert len(block["cases"]) == 25 and block["summary"]["all"]["compared"] == 25
    res = runner.invoke(cli, ["validate", "--only", "rlcheck"])
    assert res.exit_code == 0, res.output
    assert "RL check all: 25 rows" in res.output
    assert "RL stages generation: 5 rows" in res.output
    for c in check_nemorl(load_catalog(None)):
        print(c.id, c.measured_step_s, c.predicted_step_s, c.step_error_pct, c.predicted_stages_s, c.not_expressible)


def test_rows_train_with_megatrons_distributed_optimizer() -> None:
    """NeMo RL's Megatron backend shards the optimizer state, not the weights (``use_distributed_optimizer: true``,
    ``use_custom_fsdp: false``): every row trains with ZeRO-1, also where training tp = pp = 1 (estimate rl's default
    there is FSDP, veRL's backend, whose weight gathers NeMo RL does not run); the stage rows too."""
    from fmstack.perfmodel.rl_stagecheck import _config, stage_rows

    lengths = prompt_lengths(rows())
    flat = [r for r in rows() if r["train_tp"] == "1" and r["train_pp"] == "1"]
    assert flat  # the rows the default rule would have sent to FSDP
    for r in rows():
        assert row_config(r, lengths[r["model"]]).train_sharding == "zero1"
    for r in stage_rows():
        assert _config(r, 130).train_sharding == "zero1"
