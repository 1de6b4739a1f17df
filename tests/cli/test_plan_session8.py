"""Planning leftovers of session 7's review, each pinned with the behaviour a user expects (session 8)."""

from __future__ import annotations

import json

import pytest

from fmstack.catalog import load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.cli.common import duration_text
from fmstack.cli.plan_render import ranked_table
from fmstack.perfmodel.config import default_seq_len, describe_config
from fmstack.perfmodel.planner import SearchSpace, plan_training
from tests.cli.test_plan_ux import _invoke


def test_estimate_and_plan_default_to_the_same_sequence_length() -> None:
    """estimate train defaulted to 2048 tokens and plan train to 8192, so a plan's best row and a bare estimate of
    the same layout disagreed; both now take min(8192, the model's context): Llama 3's 8192, GPT-3's own 2048
    (plan used to train GPT-3 at 4x its context by default)."""
    cat = load_catalog()
    assert default_seq_len(cat.model("llama3.1-70b")) == 8192
    assert default_seq_len(cat.model("gpt3-175b")) == 2048
    code, out = _invoke("estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "1",
                        "--json")  # fmt: skip
    assert code == 0, out
    assert json.loads(out)["config"]["seq_len"] == 8192
    code, out = _invoke("plan", "train", "--model", "gpt3-175b", "--instance", "p5.48xlarge", "--gpus", "64",
                        "--tokens", "3e11", "--top", "1", "--json")  # fmt: skip
    assert code == 0, out
    data = json.loads(out)
    assert data["ranked"][0]["config"]["seq_len"] == 2048
    assert "--seq-len 2048" in data["estimate_command"]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(4.24, "4.2 s"), (13 * 60, "13 min"), (2.5 * 3600, "2.5 h"), (1234 * 3600, "1,234 h")],
)
def test_lost_time_is_printed_in_a_unit_that_shows_it(seconds: float, text: str) -> None:
    """The failures line printed "checkpoint_overhead 0 h" for 5 minutes; every duration keeps a visible digit."""
    assert duration_text(seconds) == text


def test_failures_line_keeps_small_losses_and_fractional_failures() -> None:
    code, out = _invoke("estimate", "train", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--nodes", "64",
                        "--tp", "8", "--pp", "4", "--recompute", "selective", "--tokens", "2e12")  # fmt: skip
    assert code == 0, out
    lost = next(x for x in out.splitlines() if x.startswith("time lost:"))
    assert " 0 h" not in lost and "checkpoint_overhead 5 min" in lost
    code, out = _invoke("estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "1",
                        "--recompute", "full", "--tokens", "1e10")  # fmt: skip
    assert code == 0, out
    line = next(x for x in out.splitlines() if x.startswith("failures:"))
    assert ", 0 expected" not in line and "0.0" in line  # a fraction of one failure, not "0"


def test_ranked_table_says_shared_columns_once_and_does_not_wrap() -> None:
    """With one instance and one GPU count the table repeated both on every row and wrapped each configuration over
    three lines at 140 columns; they move to the title with the batch and sequence the search fixed."""
    from rich.console import Console

    cat = load_catalog()
    result = plan_training(cat.model("llama3.1-70b"), [build_cluster(cat, "p5.48xlarge", 64)], tokens=2e12,
                           space=SearchSpace(seq_len=8192, global_batch=512), top=5)  # fmt: skip
    table = ranked_table(result)
    headers = [str(c.header) for c in table.columns]
    assert "instance" not in headers and "GPUs" not in headers
    assert "on 512 p5.48xlarge GPUs, gb512 seq8192" in str(table.title)
    console = Console(width=140, record=True)
    console.print(table)
    lines = console.export_text().splitlines()
    body = [x for x in lines if x.startswith("│")]
    assert len(body) == len(result.ranked)  # one line per row
    assert all("of the step" not in x for x in body)


