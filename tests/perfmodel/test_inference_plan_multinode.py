"""`plan serve` with replicas of several nodes: models that do not fit one p5.48xlarge (8 x H100 80 GB) get a plan
whose replica layout `estimate serve` reproduces number for number."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from fmstack.catalog import load_catalog
from fmstack.catalog.loader import Catalog
from fmstack.catalog.params import count_params
from fmstack.catalog.topology import build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel.inference import ServeConfig, estimate_serve
from fmstack.perfmodel.inference_disagg import SLO
from fmstack.perfmodel.inference_kv import DEFAULT_RESERVE_GIB
from fmstack.perfmodel.inference_plan import ServePlan, layouts, plan_serve

P5_PRICE = 55.04
SLO_405B = SLO(ttft_s=2.0, itl_s=0.1)


@pytest.fixture(scope="module")
def cat() -> Catalog:
    return load_catalog()


@pytest.fixture(scope="module")
def plan_405b(cat: Catalog) -> ServePlan:
    return plan_serve(cat, cat.model("llama3.1-405b"), qps=2.0, input_len=2048, output_len=256, slo=SLO_405B,
                      instances=("p5.48xlarge",), precisions=("bf16",))  # fmt: skip


def test_405b_bf16_does_not_fit_one_p5_node(cat: Catalog) -> None:
    """By hand: 405.9e9 parameters x 2 B / 8 GPUs = 94.5 GiB per GPU > 80 GiB of an H100; one node finds nothing,
    and the error says memory, not the SLO, with the smallest replica that would hold a sequence (two nodes)."""
    model = cat.model("llama3.1-405b")
    params = count_params(model).total
    assert params * 2 / 8 / 2**30 > build_cluster(cat, "p5.48xlarge", 1).gpu.hbm_gib
    with pytest.raises(InputError) as err:
        plan_serve(cat, model, qps=2.0, input_len=2048, output_len=256, slo=SLO_405B, instances=("p5.48xlarge",),
                   precisions=("bf16",), max_nodes_per_replica=1)  # fmt: skip
    assert err.value.field == "max-nodes-per-replica" and "up to 1 node(s)" in err.value.message
    assert "bf16 weights take 94.5 GiB" in err.value.message and "2 x p5.48xlarge (tp 16 bf16)" in err.value.message


def test_405b_bf16_multinode_plan_invariants(cat: Catalog, plan_405b: ServePlan) -> None:
    b = plan_405b.best
    assert b.meets_slo is True and b.sim is not None
    assert b.sim["ttft_p99_s"] <= SLO_405B.ttft_s and b.sim["itl_p99_s"] <= SLO_405B.itl_s
    assert b.nodes_per_replica >= 2
    assert b.tp * b.pp == 8 * b.nodes_per_replica  # a multi-node replica takes all GPUs of its nodes
    assert b.nodes == b.replicas * b.nodes_per_replica == math.ceil(b.replicas * b.tp * b.pp / 8)
    assert b.num_gpus == 8 * b.nodes
    assert b.cost_per_hour_usd == pytest.approx(b.nodes * P5_PRICE, rel=1e-12)
    assert b.replicas >= math.ceil(plan_405b.qps / b.rate_per_replica_rps)
    # the weights fit the replica's GPUs: bf16 weights over tp x pp GPUs plus the reserve below the HBM
    hbm = build_cluster(cat, "p5.48xlarge", 1).gpu.hbm_gib
    per_gpu = count_params(cat.model("llama3.1-405b")).total * 2 / (b.tp * b.pp) / 2**30
    assert per_gpu + DEFAULT_RESERVE_GIB < hbm
    for c in plan_405b.candidates:  # cheapest verified first
        assert c.cost_per_hour_usd == pytest.approx(c.nodes * P5_PRICE, rel=1e-12)


def test_estimate_serve_reproduces_the_planned_replica(cat: Catalog) -> None:
    """The replica at the planned concurrency, priced by `estimate_serve` on a cluster of its nodes, gives the
    plan's rate, mean TTFT and ITL (the same model, not a second one)."""
    # colocated rows only, at an ITL a colocated replica can meet (since session 13 pipeline stages no longer split
    # one prompt, so a 2,048-token prompt stalls a colocated 405B's decodes past 0.1 s and a split is the best row)
    b = plan_serve(cat, cat.model("llama3.1-405b"), qps=2.0, input_len=2048, output_len=256,
                   slo=SLO(ttft_s=2.0, itl_s=0.5), instances=("p5.48xlarge",), precisions=("bf16",),
                   search_disagg=False).best  # fmt: skip
    assert b.mode == "colocated" and b.nodes_per_replica >= 2
    cluster = build_cluster(cat, b.instance, b.nodes_per_replica)
    cfg = ServeConfig(tp=b.tp, pp=b.pp, ep=b.ep, precision=b.precision, input_len=2048, output_len=256,
                      concurrency=b.concurrency, max_num_tokens=b.max_num_tokens)  # fmt: skip
    est = estimate_serve(cat.model("llama3.1-405b"), cluster, cfg)
    assert est.num_gpus == 8 * b.nodes_per_replica
    assert est.requests_per_s == pytest.approx(b.rate_per_replica_rps, rel=1e-9)
    assert est.ttft_s == pytest.approx(b.mean_ttft_s, rel=1e-9)
    assert est.itl_s == pytest.approx(b.mean_itl_s, rel=1e-9)
    assert est.weights_gib_per_gpu + DEFAULT_RESERVE_GIB < cluster.gpu.hbm_gib


