"""Speculative decoding in `plan serve` (session 18, helper T): the spec reaches every colocated candidate, the
deployment each p99 check simulates and the row's `estimate serve` command; splits carry it too (session 19: their decode pool speculates); at low
load it lowers the inter-token latency of the same deployment (docs/inference.md, Speculative decoding)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from fmstack.catalog import load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.perfmodel import inference_plan_verify
from fmstack.perfmodel.inference import ServeConfig, deployment, estimate_serve
from fmstack.perfmodel.inference_disagg import SLO
from fmstack.perfmodel.inference_open_loop import simulate_open_loop
from fmstack.perfmodel.inference_plan import plan_serve
from fmstack.perfmodel.inference_plan_candidate import config_of
from fmstack.perfmodel.inference_plan_spec import chunk_gap_s, tokens_pmf
from fmstack.perfmodel.inference_speculative import make_spec
from fmstack.reports.serve_report import serve_plan_html

PLAN = ["plan", "serve", "--model", "llama3.1-8b", "--qps", "2", "--input-len", "1024", "--output-len", "256",
        "--ttft-p99", "1", "--itl-p99", "0.02", "--instance", "p5.48xlarge", "--precision", "fp8"]  # fmt: skip
NGRAM = ["--speculative", "ngram", "--spec-acceptance", "0.6"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fmstack", *args], capture_output=True, text=True, timeout=300)


def test_spec_flows_to_every_candidate_and_simulated_deployment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ranked row carries the spec, every p99 check simulates a deployment with it (``Deployment.spec``),
    splits included (session 19), and the best row's analytic point is `estimate_serve` of its configuration with it."""
    cat = load_catalog()
    arch = cat.model("llama3.1-8b")
    spec = make_spec("ngram", arch, acceptance=[0.6])
    assert spec is not None
    seen: list[Any] = []
    real = inference_plan_verify.simulate_open_loop

    def spy(d: Any, cfg: ServeConfig, *args: Any, **kwargs: Any) -> Any:
        seen.append((d.spec, cfg.speculative))
        return real(d, cfg, *args, **kwargs)

    monkeypatch.setattr(inference_plan_verify, "simulate_open_loop", spy)
    plan = plan_serve(cat, arch, qps=2.0, input_len=1024, output_len=256, slo=SLO(ttft_s=1.0, itl_s=0.02),
                      instances=("p5.48xlarge",), precisions=("fp8",), speculative=spec)  # fmt: skip
    assert plan.candidates and all(c.speculative == spec for c in plan.candidates)
    assert seen and all(d_spec == spec and cfg_spec == spec for d_spec, cfg_spec in seen)
    assert "on every candidate" in plan.speculative_note and "split's decode pool speculates" in plan.speculative_note
    assert "none searched" not in plan.disaggregation_note
    b = plan.best
    assert b.meets_slo is True
    cluster = build_cluster(cat, b.instance, b.nodes_per_replica, part_of_domain=True)
    est = estimate_serve(arch, cluster, replace(config_of(b, 1024, 256), concurrency=b.concurrency))
    assert est.requests_per_s == b.rate_per_replica_rps
    assert (est.ttft_s, est.itl_s) == (b.mean_ttft_s, b.mean_itl_s)
    assert est.speculative is not None and est.speculative["method"] == "ngram"
    page = serve_plan_html(plan)
    assert "<th>speculative</th>" in page and "<td>ngram</td>" in page and "on every candidate" in page


def test_spec_lowers_itl_of_the_same_deployment_at_low_load() -> None:
    """Llama 3.1 8B fp8 on one H100, 512-token chunks, 2 req/s: n-gram K = 3 at 0.6 (2.18 tokens per iteration)
    lowers the mean inter-token latency (analytic and simulated) and the simulated p99, where an iteration carrying
    a prompt chunk is one gap without speculation and is split over the tokens it emits with it."""
    cat = load_catalog()
    arch = cat.model("llama3.1-8b")
    cluster = build_cluster(cat, "p5.48xlarge", 1, part_of_domain=True)
    cfg = ServeConfig(tp=1, precision="fp8", input_len=1024, output_len=256, max_num_tokens=512)
    on = replace(cfg, speculative=make_spec("ngram", arch, acceptance=[0.6]))
    sims, analytic = {}, {}
    for name, c in (("off", cfg), ("on", on)):
        _, sim = simulate_open_loop(deployment(arch, cluster, c), c, 2.0, seed=0)
        assert sim is not None
        sims[name] = sim
        analytic[name] = estimate_serve(arch, cluster, replace(c, request_rate_per_s=2.0)).itl_s
    assert analytic["on"] < analytic["off"]
    assert sims["on"].mean_itl_s < sims["off"].mean_itl_s
    assert sims["on"].percentiles()["itl_p99_s"] < sims["off"].percentiles()["itl_p99_s"]


