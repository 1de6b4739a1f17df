"""`scale` and `plan train` / `estimate train` as the session-13 review found them: honest `scale --help`, GPU
counts that are whole numbers, the HSDP shard group as a flag, ranking a sweep with failures."""

from __future__ import annotations

import json
import shlex

import pytest
from click.testing import CliRunner

from fmstack.catalog import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.cli.estimate_cmd import estimate_argv
from fmstack.cli.main import cli
from fmstack.cli.plan_cmd import parse_gpus
from fmstack.errors import InputError
from fmstack.perfmodel.config import TrainConfig
from fmstack.perfmodel.training import estimate_training


def _help(*command: str) -> str:
    result = CliRunner().invoke(cli, [*command, "--help"], terminal_width=200)
    assert result.exit_code == 0
    return result.output


def test_scale_help_lists_only_what_scale_applies() -> None:
    """scale refuses a calibration profile and takes one instance: its help says neither more nor less."""
    text = _help("scale")
    assert "--calibration" not in text
    assert "comma-separated, from the catalog" not in text
    assert "Instance or UltraServer name from the catalog (one)." in text
    assert "time-with-failures" in text
    plan = _help("plan", "train")  # plan train keeps them
    assert "--calibration PATH" in plan and "--calibration-force" in plan
    assert "Instance name(s), comma-separated, from the catalog." in plan


def test_gpu_counts_are_whole_numbers() -> None:
    assert parse_gpus("1e1") == [10]
    assert parse_gpus("8.0,16") == [8, 16]
    for text in ("8.9", "nan", "inf"):
        with pytest.raises(InputError, match=f"'{text}' is not a whole number of GPUs"):
            parse_gpus(text)


def test_hsdp_shard_size_flag_round_trips(catalog: Catalog) -> None:
    """TP 2 on one p5 node leaves dp 4: the default shard group of 8 cannot divide it; the flag can, and the
    reproduce line a plan prints writes it."""
    cfg = TrainConfig(tp=2, dp=4, sequence_parallel=True, sharding="hsdp", hsdp_shard_size=4, global_batch=4)
    argv = estimate_argv("llama3.1-8b", "p5.48xlarge", 8, cfg)
    assert argv[argv.index("--hsdp-shard-size") + 1] == "4"
    assert "--hsdp-shard-size" not in estimate_argv("llama3.1-8b", "p5.48xlarge", 8, cfg.with_(hsdp_shard_size=8))
    result = CliRunner().invoke(cli, [*argv[1:], "--seq-len", "8192", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    expected = estimate_training(catalog.model("llama3.1-8b"), build_cluster(catalog, "p5.48xlarge", 1),
                                 cfg.with_(seq_len=8192))  # fmt: skip
    assert data["step_time_s"] == pytest.approx(expected.step_time_s)
    assert data["config"]["hsdp_shard_size"] == 4


def test_scale_json_names_its_objective() -> None:
    args = shlex.split("scale --model llama3.1-8b --instance p5.48xlarge --gpus 64 --tokens 1e12 --values 8 --json "
                       "--objective time-with-failures")  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["objective"] == "time-with-failures"
    point = data["points"][0]
    assert point["time_to_train_s"] > point["ideal_time_s"]
