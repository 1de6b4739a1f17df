"""Session 15 fresh review of `fmstack plan train`, as its users run it: what was wrong, checked by hand.

- ``--precision bf16,bf16`` (or any value named twice) listed every configuration twice;
- the HTML scaling chart drew each bottleneck label far right of its point (plotly reads a category axis's
  annotation x "16" as category number 16) and cut off a relative efficiency above 1 (``scale --axis gpu``);
- the HTML report had no best row, bottleneck, reproduce command or notes (only the table and the figures);
- the cost had no price behind it anywhere (JSON, text, ``estimate train``), "-" was unexplained, and ``--objective
  cost`` over several instances stopped at the first unpriced one;
- a bare "none" in a row ("tp2 cp4 none") did not say it was the recompute choice;
- "no configuration fits" did not say how many GPUs the model state needs at the least;
- the report's sweep around one UltraServer tried 4 and 9 nodes (not whole UltraServers) and showed two points.
"""

from __future__ import annotations

import json
import math
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from fmstack.catalog import load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.cli.plan_cmd import sweep_nodes
from fmstack.cli.plan_render import factor_configs, spell_recompute
from fmstack.errors import InputError
from fmstack.perfmodel.planner import SearchSpace, plan_training
from fmstack.perfmodel.scaling import ScalePoint
from fmstack.reports.plan_report import scaling_figure

P5_PRICE_USD_PER_HOUR = 55.04
"""p5.48xlarge on-demand list price in the catalog (instances.yaml)."""


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fmstack", *args], capture_output=True, text=True, timeout=300)