def test_ranked_table_over_instances_and_gpu_counts_does_not_wrap_either() -> None:
    """--objective cost over three instances and two GPU counts wrapped most configurations at 140 columns (the
    precision, recompute and sharding every row shares, and sp tp-overlap on every tp > 1 row); the shared words go
    to the title, the implied sp / tp-overlap to a caption, and what a row still says is its own layout."""
    from rich.console import Console

    cat = load_catalog()
    clusters = [build_cluster(cat, name, gpus // 8) for name in ("p5.48xlarge", "p5en.48xlarge", "p6-b200.48xlarge")
                for gpus in (512, 1024)]  # fmt: skip
    result = plan_training(cat.model("llama3.1-70b"), clusters, tokens=2e12, objective="cost", top=10)
    table = ranked_table(result)
    assert "instance" in [str(c.header) for c in table.columns]  # rows differ in GPUs, so both stay
    shared_words = str(table.title).split(", ", 1)[1].split()
    assert {"seq8192", "bf16"} <= set(shared_words)
    console = Console(width=140, record=True)
    console.print(table)
    lines = console.export_text().splitlines()
    body = [x for x in lines if x.startswith("│")]
    assert len(body) == len(result.ranked)  # one line per row
    configs = [x.split("│")[4].split() for x in body]
    assert all(w not in ws for ws in configs for w in shared_words)
    if any(e.config.tp > 1 for e in result.ranked):
        assert any(x.startswith("every tp > 1 row: sequence parallel (sp)") for x in lines)
        assert all("tp-overlap" not in ws and "sp" not in ws for ws in configs)
    # each row plus the title's shared words is the row's whole configuration, in order
    for entry, words in zip(result.ranked, configs, strict=True):
        full = describe_config(entry.config).split()
        assert [w for w in full if w not in shared_words and w not in ("sp", "tp-overlap")] == words


def test_planner_overlaps_tp_where_megatron_allows_it_and_the_flag_turns_it_off() -> None:
    """The planner searched TP without its GEMM overlap, which Megatron-Bridge's Llama recipes turn on (T067,
    T068, T073); every tp > 1 row now overlaps, never faster than the same row with --no-overlap-tp in reverse."""
    cat = load_catalog()
    arch, cluster = cat.model("llama3.1-70b"), build_cluster(cat, "p5.48xlarge", 64)
    on = plan_training(arch, [cluster], tokens=2e12, space=SearchSpace(seq_len=8192, global_batch=512), top=50)
    off = plan_training(arch, [cluster], tokens=2e12, space=SearchSpace(seq_len=8192, global_batch=512,
                                                                       overlap_tp=False), top=50)  # fmt: skip
    assert any(e.config.tp > 1 for e in on.ranked)
    assert all(e.config.overlap_tp == (e.config.tp > 1) for e in on.ranked)
    assert not any(e.config.overlap_tp for e in off.ranked)
    assert on.best.step_time_s <= off.best.step_time_s
    by_config = {e.config.with_(overlap_tp=False): e.step_time_s for e in off.ranked}
    faster = [by_config[e.config.with_(overlap_tp=False)] - e.step_time_s
              for e in on.ranked if e.config.tp > 1 and e.config.with_(overlap_tp=False) in by_config]  # fmt: skip
    assert faster and all(d > 0 for d in faster)


def test_estimate_command_of_an_overlapped_row_reproduces_it() -> None:
    code, out = _invoke("plan", "train", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--gpus", "512",
                        "--tokens", "2e12", "--global-batch", "512", "--top", "10", "--json")  # fmt: skip
    assert code == 0, out
    row = next(r for r in json.loads(out)["ranked"] if r["config"]["tp"] > 1)
    assert "--overlap-tp" in row["estimate_command"]
    code, out = _invoke(*row["estimate_command"].split()[1:], "--json")
    assert code == 0, out
    assert json.loads(out)["step_time_s"] == row["step_time_s"]


def test_validation_rows_whose_recipes_overlap_tp_are_run_with_it() -> None:
    """tp_comm_overlap as each row's recipe sets it (notes cite the file): on for the NeMo 24.07 Llama 70B rows and
    Megatron-Bridge 0.2.0's Llama 3 70B / 3.1 405B, off for its Qwen3-235B H100 recipe."""
    from fmstack.perfmodel.validation import validate_training

    configs = {c.id: c.config for c in validate_training(load_catalog())}
    for case in ("T062", "T065", "T067", "T068", "T073"):
        assert "tp-overlap" in configs[case], case
    for case in ("T060", "T061", "T063", "T071"):
        assert "tp-overlap" not in configs[case], case


def test_scale_sweeps_nodes_by_default_and_takes_the_gpu_counts_as_points() -> None:
    """`fmstack scale --gpus 64,128,256` said "Missing option '--axis'"; nodes is the default axis and several GPU
    counts are its points. Another axis still takes one starting count, and says why."""
    code, out = _invoke("scale", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "8,16,32",
                        "--tokens", "1e11", "--json")  # fmt: skip
    assert code == 0, out
    data = json.loads(out)
    assert data["axis"] == "nodes"
    assert [p["num_gpus"] for p in data["points"]] == [8, 16, 32]
    code, out = _invoke("scale", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "8,16",
                        "--tokens", "1e11", "--axis", "gpu")  # fmt: skip
    assert code == 2 and "--axis gpu takes one GPU count" in out


def test_factored_configs_keep_tp16_rows_as_tp_rows() -> None:
    from fmstack.cli.plan_render import IMPLIED_CAPTION, factor_configs

    shared, rows, caption = factor_configs(["tp16 pp1 dp4 mb1 bf16 sp tp-overlap", "tp1 pp1 dp64 mb1 bf16"])
    assert shared == "pp1 mb1 bf16" and caption == IMPLIED_CAPTION  # "tp16" starts with "tp1" and is a TP row
    assert rows == ["tp16 dp4", "tp1 dp64"]
    shared, rows, caption = factor_configs(["tp1 dp8 mb1 bf16 full fsdp"])  # one row: its layout stays in it
    assert shared == "bf16 recompute full fsdp" and rows == ["tp1 dp8 mb1"] and caption is None
