"""FSDP's reduce_dtype under fp32-params (``--reduce-dtype``): the gradient reduce-scatter in fp32 (default) or bf16.

PyTorch FSDP2 ``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=...)``: the reduce-scatter runs in
``reduce_dtype`` and its result is cast to the sharded fp32 parameters' dtype, so bf16 halves the bytes on the wire and
changes nothing stored (docs/perfmodel.md, "Storage layouts").
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from fmstack.catalog import load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.cli.main import cli
from fmstack.errors import InputError
from fmstack.perfmodel.collectives import GroupPlacement, collective_time_s
from fmstack.perfmodel.columns import columns_of
from fmstack.perfmodel.config import TrainConfig, describe_config, reduce_dtype_of, wire_fields
from fmstack.perfmodel.memory import local_params
from fmstack.perfmodel.modelconsts import model_consts
from fmstack.perfmodel.training import estimate_training

CAT = load_catalog(None)
BASE = TrainConfig(dp=8, global_batch=8, seq_len=4096, sharding="fsdp", master_weights="fp32-params")


def test_wire_fields_of_the_reduce_dtype() -> None:
    assert wire_fields(None, "fp32-params") == {"reduce_bytes": 4}  # FSDP's default reduce_dtype: fp32
    assert wire_fields(None, "fp32-params", "fp32") == {"reduce_bytes": 4}
    assert wire_fields("fp32", "fp32-params", "bf16") == {"grad_bytes": 4, "reduce_bytes": 2}
    for master in (None, "fp32", "remainder", "none"):
        with pytest.raises(InputError) as err:
            wire_fields(None, master, "bf16")
        assert err.value.field == "reduce-dtype"
    with pytest.raises(InputError, match="allowed: fp32, bf16"):
        wire_fields(None, "fp32-params", "fp16")


def test_bf16_reduce_halves_the_reduce_scatter_and_nothing_else() -> None:
    """Llama 3.1 8B, FSDP over one p5 node (dp 8): the two layouts differ on the DP link by exactly one reduce-scatter
    of the gradients at 4 B minus one at 2 B (alpha-beta is linear in the size, so per-layer latencies cancel); the
    gathers, the memory and the compute are the same."""
    model, cluster = CAT.model("llama3.1-8b"), build_cluster(CAT, "p5.48xlarge", 1)
    fp32 = BASE.with_(**wire_fields(None, "fp32-params", "fp32"))
    bf16 = BASE.with_(**wire_fields(None, "fp32-params", "bf16"))
    a, b = estimate_training(model, cluster, fp32), estimate_training(model, cluster, bf16)
    params, _ = local_params(model_consts(model), columns_of(fp32))
    group = GroupPlacement(num_ranks=8, ranks_per_domain=8)
    saved = float(collective_time_s("reduce_scatter", params * 4, group, cluster)) - float(
        collective_time_s("reduce_scatter", params * 2, group, cluster)
    )
    assert saved > 0
    assert a.comm["dp"].link_s - b.comm["dp"].link_s == pytest.approx(saved, rel=1e-9)
    assert a.memory == b.memory
    assert a.compute_s == b.compute_s
    assert (reduce_dtype_of(fp32), reduce_dtype_of(bf16), reduce_dtype_of(TrainConfig())) == ("fp32", "bf16", None)
    assert "reduce-bf16" in describe_config(bf16) and "reduce-bf16" not in describe_config(fp32)


def _run(argv: list[str]) -> dict:  # type: ignore[type-arg]
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)  # type: ignore[no-any-return]


def test_estimate_train_flag_and_its_reproduce_argv() -> None:
    from fmstack.cli.estimate_cmd import estimate_argv

    argv = ["estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "2",
            "--sharding", "fsdp", "--master-weights", "fp32-params", "--json"]  # fmt: skip
    fp32, bf16 = _run(argv), _run([*argv, "--reduce-dtype", "bf16"])
    assert (fp32["config"]["reduce_bytes"], bf16["config"]["reduce_bytes"]) == (4, 2)
    assert bf16["breakdown"]["comm"]["dp"]["link_s"] < fp32["breakdown"]["comm"]["dp"]["link_s"]
    cfg = BASE.with_(**wire_fields(None, "fp32-params", "bf16"))
    back = estimate_argv("llama3.1-8b", "p5.48xlarge", 8, cfg)
    assert back[back.index("--reduce-dtype") + 1] == "bf16"
    assert "--reduce-dtype" not in estimate_argv("llama3.1-8b", "p5.48xlarge", 8, BASE.with_(reduce_bytes=4))


def test_plan_train_and_estimate_rl_carry_it() -> None:
    plan = _run(["plan", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "16", "--tokens", "1e11",
                 "--master-weights", "fp32-params", "--reduce-dtype", "bf16", "--top", "3", "--json"])  # fmt: skip
    rows = plan["ranked"]
    assert rows and all(row["config"]["reduce_bytes"] == 2 for row in rows)
    assert all("--reduce-dtype bf16" in row["estimate_command"] for row in rows)
    rl = _run(["estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "2",
               "--train-tp", "1", "--reduce-dtype", "bf16", "--json"])  # fmt: skip
    assert rl["train_step"]["config"]["reduce_bytes"] == 2


@pytest.mark.parametrize("flag", [["--master-weights", "fp32-params"], ["--reduce-dtype", "bf16"]])
def test_plan_rl_applies_fsdp_only_flags_to_its_fsdp_rows(flag: list[str]) -> None:
    """Until session 18 ``plan rl --master-weights fp32-params`` was refused before the search (the base was checked at
    its Megatron default, train tp 8); the flags apply to the FSDP rows (train tp = pp = 1) and the others keep
    their backend's layout."""
    plan = _run(["plan", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "2", *flag, "--json"])
    fsdp = [r for r in plan["ranked"] if "--train-tp 1 --train-pp 1" in r["estimate_command"]]
    megatron = [r for r in plan["ranked"] if "--train-tp 1 --train-pp 1" not in r["estimate_command"]]
    assert fsdp and megatron
    assert all(" ".join(flag) in r["estimate_command"] for r in fsdp)
    assert not any(flag[0] in r["estimate_command"] for r in megatron)