def _json(*args: str) -> dict:  # type: ignore[type-arg]
    proc = _run(*args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def test_a_value_named_twice_is_searched_once() -> None:
    """Before: --precision bf16,bf16 doubled `considered` and ranked each configuration twice in a row."""
    cat = load_catalog(None)
    model, cluster = cat.model("llama3.1-8b"), build_cluster(cat, "p5.48xlarge", 8)
    once = plan_training(model, [cluster], tokens=1e12, top=6, space=SearchSpace(precisions=("bf16",)))
    twice = plan_training(
        model, [cluster], tokens=1e12, top=6,
        space=SearchSpace(precisions=("bf16", "bf16"), recompute=("none", "selective", "full", "none"),
                          micro_batches=(1, 2, 4, 8, 1), cp=(1, 2, 4, 8, 8)),
    )  # fmt: skip
    assert twice.considered == once.considered
    assert (twice.rejected_shape, twice.rejected_memory) == (once.rejected_shape, once.rejected_memory)
    configs = [e.config for e in twice.ranked]
    assert len(set(configs)) == len(configs) == 6
    assert configs == [e.config for e in once.ranked]


def _point(value: str, tokens_per_s: float, efficiency: float) -> ScalePoint:
    return ScalePoint(
        value=value, num_gpus=8, step_time_s=1.0, mfu=0.5, tokens_per_s=tokens_per_s, tokens_per_s_per_gpu=1.0,
        time_to_train_s=1.0, ideal_time_s=1.0, cost_usd=None, bottleneck="GEMM compute: 70 % of the step",
        config="tp1", scaling_efficiency=efficiency, efficiency_kind="relative", num_nodes=1, global_batch=1,
        global_batch_tokens=1, global_batch_changed=False, scale_out_fabric="efa-v2", network_bw_gbps_per_node=400.0,
        network_latency_us=1.0,
    )  # fmt: skip


def test_scaling_chart_marks_each_bottleneck_at_its_point() -> None:
    """A category axis places an annotation by the category's serial number (plotly layout.annotations.x): the
    label of the third point is at x = 2, not at x = "64" (read as category 64, far right of every point)."""
    points = [_point(v, 1e5 * (i + 1), 1.0) for i, v in enumerate(("16", "32", "64", "128"))]
    fig = scaling_figure(points, "nodes")
    assert fig.layout.xaxis.type == "category"  # type: ignore[attr-defined]
    marks = fig.layout.annotations  # type: ignore[attr-defined]
    assert [a.x for a in marks] == [0, 1, 2, 3]
    assert [a.y for a in marks] == [p.tokens_per_s for p in points]


def test_scaling_chart_shows_a_speedup_above_one() -> None:
    """Over GPU kinds the efficiency is a speed-up against the first (2.45 for GB200 against H100 in the README's
    sweep); the right axis was fixed at 0-1.05 and cut it off."""
    points = [_point("p5.48xlarge", 1e5, 1.0), _point("u-p6e-gb200x72", 2.45e5, 2.45)]
    fig = scaling_figure(points, "gpu")
    low, high = fig.layout.yaxis2.range  # type: ignore[attr-defined]
    assert low == 0 and high >= 2.45
    fig = scaling_figure([_point("8", 1e5, 1.0), _point("16", 1.9e5, 0.95)], "nodes")
    assert fig.layout.yaxis2.range[1] == pytest.approx(1.05)  # type: ignore[attr-defined]  # as before at most 1


def test_rows_are_priced_and_estimate_reproduces_the_cost() -> None:
    """cost_usd = hours x nodes x the catalog's price per node-hour, by hand; the row's estimate_command gives the
    same cost (ideal_cost_usd without failures), so a platform engineer can check one against the other."""
    data = _json("plan", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "64,128",
                 "--tokens", "1e12", "--top", "3", "--objective", "cost")  # fmt: skip
    for row in data["ranked"]:
        nodes = row["num_gpus"] // 8
        assert row["num_nodes"] == nodes
        assert row["cost_per_hour_usd"] == pytest.approx(nodes * P5_PRICE_USD_PER_HOUR)
        hours = 1e12 / row["tokens_per_s"] / 3600
        assert row["cost_usd"] == pytest.approx(hours * nodes * P5_PRICE_USD_PER_HOUR)
    best = data["ranked"][0]
    est = _json(*shlex.split(best["estimate_command"])[1:])
    assert est["num_nodes"] == best["num_nodes"]
    assert est["cost_per_hour_usd"] == pytest.approx(best["cost_per_hour_usd"])
    assert est["ideal_cost_usd"] == pytest.approx(best["cost_usd"])
    assert est["cost_usd"] == pytest.approx(est["time_to_train_s"] / 3600 * best["cost_per_hour_usd"])
    assert est["cost_usd"] > est["ideal_cost_usd"]  # failures and checkpoints cost hours


def test_with_failures_cost_matches_the_estimate_with_failures() -> None:
    data = _json("plan", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "64",
                 "--tokens", "1e12", "--top", "2", "--objective", "time-with-failures")  # fmt: skip
    for row in data["ranked"]:
        assert row["cost_usd"] == pytest.approx(row["time_to_train_s"] / 3600 * row["cost_per_hour_usd"])
    best = data["ranked"][0]
    est = _json(*shlex.split(best["estimate_command"])[1:])
    assert est["cost_usd"] == pytest.approx(best["cost_usd"])
    assert est["time_to_train_s"] == pytest.approx(best["time_to_train_s"])


def test_an_unpriced_instance_is_said_and_skipped_for_cost() -> None:
    """An instance without a price: "-" is explained (objective time), and a cost comparison plans the priced ones
    with a note instead of stopping (as plan rl does); all unpriced stays the one-line error."""
    data = _json("plan", "train", "--model", "llama3.1-8b", "--instance", "u-p6e-gb200x72", "--gpus", "72",
                 "--tokens", "1e12", "--top", "2")  # fmt: skip
    assert all(r["cost_usd"] is None and r["cost_per_hour_usd"] is None for r in data["ranked"])
    assert any("no price for u-p6e-gb200x72" in n for n in data["notes"])
    data = _json("plan", "train", "--model", "llama3.1-8b", "--instance", "p5e.48xlarge,p5.48xlarge", "--gpus",
                 "64", "--tokens", "1e12", "--top", "2", "--objective", "cost")  # fmt: skip
    assert {r["instance"] for r in data["ranked"]} == {"p5.48xlarge"}
    assert any("p5e.48xlarge at 64 GPUs skipped: --objective cost needs a price" in s for s in data["skipped"])


def test_estimate_train_says_its_cost_in_text() -> None:
    proc = _run("estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "8",
                "--tp", "1", "--tokens", "1e12")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "8 nodes x $55.04/h" in proc.stdout
    proc = _run("estimate", "train", "--model", "llama3.1-8b", "--instance", "u-p6e-gb200x72", "--gpus", "72",
                "--tokens", "1e12")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "cost: no price for u-p6e-gb200x72" in proc.stdout


def test_recompute_is_named_in_rows() -> None:
    """Before: a row read "tp2 cp4 none" when the rows differed in recompute."""
    shared, rows, _ = factor_configs(["tp2 cp4 mb1 bf16 none zero1", "tp2 cp4 mb1 bf16 selective zero1"])
    assert shared == "tp2 cp4 mb1 bf16 zero1"
    assert rows == ["recompute none", "recompute selective"]
    assert spell_recompute("tp8 bf16 selective(layernorm,moe_act) fsdp") == (
        "tp8 bf16 recompute selective(layernorm,moe_act) fsdp"
    )
    assert spell_recompute("tp8 bf16 selective+full2 fsdp") == "tp8 bf16 recompute selective+full2 fsdp"


def test_fits_nowhere_says_how_many_gpus_the_state_needs() -> None:
    """Llama 3.1 405B (405.85e9 parameters) x 18 B (2 bf16 weight + 4 fp32 gradient + 12 fp32 master and Adam
    moments) = 7,305 GB; an H100 holds 79.6 - 3 (reserve) = 76.6 GiB = 82.25e9 B usable: 7,305e9 / 82.25e9 = 88.8,
    so at least 89 GPUs before any activation, whatever the layout."""
    cat = load_catalog(None)
    model = cat.model("llama3.1-405b")
    with pytest.raises(InputError, match=r"\(7,305 GB: 18 B per parameter\) need at least 89 H100 GPUs"):
        plan_training(model, [build_cluster(cat, "p5.48xlarge", 1)], tokens=1e12)
    assert math.ceil(405.85e9 * 18 / (76.6 * 2**30)) == 89
    with pytest.raises(InputError) as info:  # 96 GPUs hold the state (128k tokens do not fit): not said
        plan_training(model, [build_cluster(cat, "p5.48xlarge", 12)], tokens=1e12, space=SearchSpace(seq_len=131072))
    assert "need at least" not in info.value.message


def test_report_sweep_steps_in_whole_ultraservers() -> None:
    cat = load_catalog(None)
    assert sweep_nodes(build_cluster(cat, "u-p6e-gb200x72", 18)) == [18, 36, 72, 144]
    assert sweep_nodes(build_cluster(cat, "u-p6e-gb200x72", 576)) == [144, 288, 576, 1152]
    assert sweep_nodes(build_cluster(cat, "p5.48xlarge", 64)) == [16, 32, 64, 128]
    assert sweep_nodes(build_cluster(cat, "p5.48xlarge", 1)) == [1, 2, 4, 8]
    # the instance named itself may take part of an UltraServer: its own node count stays a point
    assert 2 in sweep_nodes(build_cluster(cat, "p6e-gb200.36xlarge", 2))


def test_html_report_explains_the_best_row(tmp_path: Path) -> None:
    page = tmp_path / "plan.html"
    args = ("plan", "train", "--model", "llama3.1-8b", "--instance", "u-p6e-gb200x72", "--gpus", "72", "--tokens",
            "1e12", "--top", "2")  # fmt: skip
    proc = _run(*args, "--html", str(page))
    assert proc.returncode == 0, proc.stderr
    data = _json(*args)
    text = page.read_text()
    body = text.split("<body>", 1)[1]
    assert "<h2>best configuration</h2>" in body
    assert f"<pre>{data['estimate_command']}</pre>" in body
    assert data["ranked"][0]["bottleneck"] in body
    assert "days and cost assume no failures" in body
    assert "no price for u-p6e-gb200x72" in body
    # the sweep around one UltraServer: 1, 2, 4 and 8 of them, not 4 and 9 nodes
    for nodes, gpus in ((18, 72), (36, 144), (72, 288), (144, 576)):
        assert f"<tr><td>{nodes}</td><td>{gpus}</td>" in body
