"""`plan serve` searches attention data parallelism for MoE models (never for dense ones), each row's
`estimate serve` command reproduces its numbers, and the best row is compared with a disaggregated split."""

from __future__ import annotations

import json
import math
import shlex

import pytest
from click.testing import CliRunner

from fmstack.catalog import load_catalog
from fmstack.catalog.loader import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.cli.main import cli
from fmstack.cli.plan_serve_render import estimate_argv, plan_serve_json
from fmstack.perfmodel.inference import ServeConfig, deployment, memory_of
from fmstack.perfmodel.inference_disagg import SLO
from fmstack.perfmodel.inference_kv import kv_bytes_per_token
from fmstack.perfmodel.inference_plan import ServePlan, _with_attention_dp, layouts, plan_serve

P5EN_PRICE = 63.30
SLO_DSV3 = SLO(ttft_s=2.0, itl_s=0.1)
ISL, OSL = 2048, 256


@pytest.fixture(scope="module")
def cat() -> Catalog:
    return load_catalog()


@pytest.fixture(scope="module")
def dsv3_plan(cat: Catalog) -> ServePlan:
    return plan_serve(cat, cat.model("deepseek-v3"), qps=15.0, input_len=ISL, output_len=OSL, slo=SLO_DSV3,
                      instances=("p5en.48xlarge",), precisions=("fp8",))  # fmt: skip


def test_attention_dp_only_for_moe_with_ep_equal_tp(cat: Catalog) -> None:
    dense = cat.model("llama3.1-70b")
    assert all(not adp for *_, adp in _with_attention_dp(dense, layouts(dense, 1, 8, 8), True))
    moe = cat.model("deepseek-v3")
    shapes = layouts(moe, 2, 8, 8)  # (16, 1, 1), (16, 1, 16), (8, 2, 1), (8, 2, 8)
    assert _with_attention_dp(moe, shapes, True) == [
        (16, 1, 1, False), (16, 1, 16, False), (16, 1, 16, True), (8, 2, 1, False), (8, 2, 8, False), (8, 2, 8, True)
    ]  # fmt: skip
    assert _with_attention_dp(moe, shapes, False) == [(*s, False) for s in shapes]


def test_mla_cache_is_duplicated_8x_without_attention_dp(cat: Catalog) -> None:
    """By hand: DeepSeek-V3's MLA latent, 61 layers x (512 + 64) x 1 B (fp8 KV) = 35,136 B per token, sits whole on
    every GPU of a TP 8 group; under attention DP each GPU caches only its own sequences."""
    model = cat.model("deepseek-v3")
    assert kv_bytes_per_token(model, 1.0) == 61 * (512 + 64) == 35_136
    cluster = build_cluster(cat, "p5en.48xlarge", 1)
    base = dict(tp=8, ep=8, precision="fp8", input_len=ISL, output_len=OSL)
    tp = memory_of(deployment(model, cluster, ServeConfig(**base)))  # type: ignore[arg-type]
    adp = memory_of(deployment(model, cluster, ServeConfig(**base, attention_dp=True)))  # type: ignore[arg-type]
    assert tp.kv_bytes_per_token_gpu == adp.kv_bytes_per_token_gpu == 35_136


def test_attention_dp_wins_for_deepseek_v3_on_p5en(cat: Catalog, dsv3_plan: ServePlan) -> None:
    """15 req/s of 2048/256 tokens: without attention DP the engine's token budget (max_num_tokens, at most the
    2048-token chunk) keeps at most 2048 x 256 / (2048 + 256) = 227.6 sequences running per replica; with it the
    budget is per rank, 8 x 512 x 256 / 2304 = 455.1 at the 512-token chunk (a 2048-token chunk on one rank runs
    all its dense layers there and breaks the 0.1 s ITL). One p5en node is enough only with attention DP."""
    b = dsv3_plan.best
    assert b.attention_dp and b.tp == b.ep == 8 and b.meets_slo is True
    assert b.concurrency > 2048 * OSL / (ISL + OSL)
    assert b.concurrency <= math.ceil(8 * b.max_num_tokens * OSL / (ISL + OSL))
    assert b.nodes == b.replicas == 1 and b.cost_per_hour_usd == pytest.approx(P5EN_PRICE, rel=1e-12)
    assert b.sim is not None and b.sim["ttft_p99_s"] <= SLO_DSV3.ttft_s and b.sim["itl_p99_s"] <= SLO_DSV3.itl_s
    without = plan_serve(cat, cat.model("deepseek-v3"), qps=15.0, input_len=ISL, output_len=OSL, slo=SLO_DSV3,
                         instances=("p5en.48xlarge",), precisions=("fp8",), search_attention_dp=False)  # fmt: skip
    assert not any(c.attention_dp for c in without.candidates)
    assert without.best.cost_per_hour_usd >= 2 * P5EN_PRICE - 1e-9
    # the rows of the search without attention DP are rows of the search with it (same analytic points)
    keys = {(c.tp, c.ep, c.max_num_tokens, c.rate_per_replica_rps) for c in dsv3_plan.candidates}
    assert {(c.tp, c.ep, c.max_num_tokens, c.rate_per_replica_rps) for c in without.candidates if c.sim} <= keys


def test_dense_model_never_gets_attention_dp(cat: Catalog) -> None:
    plan = plan_serve(cat, cat.model("llama3.1-8b"), qps=5.0, input_len=512, output_len=128,
                      slo=SLO(ttft_s=0.5, itl_s=0.05), instances=("p5.48xlarge",))  # fmt: skip
    assert plan.candidates and not any(c.attention_dp for c in plan.candidates)
    data = plan_serve_json(plan, "llama3.1-8b", 8, None)
    assert all(row["attention_dp"] is False and "--attention-dp" not in row["estimate_command"]
               for row in data["candidates"])  # fmt: skip


