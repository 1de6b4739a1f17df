"""Heterogeneous prefill/decode pools: a split whose decode pool takes another TP than its prefill pool
(DistServe, Zhong et al. 2024, sec. 4: each phase's parallelism chosen on its own)."""

from __future__ import annotations

import json
import shlex

import numpy as np
import pytest
from click.testing import CliRunner

from fmstack.catalog import Catalog, load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.cli.main import cli
from fmstack.cli.plan_serve_render import plan_serve_json
from fmstack.perfmodel.inference import ServeConfig, deployment
from fmstack.perfmodel.inference_disagg import SLO, kv_transfer_s
from fmstack.perfmodel.inference_plan import ServePlan, plan_serve
from fmstack.perfmodel.inference_sim import SimConfig
from fmstack.perfmodel.inference_sim_disagg import simulate_disagg

# 70B, 8192-token prompts, TTFT p99 1 s, ITL p99 30 ms on p5 (8 x H100 per node)
PAYS = {"qps": 3.0, "input_len": 8192, "output_len": 256, "slo": SLO(ttft_s=1.0, itl_s=0.03)}
SAME = {**PAYS, "qps": 8.0}


@pytest.fixture(scope="module")
def cat() -> Catalog:
    return load_catalog(None)


def _plan(cat: Catalog, case: dict[str, object], **kw: object) -> ServePlan:
    return plan_serve(cat, cat.model("llama3.1-70b"), instances=("p5.48xlarge",), **case, **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def pays(cat: Catalog) -> ServePlan:
    return _plan(cat, PAYS)


def _key(p: ServePlan) -> tuple[float, int]:
    return p.best.cost_per_hour_usd, p.best.busy_gpus


def test_a_heterogeneous_split_beats_the_best_same_layout_split_and_colocated(cat: Catalog, pays: ServePlan) -> None:
    """Prefill at tp 4 (the 8192-token prompt's 1/4 per GPU keeps TTFT), decode at tp 2 (its slots meet 30 ms with
    half the GPUs): 3P(tp4):1D(tp2), 14 GPUs on 2 nodes, where the best same-layout split is 3P:1D tp 4, 16 GPUs on
    the same 2 nodes; every colocated row that meets the p99 SLO costs no less (the plan ranks by cost, then GPUs
    busy: the best row is below every other that meets)."""
    b = pays.best
    assert b.mode == "disaggregated" and b.heterogeneous and b.meets_slo
    same = _plan(cat, PAYS, search_heterogeneous=False)
    assert same.best.meets_slo and not same.best.heterogeneous
    assert _key(pays) < _key(same)  # strictly cheaper, or the same cost on fewer GPUs
    assert b.busy_gpus == b.prefill_replicas * b.tp * b.pp + b.decode_replicas * b.decode_tp * b.decode_pp
    co = [c for c in pays.candidates if c.mode == "colocated" and c.meets_slo]
    assert all((c.cost_per_hour_usd, c.busy_gpus) > _key(pays) for c in co)


def test_where_the_same_layout_is_best_pairing_changes_nothing(cat: Catalog) -> None:
    """At 8 req/s the best split keeps tp 4 in both pools: the pairing only adds rows, the best is the same."""
    both, same = _plan(cat, SAME), _plan(cat, SAME, search_heterogeneous=False)
    assert not both.best.heterogeneous and _key(both) == _key(same)


def test_the_heterogeneous_rows_command_reproduces_its_p99(pays: ServePlan) -> None:
    data = plan_serve_json(pays, "llama3.1-70b", len(pays.candidates), None)
    rows = [r for r in data["candidates"] if r["sim"] is not None and r["decode_tp"] not in (0, r["tp"])]
    assert rows
    for r in rows[:2]:
        argv = shlex.split(r["estimate_command"])
        assert argv[argv.index("--decode-tp") + 1] == str(r["decode_tp"])
        result = CliRunner().invoke(cli, [*argv[1:], "--json"], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        z = json.loads(result.output)["disaggregated_simulation"]
        for key, value in r["sim"].items():
            assert z[key] == value, key
        assert (z["decode_tp"], z["prefill_tp"]) == (r["decode_tp"], r["tp"])
        assert z["kv_transfer_s"] == pytest.approx(r["kv_transfer_s"], rel=1e-12)


def test_kv_transfer_between_tp_layouts_sends_the_larger_share(cat: Catalog) -> None:
    """8192 tokens x 327,680 B (70B bf16 KV: 80 layers x 8 KV heads x 128 x 2 x 2 B): tp 4 -> tp 2 moves 1/2 of it per GPU (the decode GPU's share), as
    tp 2 -> tp 2; tp 4 -> tp 8 moves 1/4 (the prefill GPU's), as tp 4 -> tp 4."""
    model, cluster = cat.model("llama3.1-70b"), build_cluster(cat, "p5.48xlarge", 1)
    cfg = ServeConfig(tp=4, input_len=8192, output_len=256)
    two = kv_transfer_s(model, cluster, ServeConfig(tp=2, input_len=8192, output_len=256), same_domain=True)
    four = kv_transfer_s(model, cluster, cfg, same_domain=True)
    assert kv_transfer_s(model, cluster, cfg, same_domain=True, decode_tp=2) == two
    assert kv_transfer_s(model, cluster, cfg, same_domain=True, decode_tp=8) == four
    assert two[0] == four[0] == 8192 * 327_680 and two[1] > four[1]


def test_the_simulation_with_one_deployment_twice_is_the_single_deployment_run(cat: Catalog) -> None:
    model, cluster = cat.model("llama3.1-70b"), build_cluster(cat, "p5.48xlarge", 1)
    cfg = ServeConfig(tp=4, precision="fp8", input_len=2048, output_len=64)
    d = deployment(model, cluster, cfg)
    sim = SimConfig(request_rate_per_s=4.0, num_requests=60, warmup_requests=10, seed=1)
    one = simulate_disagg(d, cfg, sim, prefill_replicas=1, decode_replicas=1, kv_transfer_s=0.001)
    two = simulate_disagg(d, cfg, sim, prefill_replicas=1, decode_replicas=1, kv_transfer_s=0.001, decode=d,
                          decode_cfg=cfg)  # fmt: skip
    assert one.percentiles() == two.percentiles()
    dc = ServeConfig(tp=8, precision="fp8", input_len=2048, output_len=64)
    faster = simulate_disagg(d, cfg, sim, prefill_replicas=1, decode_replicas=1, kv_transfer_s=0.001,
                             decode=deployment(model, cluster, dc), decode_cfg=dc)  # fmt: skip
    assert faster.itl_s[50] < one.itl_s[50]  # decode on 8 GPUs: each iteration reads 1/8 of the weights
    assert np.isfinite(faster.ttft_s[99])
