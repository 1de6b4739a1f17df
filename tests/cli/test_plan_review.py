"""What a planning review (session 7) found, each pinned with the behaviour a user expects."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fmstack.catalog import load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.cli.plan_cmd import parse_gpus
from fmstack.errors import InputError
from fmstack.perfmodel.config import TrainConfig, validate_config
from fmstack.perfmodel.planner import SearchSpace, enumerate_space, plan_training
from fmstack.perfmodel.scaling import run_sweep
from fmstack.perfmodel.training import estimate_training
from fmstack.reports.plan_report import breakdown_figure
from tests.cli.test_plan_cli import _commands
from tests.cli.test_plan_ux import _invoke


def test_html_breakdown_bars_add_up_to_the_step_time() -> None:
    """Every part of the step gets a bar, so each stacked bar is the step time (the overlap slowdown, 12 % of
    this step, was missing from the HTML report). FSDP rows overlap their gathers with compute (and pay for it): searched
    alone, as they no longer lead this plan since the gradients went on the wire in fp32 (session 17)."""
    cat = load_catalog()
    cluster = build_cluster(cat, "p5.48xlarge", 64)
    space = SearchSpace(seq_len=8192, global_batch=512, sharding=("fsdp",))
    result = plan_training(cat.model("llama3.1-70b"), [cluster], tokens=2e12, space=space, top=3)
    assert any(e.parts_s["overlap"] > 0.05 * e.step_time_s for e in result.ranked)
    fig = breakdown_figure(result)
    names = {trace.name for trace in fig.data}  # type: ignore[attr-defined]
    assert set(result.ranked[0].parts_s) <= names
    for row, est in enumerate(result.ranked):
        total = sum(float(trace.x[row]) for trace in fig.data)  # type: ignore[attr-defined]
        assert total == pytest.approx(est.step_time_s, rel=1e-12)


@pytest.mark.parametrize("command", [("plan", "train"), ("estimate", "train")])
def test_help_examples_copy_paste_and_run(command: tuple[str, ...], tmp_path: Path, monkeypatch: Any) -> None:
    """The examples in --help keep their line breaks (click rewrapped them into '... \\     --gpus ...', which a
    shell reads as a stray ' ' argument) and run as printed."""
    monkeypatch.chdir(tmp_path)  # the cost example writes plan.html
    code, help_text = _invoke(*command, "--help")
    assert code == 0
    assert "\\ " not in help_text
    commands = _commands(help_text, f"fmstack {' '.join(command)} ")
    assert commands
    for argv in commands:
        code, out = _invoke(*argv, "--json")
        assert code == 0, (argv, out)


@pytest.mark.parametrize(
    ("name", "instance", "nodes", "space"),
    [
        ("llama3.1-8b", "p5.48xlarge", 8, SearchSpace(seq_len=1_000_000)),
        ("qwen3-30b-a3b", "p5.48xlarge", 2, SearchSpace(seq_len=4096, global_batch=96)),
        ("deepseek-v3", "p5.48xlarge", 32, SearchSpace(seq_len=4096, precisions=("fp8",))),
    ],
)
def test_the_planner_ranks_nothing_estimate_train_refuses(
    name: str, instance: str, nodes: int, space: SearchSpace
) -> None:
    """Every configuration the planner may rank passes estimate's own checks (it printed an `fmstack estimate
    train` line for a 1M-token sequence that the estimate then refused)."""
    cat = load_catalog()
    model, cluster = cat.model(name), build_cluster(cat, instance, nodes)
    try:
        result = plan_training(model, [cluster], tokens=1e12, space=space, top=3)
    except InputError as exc:
        assert exc.field == "seq_len"
        assert "at most 4 x 131072 = 524288" in str(exc)
        return
    cols, _ = enumerate_space(model, cluster, space)
    for j in np.random.default_rng(0).choice(len(cols), size=min(2000, len(cols)), replace=False):
        validate_config(cols.row(int(j)), model, cluster.num_gpus)
    for est in result.ranked:
        validate_config(est.config, model, cluster.num_gpus)


def test_a_seq_len_sweep_skips_a_length_past_the_context() -> None:
    cat = load_catalog()
    sweep = run_sweep(cat, cat.model("llama3.1-8b"), axis="seq-len", values=["8192", "1000000"],
                      instance="p5.48xlarge", gpus=64, tokens=1e12, space=SearchSpace())  # fmt: skip
    assert [p.value for p in sweep.points] == ["8192"]
    assert sweep.skipped == [
        "1000000: skipped: seq_len(1000000) is far beyond llama3.1-8b's max_seq_len(131072): at most 4 x 131072 = 524288"
    ]


def test_causal_mfu_halves_the_attention_core_by_hand() -> None:
    """GPT-3 175B (l 96, h 12,288) at s 2,048: the full count has 12 l h s attention-core FLOPs per token
    (Narayanan et al. 2021, eq. 3's s / 6h term), the causal count (current Megatron-LM logs) half: the two differ
    by 6 l h s = 1.4496e10 FLOPs per token; at 128k context Llama 3.1 8B's causal MFU is far below the full one."""
    cat = load_catalog()
    cluster = build_cluster(cat, "p5.48xlarge", 8)
    cfg = TrainConfig(tp=8, pp=8, dp=1, sequence_parallel=True, global_batch=64, seq_len=2048)
    est = estimate_training(cat.model("gpt3-175b"), cluster, cfg)
    flops_per_token_gap = (est.mfu - est.mfu_causal) * 989.5e12 * 64 * est.step_time_s / est.tokens_per_step
    assert cluster.gpu.bf16_dense_tflops == 989.5  # H100 SXM dense BF16 (catalog)
    assert flops_per_token_gap == pytest.approx(6 * 96 * 12288 * 2048, rel=1e-3)
    assert est.tflops_per_gpu_causal / est.tflops_per_gpu == pytest.approx(est.mfu_causal / est.mfu, rel=1e-12)
    long = estimate_training(
        cat.model("llama3.1-8b"), build_cluster(cat, "p5.48xlarge", 1),
        TrainConfig(cp=8, global_batch=1, seq_len=131072, recompute="full"),
    )  # fmt: skip
    assert est.to_json()["mfu_causal"] == est.mfu_causal
    assert long.mfu_causal < 0.65 * long.mfu


def test_estimate_says_what_sizes_the_file_system() -> None:
    """A synchronous checkpoint of Llama 3.1 405B at 16,384 GPUs asks for petabytes of FSx; the line says that the
    checkpoint write, not data reads or space, is what asks for it."""
    code, out = _invoke("estimate", "train", "--model", "llama3.1-405b", "--instance", "p5.48xlarge", "--gpus", "16384",
                        "--tp", "8", "--pp", "16", "--cp", "4", "--vpp", "4", "--global-batch", "512", "--seq-len",
                        "8192", "--tokens", "15e12", "--sync-checkpoint")  # fmt: skip
    assert code == 0, out
    text = " ".join(out.split())
    assert "FSx fsx-persistent-1000 10,207.2 TiB needed (read 1.2, write 10,207.2, space 12.0 TiB)" in text


def test_gpu_ranges_end() -> None:
    """Ranges that never ended (0 doubled, a step <= 0) are refused; the ones in --help still expand."""
    assert parse_gpus("512-4096") == [512, 1024, 2048, 4096]
    assert parse_gpus("512-2048:512") == [512, 1024, 1536, 2048]
    assert parse_gpus("8,64-128") == [8, 64, 128]
    assert len(parse_gpus(f"1-{2**20}")) == 21  # the longest doubling range within a cluster's 2^20 GPUs (session 20)
    with pytest.raises(InputError, match="allowed: at most 1,048,576"):  # 1-(2^63 - 1) expanded to 63 counts before
        parse_gpus(f"1-{2**63 - 1}")
    for bad in ("0-8", "64-512:0", "64-512:-64", "512-64", "1-65:1"):
        with pytest.raises(InputError):
            parse_gpus(bad)


def test_plan_rows_carry_ideal_time_like_estimate() -> None:
    """`time_to_train_s` is ideal in a plan row but includes failures in estimate's JSON; `ideal_time_s` is the
    same quantity under the same key in both."""
    code, out = _invoke("plan", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "64",
                        "--tokens", "1e12", "--top", "2", "--json")  # fmt: skip
    assert code == 0, out
    row = json.loads(out)["ranked"][0]
    assert row["ideal_time_s"] == row["time_to_train_s"] == pytest.approx(1e12 / row["tokens_per_s"], rel=1e-12)
    code, out = _invoke(*shlex.split(row["estimate_command"])[1:], "--json")
    assert code == 0, out
    est = json.loads(out)
    assert est["ideal_time_s"] == row["ideal_time_s"]
    assert est["time_to_train_s"] > est["ideal_time_s"]


def test_plan_says_when_the_default_batch_is_the_bottleneck() -> None:
    """Llama 3.1 8B on 65,536 H100 with the default batch: 1,024 sequences over dp 1,024 is one micro-batch per
    pipeline, so the bubble of pp 4 is (4 - 1) / 1 = 3 stage-steps against 1 of work (75 % of the pipeline, 48 % of
    the step with the DP reduction, fp32 on the wire since session 17: 55 % with bf16, 59 % before the planner
    overlapped TP); the plan says a larger --global-batch is the fix, and nothing when it was given."""
    code, out = _invoke("plan", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "65536",
                        "--tokens", "1e12", "--top", "1", "--json")  # fmt: skip
    assert code == 0, out
    data = json.loads(out)
    best = data["ranked"][0]
    assert best["config"]["pp"] == 4
    share = best["breakdown"]["parts_s"]["bubble"] / best["step_time_s"]
    assert 0.45 < share < 0.75  # the pipeline's 75 % diluted by the DP reduction outside it (0.478)
    assert data["notes"] == [
        "the default global batch (1024 sequences, 8.4M tokens) leaves 1 micro-batch per pipeline of 4 stages on "
        f"65536 GPUs: the bubble is {share * 100:.0f} % of the step; a larger --global-batch shrinks it"
    ]
    code, out = _invoke("plan", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "65536",
                        "--tokens", "1e12", "--top", "1", "--global-batch", "1024", "--json")  # fmt: skip
    assert json.loads(out)["notes"] == []


def test_an_instance_or_count_named_twice_is_searched_once() -> None:
    """'--instance p5.48xlarge,p5.48xlarge --gpus 64,64' ranked the same configuration four times; an alias
    (dgx-h100-80gb for dgx-h100) is the same cluster too."""
    for instances, gpus in (("p5.48xlarge,p5.48xlarge", "64,64"), ("dgx-h100,dgx-h100-80gb", "64,32-64")):
        code, out = _invoke("plan", "train", "--model", "llama3.1-8b", "--instance", instances, "--gpus", gpus,
                            "--tokens", "1e12", "--top", "4", "--json")  # fmt: skip
        assert code == 0, out
        data = json.loads(out)
        rows = [(r["num_gpus"], json.dumps(r["config"], sort_keys=True)) for r in data["ranked"]]
        assert len(set(rows)) == len(rows) == 4
        assert {r["instance"] for r in data["ranked"]} == {instances.split(",")[0]}
    assert parse_gpus("64,64,32-64") == [64, 32]


def test_a_sweep_value_given_twice_is_one_point() -> None:
    code, out = _invoke("scale", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "64", "--tokens",
                        "1e12", "--axis", "nvlink", "--values", "8,16,8", "--json")  # fmt: skip
    assert code == 0, out
    assert [p["value"] for p in json.loads(out)["points"]] == ["8", "16"]


def test_plan_says_which_stack_a_sharded_best_row_describes() -> None:
    """A best row with FSDP sharding carries a note that its efficiencies are fused-kernel ones (the side check
    found eager PyTorch FSDP slower); a Megatron-style best row (ZeRO-1) does not."""
    from fmstack.cli.plan_render import stack_notes

    cat = load_catalog()
    cluster = build_cluster(cat, "p5.48xlarge", 64)
    fsdp = plan_training(cat.model("llama3.1-70b"), [cluster], tokens=2e12,
                         space=SearchSpace(seq_len=8192, global_batch=512, sharding=("fsdp",)), top=1)  # fmt: skip
    zero1 = plan_training(cat.model("llama3.1-70b"), [cluster], tokens=2e12,
                          space=SearchSpace(seq_len=8192, global_batch=512, sharding=("zero1",)), top=1)  # fmt: skip
    assert "eager PyTorch FSDP ran 35-57 % slower" in stack_notes(fsdp)[0]
    assert stack_notes(zero1) == []
