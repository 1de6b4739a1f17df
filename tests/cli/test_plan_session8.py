"""Planning leftovers of session 7's review, each pinned with the behaviour a user expects (session 8)."""

from __future__ import annotations

import json

import pytest

from fmstack.catalog import load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.cli.common import duration_text
from fmstack.cli.plan_cmd import _ranked_table
from fmstack.perfmodel.config import default_seq_len
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
    line = next(x for x in out.splitlines() if x.startswith("failures:"))
    assert " 0 h" not in line
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
    table = _ranked_table(result)
    headers = [str(c.header) for c in table.columns]
    assert "instance" not in headers and "GPUs" not in headers
    assert "on 512 x p5.48xlarge GPUs, gb512 seq8192" in str(table.title)
    console = Console(width=140, record=True)
    console.print(table)
    lines = console.export_text().splitlines()
    body = [x for x in lines if x.startswith("│")]
    assert len(body) == len(result.ranked)  # one line per row
    assert all("of the step" not in x for x in body)