def test_every_row_reproduces_through_estimate_serve(dsv3_plan: ServePlan) -> None:
    """Each row's `estimate_command` (with `--attention-dp` where the row has it) prints the row's rate, mean TTFT
    and ITL: the same model at the same point."""
    data = plan_serve_json(dsv3_plan, "deepseek-v3", 8, None)
    assert data["estimate_command"] == data["best"]["estimate_command"]
    rows = [r for r in data["candidates"] if r["mode"] == "colocated"]  # splits: test_inference_plan_disagg.py
    assert {r["attention_dp"] for r in rows} == {True, False}
    for row in rows:
        argv = shlex.split(row["estimate_command"])
        assert ("--attention-dp" in argv) == row["attention_dp"]
        result = CliRunner().invoke(cli, [*argv[1:], "--json"], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        est = json.loads(result.output)
        assert est["config"]["attention_dp"] == row["attention_dp"]
        assert est["requests_per_s"] == pytest.approx(row["rate_per_replica_rps"], rel=1e-9)
        assert est["ttft_s"] == pytest.approx(row["mean_ttft_s"], rel=1e-9)
        assert est["itl_s"] == pytest.approx(row["mean_itl_s"], rel=1e-9)


def test_estimate_argv_of_a_multinode_row(cat: Catalog) -> None:
    plan = plan_serve(cat, cat.model("deepseek-v3"), qps=2.0, input_len=ISL, output_len=OSL, slo=SLO_DSV3,
                      instances=("p5.48xlarge",))  # fmt: skip
    b = plan.best
    argv = estimate_argv("deepseek-v3", b, ISL, OSL, None)
    assert b.nodes_per_replica >= 2 and argv[argv.index("--nodes") + 1] == str(b.nodes_per_replica)
    assert argv[argv.index("--tp") + 1] == str(b.tp) and argv[argv.index("--concurrency") + 1] == str(b.concurrency)


def test_disaggregation_of_the_best_row(cat: Catalog, dsv3_plan: ServePlan) -> None:
    """One replica on one node cannot be split into a prefill and a decode pool; a plan of 8 TP 1 replicas is
    compared on its 8 GPUs and the note says which side wins, consistently with the goodputs."""
    assert (
        dsv3_plan.disaggregation is None
        and "2 x 8 GPUs, and the plan's 1 node(s) hold 8" in dsv3_plan.disaggregation_note
    )
    plan = plan_serve(cat, cat.model("llama3.1-8b"), qps=5.0, input_len=512, output_len=128,
                      slo=SLO(ttft_s=0.5, itl_s=0.05), instances=("p5.48xlarge",))  # fmt: skip
    dz = plan.disaggregation
    assert dz is not None and dz.num_gpus == 8 * plan.best.nodes
    assert dz.replicas == dz.num_gpus // (plan.best.tp * plan.best.pp)
    wins = dz.disagg_rps > dz.colocated_rps
    assert ("disaggregation wins" in plan.disaggregation_note) == wins
    assert ("colocated wins" in plan.disaggregation_note) == (not wins)


def test_disaggregated_prefill_of_an_attention_dp_replica_runs_on_one_rank(cat: Catalog) -> None:
    """A lone prompt under attention DP is one rank's work (its dense layers and attention unsplit; the experts
    see its tokens): the comparison's prefill time is the busiest-rank step of that one prompt, slower than the
    same tokens spread over the 8 ranks (what it priced before)."""
    from fmstack.perfmodel.inference import prefill_ctx
    from fmstack.perfmodel.inference_disagg import compare_disaggregation
    from fmstack.perfmodel.inference_step import RankLoad, step_time

    model = cat.model("deepseek-v3")
    cluster = build_cluster(cat, "p5en.48xlarge", 2)
    cfg = ServeConfig(tp=8, ep=8, precision="fp8", input_len=ISL, output_len=OSL, attention_dp=True)
    d = deployment(model, cluster, cfg)
    pctx = prefill_ctx(ISL, 0.0)
    one = RankLoad(prefill_tokens=ISL, prefill_token_ctx=pctx, prefill_seqs=1.0)
    own = float(step_time(d, 0.0, 0.0, ISL, pctx, 1.0, busiest=one).total_s)
    spread = float(step_time(d, 0.0, 0.0, ISL, pctx, 1.0).total_s)
    cmp = compare_disaggregation(model, cluster, cfg, SLO_DSV3)
    assert cmp.prefill_s == own and own > spread


def test_plan_serve_table_and_no_attention_dp_flag() -> None:
    args = ["plan", "serve", "--model", "deepseek-v3", "--qps", "15", "--input-len", "2048", "--output-len", "256",
            "--ttft-p99", "2", "--itl-p99", "0.1", "--instance", "p5en.48xlarge", "--precision", "fp8"]  # fmt: skip
    text = CliRunner().invoke(cli, args, catch_exceptions=False).output
    assert "attention-dp fp8" in text.splitlines()[0] + text.splitlines()[1]  # the headline names it
    assert "reproduce the best replica's analytic point with:" in text and "--attention-dp" in text
    assert "disaggregated prefill/decode: splits ranked in the plan" in text
    assert "On means: DistServe's comparison not made: it splits the best row's own layout" in text
    off = json.loads(CliRunner().invoke(cli, [*args, "--no-attention-dp", "--json"], catch_exceptions=False).output)
    assert off["best"]["attention_dp"] is False and off["best"]["cost_per_hour_usd"] >= 2 * P5EN_PRICE - 1e-9
    assert "--attention-dp" not in off["estimate_command"]
