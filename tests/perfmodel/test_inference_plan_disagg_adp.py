"""Disaggregated splits with attention DP in `plan serve` and `estimate serve --attention-dp --prefill-replicas P
--decode-replicas D` (DeepSeek-V3 fp8, 8192/256 tokens, TTFT p99 3 s, ITL p99 50 ms, 10 req/s)."""

from __future__ import annotations

import json
import math
import shlex

import numpy as np
import pytest
from click.testing import CliRunner

from fmstack.catalog import Catalog, load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.cli.main import cli
from fmstack.cli.plan_serve_render import plan_serve_json
from fmstack.perfmodel.inference import ServeConfig, deployment
from fmstack.perfmodel.inference_disagg import SLO, kv_move, kv_transfer_s, prefill_alone_s
from fmstack.perfmodel.inference_plan import ServePlan, plan_serve
from fmstack.perfmodel.inference_plan_candidate import split_label
from fmstack.perfmodel.inference_plan_disagg import prefill_servers
from fmstack.perfmodel.inference_step import RankLoad, step_time

CASE = {"qps": 10.0, "input_len": 8192, "output_len": 256, "slo": SLO(ttft_s=3.0, itl_s=0.05)}


@pytest.fixture(scope="module")
def cat() -> Catalog:
    return load_catalog(None)


def _plan(cat: Catalog, **kw: object) -> ServePlan:
    return plan_serve(cat, cat.model("deepseek-v3"), instances=("p5en.48xlarge",), precisions=("fp8",),
                      **CASE, **kw)  # type: ignore[arg-type]  # fmt: skip


@pytest.fixture(scope="module")
def plan(cat: Catalog) -> ServePlan:
    return _plan(cat)


def test_an_attention_dp_split_is_the_cheapest_plan(cat: Catalog, plan: ServePlan) -> None:
    """8192-token prompts: an attention-DP prefill replica runs eight prompts side by side (one per rank, each within
    its own 2048-token budget) where a TP 8 replica runs one, so two prefill nodes hold what takes four without it;
    the best split without attention DP (and every colocated row that meets p99) costs more."""
    b = plan.best
    assert b.mode == "disaggregated" and b.attention_dp and b.meets_slo
    assert b.sim is not None and b.sim["ttft_p99_s"] <= 3.0 and b.sim["itl_p99_s"] <= 0.05
    without = _plan(cat, search_attention_dp=False)
    assert without.best.meets_slo and not without.best.attention_dp
    assert b.cost_per_hour_usd < without.best.cost_per_hour_usd
    co = [c for c in plan.candidates if c.mode == "colocated" and c.meets_slo]
    assert all(c.cost_per_hour_usd > b.cost_per_hour_usd for c in co)
    assert "attn-dp" in split_label(b)


def test_an_attention_dp_prefill_replica_counts_its_ranks(cat: Catalog) -> None:
    """The mean-field sizing: an attention-DP prefill replica is tp servers of one prompt alone on one rank (its
    chunks in that rank's budget, the other ranks idle), a TP 8 replica one server of the prompt over 8 GPUs."""
    model, cluster = cat.model("deepseek-v3"), build_cluster(cat, "p5en.48xlarge", 1)
    adp = ServeConfig(tp=8, ep=8, precision="fp8", input_len=8192, output_len=256, max_num_tokens=2048,
                      attention_dp=True)  # fmt: skip
    tp8 = ServeConfig(tp=8, ep=8, precision="fp8", input_len=8192, output_len=256, max_num_tokens=2048)
    assert (prefill_servers(adp), prefill_servers(tp8)) == (8, 1)
    d = deployment(model, cluster, adp)
    by_hand = 0.0
    for k in range(4):
        ctx = 2048 * 2048 * k + 2048 * 2049 / 2
        busy = RankLoad(prefill_tokens=2048.0, prefill_token_ctx=ctx, prefill_seqs=float(k == 3))
        by_hand += float(step_time(d, 0.0, 0.0, 2048.0, ctx, float(k == 3), busiest=busy).total_s)
    assert prefill_alone_s(d, adp) == pytest.approx(by_hand, rel=1e-12)
    # one rank does a prompt's dense work alone: slower than TP 8, but eight of them run at once
    alone_tp8 = prefill_alone_s(deployment(model, cluster, tp8), tp8)
    assert alone_tp8 < prefill_alone_s(d, adp) < 8 * alone_tp8
    # a prompt's KV leaves one rank whole; an attention-DP decode rank receives it whole (MLA: never split anyway)
    two = build_cluster(cat, "p5en.48xlarge", 2)
    whole = kv_transfer_s(model, two, adp, same_domain=False)
    assert kv_move(model, two, tp8, deployment(model, cluster, tp8), d)[:2] == whole


def test_the_attention_dp_split_rows_commands_reproduce_their_p99(plan: ServePlan) -> None:
    data = plan_serve_json(plan, "deepseek-v3", len(plan.candidates), None)
    rows = [r for r in data["candidates"] if r["sim"] is not None and r["mode"] == "disaggregated"]
    assert any(r["attention_dp"] and r["decode_attention_dp"] for r in rows)
    for r in rows[:3]:
        argv = shlex.split(r["estimate_command"])
        assert ("--attention-dp" in argv) == r["attention_dp"]
        result = CliRunner().invoke(cli, [*argv[1:], "--json"], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        z = json.loads(result.output)["disaggregated_simulation"]
        for key, value in r["sim"].items():
            assert z[key] == value, key
        assert (z["prefill_attention_dp"], z["decode_attention_dp"]) == (r["attention_dp"], r["decode_attention_dp"])
        assert z["kv_transfer_s"] == pytest.approx(r["kv_transfer_s"], rel=1e-12)


def test_estimate_serve_runs_either_pool_with_attention_dp() -> None:
    base = ["estimate", "serve", "--model", "deepseek-v3", "--instance", "p5en.48xlarge", "--nodes", "2", "--tp", "8",
            "--ep", "8", "--precision", "fp8", "--input-len", "2048", "--output-len", "128", "--qps", "4",
            "--prefill-replicas", "1", "--decode-replicas", "1", "--no-simulate", "--json"]  # fmt: skip
    out = {}
    for name, extra in {"both": ["--attention-dp"], "prefill": ["--attention-dp", "--no-decode-attention-dp"],
                        "decode": ["--decode-attention-dp"], "none": []}.items():  # fmt: skip
        result = CliRunner().invoke(cli, [*base, *extra], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        out[name] = json.loads(result.output)["disaggregated_simulation"]
    assert [(z["prefill_attention_dp"], z["decode_attention_dp"]) for z in out.values()] == [
        (True, True), (True, False), (False, True), (False, False)]  # fmt: skip
    # the prefill pool alone decides the prompt's price: one rank (attention DP) or eight GPUs
    assert out["both"]["prefill_s"] == out["prefill"]["prefill_s"] > out["none"]["prefill_s"]
    assert out["decode"]["prefill_s"] == out["none"]["prefill_s"]
    # decode slots: the attention-DP pool caches each sequence once (on its rank), TP 8 on every GPU
    assert out["both"]["decode_slots"] > out["none"]["decode_slots"]
    assert out["both"]["decode_slots"] % 8 == 0
    assert all(np.isfinite(z["ttft_p99_s"]) and math.isfinite(z["itl_p99_s"]) for z in out.values())
