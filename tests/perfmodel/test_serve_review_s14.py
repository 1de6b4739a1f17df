"""Session 14 fresh review of the serving commands (helper B): short sequences priced in a fraction of a second, and
p99s measured over enough requests at low rates and in splits (docs/inference.md, open loop)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import fmstack.perfmodel.inference as inference
from fmstack.catalog import load_catalog
from fmstack.catalog.loader import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.perfmodel.inference import ServeConfig, concurrency_for_rate, deployment, max_concurrency, serve_curve
from fmstack.perfmodel.inference_disagg_load import SIM_MEASURED, split_warmup
from fmstack.perfmodel.inference_open_loop import MEASURED, open_loop_run


@pytest.fixture(scope="module")
def cat() -> Catalog:
    return load_catalog()


def test_rate_to_concurrency_needs_no_curve_point_by_point(cat: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    """Llama 3.1 8B TP 8 on a p5 node, 64/64 tokens: the KV pool holds thousands of sequences and the token budget
    keeps 8192 x 64 / 128 = 4,096 running. The concurrency for a rate is the interpolation over every integer
    concurrency (the definition, computed here point by point), but found from about 2 sqrt(4,096) = 128 points of
    the curve, not 4,096 (``estimate serve`` of 1/1 tokens took 11-22 s, plan serve's colocated checks as long)."""
    cfg = ServeConfig(tp=8, input_len=64, output_len=64, request_rate_per_s=1.0)
    d = deployment(cat.model("llama3.1-8b"), build_cluster(cat, "p5.48xlarge", 1), cfg)
    assert max_concurrency(d, cfg) > 4096
    every = np.append(np.arange(1.0, 4096.0), 4096.0)
    rps = serve_curve(d, cfg, every).requests_per_s
    points: list[int] = []

    def counted(*args: Any, **kw: Any) -> Any:
        points.append(int(np.size(args[2])))
        return serve_curve(*args, **kw)

    monkeypatch.setattr(inference, "serve_curve", counted)
    for share in (0.001, 0.3, 0.77, 0.999):
        rate = share * float(rps[-1])
        want = 1.0 if rate <= rps[0] else float(np.interp(rate, rps, every))
        points.clear()
        assert concurrency_for_rate(d, cfg, rate) == want
        assert sum(points) <= 2 * 64 + 2


def test_a_split_measures_as_many_requests_as_a_colocated_replica() -> None:
    """Far from capacity a split's run measured 135 requests (its p99 between the two largest TTFTs: 70B fp8 1P:1D
    TP 8, 8192/256 at 1 req/s gave TTFT p99 0.61-0.97 s over seeds 0-7 against 0.82-1.10 s over 1,000, and `plan
    serve` took it as meeting 0.85 s). By hand: 10 in flight -> 15 warm-up, then max(1,000, 2 x 15) measured."""
    assert split_warmup(10.0, 0.3, "prefill", 0.2) == (15, 15 + 1000)
    assert SIM_MEASURED == MEASURED == 1000


def test_a_replica_at_a_low_rate_measures_a_thousand_requests(cat: Catalog) -> None:
    """Llama 3.1 70B TP 8 bf16, 2048/256 at 0.5 req/s (5 % of its 9.47 req/s): 1.5 requests in flight, one 2048-token
    prompt is one chunk of the 8192 budget, so 1,000 are measured (20,000 / 1 chunk iterations allow more) after
    15 warm-up; the decode-iteration budget measured 20,000 x 1 / 256 = 78. A 100,000-token prompt in 512-token
    chunks takes 196 iterations: 20,000 // 196 = 102 measured."""
    cfg = ServeConfig(tp=8, input_len=2048, output_len=256)
    d = deployment(cat.model("llama3.1-70b"), build_cluster(cat, "p5.48xlarge", 1), cfg)
    run = open_loop_run(d, cfg, 0.5)
    assert run.sim is not None and run.utilization < 0.06
    assert (run.sim.warmup_requests, run.sim.num_requests) == (15, 15 + 1000)
    long = ServeConfig(tp=8, input_len=100_000, output_len=512, max_num_tokens=512)
    d = deployment(cat.model("llama3.1-8b"), build_cluster(cat, "p5.48xlarge", 1), long)
    run = open_loop_run(d, long, 0.05)
    assert run.sim is not None and run.sim.num_requests - run.sim.warmup_requests == 20_000 // 196


def test_plan_serve_prints_no_itl_for_one_output_token(cat: Catalog) -> None:
    """One output token has no gap: `plan serve`'s table and HTML printed an ITL p99 of 0.0000 s for every simulated
    row (estimate serve prints '-'); they print '-' now, the JSON keeps the simulation's 0.0."""
    from click.testing import CliRunner

    from fmstack.cli.main import cli
    from fmstack.perfmodel.inference_disagg import SLO
    from fmstack.perfmodel.inference_plan import plan_serve
    from fmstack.reports.serve_report import serve_plan_html

    args = ["plan", "serve", "--model", "llama3.1-8b", "--qps", "0.5", "--input-len", "4096", "--output-len", "1",
            "--ttft-p99", "1", "--itl-p99", "0.05", "--instance", "p5.4xlarge", "--no-disagg"]  # fmt: skip
    out = CliRunner().invoke(cli, args, standalone_mode=False, catch_exceptions=False).output
    rows = [line for line in out.splitlines() if "meets" in line and "p5.4xlarge" not in line.split("│")[0]]
    assert rows and all("0.0000" not in line for line in rows)
    plan = plan_serve(cat, cat.model("llama3.1-8b"), qps=0.5, input_len=4096, output_len=1,
                      slo=SLO(ttft_s=1.0, itl_s=0.05), instances=("p5.4xlarge",), search_disagg=False)  # fmt: skip
    assert plan.best.sim is not None and plan.best.sim["itl_p99_s"] == 0.0
    html = serve_plan_html(plan)
    assert ">0.0000<" not in html and "sim ITL p99" in html
    assert "behind a round-robin router" in html  # the router the p99s were simulated behind (session 15)


@pytest.mark.parametrize("router", ["round-robin", "random"])
def test_each_plan_row_says_how_to_rerun_its_p99(router: str) -> None:
    """A colocated row's ``estimate_command`` prints its analytic point; its ``p99_command`` (``--qps qps
    --replicas N --router R --seed S``, session 15; ``--qps qps / replicas`` before) reruns the simulation the plan
    checked it with, one of its replicas behind the plan's router: the same TTFT and ITL p99, exactly (a split's is
    its estimate_command, tested in test_inference_plan_disagg.py)."""
    import json
    import shlex

    from click.testing import CliRunner

    from fmstack.cli.main import cli

    args = ["plan", "serve", "--model", "llama3.1-70b", "--qps", "5", "--input-len", "2048", "--output-len", "256",
            "--ttft-p99", "3", "--itl-p99", "0.1", "--instance", "p5.4xlarge,p5.48xlarge", "--no-disagg", "--seed",
            "3", "--router", router, "--json"]  # fmt: skip
    plan = json.loads(CliRunner().invoke(cli, args, standalone_mode=False, catch_exceptions=False).output)
    assert plan["router"] == router
    rows = [c for c in plan["candidates"] if c["sim"]]
    assert rows and plan["best"]["p99_command"] == rows[0]["p99_command"]
    assert any(c["replicas"] > 1 for c in rows)
    for c in rows:
        argv = shlex.split(c["p99_command"])
        assert argv[argv.index("--qps") + 1] == repr(5.0) and "--no-simulate" not in argv
        if c["replicas"] > 1:
            assert argv[argv.index("--replicas") + 1] == str(c["replicas"])
            assert argv[argv.index("--router") + 1] == router
        else:
            assert "--replicas" not in argv
        est = CliRunner().invoke(cli, [*argv[1:], "--json"], standalone_mode=False, catch_exceptions=False)
        got = json.loads(est.output)
        assert (got["ttft_p99_s"], got["itl_p99_s"]) == (c["sim"]["ttft_p99_s"], c["sim"]["itl_p99_s"])