def test_deepseek_v3_on_p5_cli_plan_matches_estimate_serve() -> None:
    """End to end: `plan serve --json` for DeepSeek-V3 on p5 (no layout fits one node: 78 GiB of fp8 weights per
    GPU at TP 8), then `estimate serve` with the planned layout (attention DP included: it wins here, the same
    2 nodes at twice the rate) and concurrency prints the same numbers."""

    def run(*args: str) -> dict[str, object]:
        proc = subprocess.run([sys.executable, "-m", "fmstack", *args, "--json"], capture_output=True, text=True,
                              timeout=300)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        data: dict[str, object] = json.loads(proc.stdout)
        return data

    plan = run("plan", "serve", "--model", "deepseek-v3", "--qps", "2", "--input-len", "2048", "--output-len", "256",
               "--ttft-p99", "2", "--itl-p99", "0.1", "--instance", "p5.48xlarge")  # fmt: skip
    b = plan["best"]
    assert isinstance(b, dict)
    assert b["nodes_per_replica"] >= 2 and b["meets_slo"] is True
    assert b["tp"] * b["pp"] == 8 * b["nodes_per_replica"]
    assert b["cost_per_hour_usd"] == pytest.approx(b["nodes"] * P5_PRICE, rel=1e-12)
    est = run("estimate", "serve", "--model", "deepseek-v3", "--instance", "p5.48xlarge", "--nodes",
              str(b["nodes_per_replica"]), "--tp", str(b["tp"]), "--pp", str(b["pp"]), "--ep", str(b["ep"]),
              *(["--attention-dp"] if b["attention_dp"] else []),
              "--precision", b["precision"], "--input-len", "2048", "--output-len", "256", "--concurrency",
              str(b["concurrency"]), "--max-num-tokens", str(b["max_num_tokens"]), "--no-simulate")  # fmt: skip
    # the row's own command is that command line
    assert isinstance(b["estimate_command"], str) and b["estimate_command"].endswith("--no-simulate")
    assert est["config"]["attention_dp"] == b["attention_dp"]  # type: ignore[index]
    assert est["requests_per_s"] == pytest.approx(b["rate_per_replica_rps"], rel=1e-9)
    assert est["ttft_s"] == pytest.approx(b["mean_ttft_s"], rel=1e-9)
    assert est["itl_s"] == pytest.approx(b["mean_itl_s"], rel=1e-9)


def test_layouts(cat: Catalog) -> None:
    """One node: TP dividing the node; n nodes: TP over all n x 8 GPUs or TP 8 x PP n; MoE adds EP = TP."""
    assert layouts(cat.model("llama3.1-70b"), 1, 8, 8) == [(1, 1, 1), (2, 1, 1), (4, 1, 1), (8, 1, 1)]
    assert layouts(cat.model("llama3.1-405b"), 2, 8, 8) == [(16, 1, 1), (8, 2, 1)]
    # DeepSeek-V3: 256 routed experts divide 16 and 8
    assert layouts(cat.model("deepseek-v3"), 2, 8, 8) == [(16, 1, 1), (16, 1, 16), (8, 2, 1), (8, 2, 8)]
    # Llama 3.1 8B has 32 query heads: TP 64 over 8 nodes does not divide them, PP 8 remains
    assert layouts(cat.model("llama3.1-8b"), 8, 8, 8) == [(8, 8, 1)]


def test_single_node_model_plan_unchanged(cat: Catalog) -> None:
    """A model one node serves within the SLO is planned as before (multi-node replicas are searched only where no
    smaller replica meets the SLO on an instance and precision)."""
    kw = dict(qps=5.0, input_len=512, output_len=128, slo=SLO(ttft_s=0.5, itl_s=0.05), instances=("p5.48xlarge",))
    model = cat.model("llama3.1-8b")
    one = plan_serve(cat, model, max_nodes_per_replica=1, **kw)  # type: ignore[arg-type]
    multi = plan_serve(cat, model, **kw)  # type: ignore[arg-type]
    assert multi.candidates == one.candidates
    assert all(c.nodes_per_replica == 1 for c in multi.candidates)


def test_small_instance_not_chained_when_a_bigger_node_holds_the_replica(cat: Catalog) -> None:
    """p5.4xlarge (1 H100) and p5.48xlarge (8 H100) cost the same per GPU: a replica over 2 p5.4xlarge is not
    searched (one p5.48xlarge holds it on NVLink); with p5.4xlarge alone it is."""
    kw = dict(qps=2.0, input_len=2048, output_len=256, slo=SLO(ttft_s=1.0, itl_s=0.05))
    model = cat.model("llama3.1-70b")
    both = plan_serve(cat, model, instances=("p5.4xlarge", "p5.48xlarge"), precisions=("fp8",), **kw)  # type: ignore[arg-type]
    assert all(c.nodes_per_replica == 1 for c in both.candidates if c.instance == "p5.4xlarge")
    alone = plan_serve(cat, model, instances=("p5.4xlarge",), precisions=("fp8",), **kw)  # type: ignore[arg-type]
    chained = [c for c in alone.candidates if c.nodes_per_replica >= 2]
    assert chained and all(c.tp * c.pp == c.nodes_per_replica for c in chained)