def test_cli_rows_say_their_method_and_reproduce_with_estimate_serve() -> None:
    """JSON: each row's ``speculative``; the best row's `estimate serve` command (carrying the flags) prints its
    analytic point, and its p99 command the simulated p99 of its check."""
    proc = _run(*PLAN, *NGRAM, "--top", "3", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["speculative"] == "ngram" and "on every candidate" in data["speculative_note"]
    assert all(c["speculative"] == "ngram" for c in data["candidates"])
    best = data["best"]
    assert (best["spec_tokens"], best["spec_acceptance"]) == (3, [0.6, 0.6, 0.6])
    argv = shlex.split(best["estimate_command"])
    assert (
        " ".join(argv[argv.index("--speculative") :][:6]) == "--speculative ngram --spec-tokens 3 --spec-acceptance 0.6"
    )
    est = _run(*argv[1:], "--json")
    assert est.returncode == 0, est.stderr
    e = json.loads(est.stdout)
    assert e["config"]["speculative"] == "ngram"
    assert (e["requests_per_s"], e["ttft_s"], e["itl_s"]) == (
        best["rate_per_replica_rps"], best["mean_ttft_s"], best["mean_itl_s"])  # fmt: skip
    p99 = _run(*shlex.split(best["p99_command"])[1:], "--json")
    assert p99.returncode == 0, p99.stderr
    assert json.loads(p99.stdout)["itl_p99_s"] == best["sim"]["itl_p99_s"]


def test_cli_without_spec_rows_say_null() -> None:
    proc = _run(*PLAN, "--no-disagg", "--top", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["speculative"] is None and data["speculative_note"] == ""
    assert all(c["speculative"] is None for c in data["candidates"])
    assert "--speculative" not in data["estimate_command"]


def test_auto_ranks_each_layout_with_and_without_mtp() -> None:
    """DeepSeek-V3 fp8 on one p5en node, 1 req/s: ``auto`` ranks MTP (0.85 then 0.63, K = 3) and plain variants of the
    same layouts; the table names each row's method."""
    proc = _run("plan", "serve", "--model", "deepseek-v3", "--qps", "1", "--input-len", "1024", "--output-len", "256",
                "--ttft-p99", "2", "--itl-p99", "0.05", "--instance", "p5en.48xlarge", "--precision", "fp8",
                "--max-nodes-per-replica", "1", "--no-disagg", "--speculative", "auto", "--top", "20",
                "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["speculative"] == "auto" and "both ranked" in data["speculative_note"]
    rows = data["candidates"]
    methods = {c["speculative"] for c in rows}
    assert methods == {None, "mtp"}
    layouts = {(c["tp"], c["ep"], c["attention_dp"], c["max_num_tokens"], c["speculative"]) for c in rows}
    assert any((tp, ep, adp, mnt, None) in layouts for tp, ep, adp, mnt, m in layouts if m == "mtp")
    assert data["best"]["meets_slo"] is True
    mtp = [c for c in rows if c["speculative"] == "mtp"]
    assert all(c["spec_acceptance"] == [0.85, 0.63, 0.63] and "--speculative mtp" in c["estimate_command"] for c in mtp)


def test_chunk_gap_by_hand() -> None:
    """n-gram K = 3 at 0.6: P(n) = 0.4, 0.24, 0.144, 0.216 (E = 2.176). 1024-token prompts in 512-token chunks (2
    per prompt), 256 output tokens: 1 + 255 / 2.176 = 118.19 iterations per request. At 10 sequences 17.1 % of
    iterations carry a chunk and one-token gaps alone are 3.1 % of all: the p99 sees the whole iteration; at 1, f =
    1.69 %: 0.31 % + 0.37 % + 0.34 % passes 1 % at n = 3 (spike / 3); at 0.5 never: spike / 4."""
    arch = load_catalog().model("llama3.1-8b")
    spec = make_spec("ngram", arch, acceptance=[0.6])
    assert spec is not None
    assert tokens_pmf(spec).tolist() == pytest.approx([0.4, 0.24, 0.144, 0.216])
    cfg = ServeConfig(tp=1, precision="fp8", input_len=1024, output_len=256, max_num_tokens=512)
    spike, conc = np.full(3, 0.012), np.array([10.0, 1.0, 0.5])
    assert chunk_gap_s(spike, conc, cfg) is spike  # without speculation: the screening's rule, unchanged
    got = chunk_gap_s(spike, conc, replace(cfg, speculative=spec))
    assert got.tolist() == pytest.approx([0.012, 0.004, 0.003])


def test_spec_lets_a_smaller_replica_meet_a_tight_itl() -> None:
    """Llama 3.1 70B fp8 on p5 at 2 req/s, 1024/256, ITL p99 30 ms: without speculation only tp 8 meets it (512-token
    chunks); with a Llama 3.1 8B draft (K = 4, a = 0.7) a tp 4 replica does, in simulation: the same node, half the
    GPUs busy."""
    cat = load_catalog()
    arch = cat.model("llama3.1-70b")
    slo = SLO(ttft_s=1.0, itl_s=0.03)
    plans = {}
    for name, spec in (
        ("off", None),
        ("on", make_spec("draft", arch, acceptance=[0.7], draft=cat.model("llama3.1-8b"))),
    ):
        plans[name] = plan_serve(cat, arch, qps=2.0, input_len=1024, output_len=256, slo=slo, instances=("p5.48xlarge",),
                                 precisions=("fp8",), search_disagg=False, speculative=spec)  # fmt: skip
    off, on = plans["off"].best, plans["on"].best
    assert off.meets_slo is True and on.meets_slo is True and on.speculative is not None
    assert on.cost_per_hour_usd <= off.cost_per_hour_usd
    assert on.busy_gpus < off.busy_gpus
    assert on.sim is not None and on.sim["itl_p99_s"] <= 0.03
