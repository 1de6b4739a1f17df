"""The NVIDIA Dynamo disaggregation side check (`fmstack validate --only disaggcheck`): invariants only; the ratios
are reported against the claims, not bounded."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from fmstack.catalog import load_catalog
from fmstack.catalog.loader import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.cli.main import cli
from fmstack.errors import InputError
from fmstack.perfmodel.inference import ServeConfig, deployment, max_concurrency
from fmstack.perfmodel.inference_disagg import SLO, pool_rates, prefill_alone_s
from fmstack.perfmodel.validation_disagg import (
    DYNAMO_CHUNK,
    INPUT_LEN,
    INSTANCE,
    MODEL,
    OUTPUT_LEN,
    PRECISION,
    TTFT_UNBOUNDED_S,
    NodeCheck,
    check_disagg,
    report_lines,
)

SPEEDS = (20.0, 50.0, 90.0)


@pytest.fixture(scope="module")
def checks() -> list[NodeCheck]:
    return check_disagg(load_catalog(None), speeds=SPEEDS, simulate_best=False)


def _cfg(tp: int) -> ServeConfig:
    return ServeConfig(tp=tp, precision=PRECISION, input_len=INPUT_LEN, output_len=OUTPUT_LEN,
                       max_num_tokens=DYNAMO_CHUNK)  # fmt: skip


def _layout(label: str) -> tuple[int, int, int, int]:
    pre, dec = label.split(":")
    return int(pre.split("P")[0]), int(pre.split("tp")[1].rstrip(")")), int(dec.split("D")[0]), int(
        dec.split("tp")[1].rstrip(")"))  # fmt: skip


def test_split_is_bounded_by_each_pool_alone(checks: list[NodeCheck], catalog: Catalog) -> None:
    """A split's tokens/s/GPU never exceeds what its decode pool alone, or its prefill pool alone, delivers per GPU
    of that pool (the split's min over the pools, spread over both pools' GPUs); and its GPUs fit the nodes."""
    model = catalog.model(MODEL)
    for nc in checks:
        cluster = build_cluster(catalog, INSTANCE, nc.nodes)
        for r in nc.rows:
            for pt in (r.split, r.dynamo_split):
                assert pt is not None
                p, tp_p, d, tp_d = _layout(pt.layout)
                assert pt.gpus == p * tp_p + d * tp_d <= nc.nodes * 8
                dd = deployment(model, build_cluster(catalog, INSTANCE, 1), _cfg(tp_d))
                dp = deployment(model, build_cluster(catalog, INSTANCE, 1), _cfg(tp_p))
                conc = np.arange(1, max_concurrency(dd, _cfg(tp_d)) + 1, dtype=np.float64)
                pools = pool_rates(model, cluster, _cfg(tp_p), SLO(ttft_s=TTFT_UNBOUNDED_S, itl_s=r.itl_target_s),
                                   dp, conc, None if tp_p == tp_d else dd)  # fmt: skip
                assert pt.tokens_per_s_per_gpu <= pools.per_decode_rps * OUTPUT_LEN / tp_d * (1 + 1e-12)
                assert pt.tokens_per_s_per_gpu <= pools.per_prefill_rps * OUTPUT_LEN / tp_p * (1 + 1e-12)
                assert pt.itl_s <= r.itl_target_s


def test_frontiers_fall_as_the_per_user_speed_rises(checks: list[NodeCheck]) -> None:
    """A tighter ITL target never allows more throughput per GPU (each side's best is a max over a smaller set)."""
    for nc in checks:
        for side in ("colocated", "split"):
            y = [getattr(r, side).tokens_per_s_per_gpu for r in nc.rows]
            assert y == sorted(y, reverse=True), (nc.nodes, side, y)
            for r in nc.rows:
                assert getattr(r, side).itl_s <= r.itl_target_s


def test_more_gpus_never_lower_the_best(checks: list[NodeCheck]) -> None:
    """Two nodes search every one-node split and layout too (a split of 8 GPUs fits 16)."""
    one, two = checks
    for a, b in zip(one.rows, two.rows, strict=True):
        assert b.split is not None and a.split is not None and b.colocated is not None and a.colocated is not None
        assert b.split.tokens_per_s_per_gpu >= a.split.tokens_per_s_per_gpu
        assert b.colocated.tokens_per_s_per_gpu >= a.colocated.tokens_per_s_per_gpu


def test_dynamo_single_node_split_is_prefill_bound_by_hand(checks: list[NodeCheck], catalog: Catalog) -> None:
    """Dynamo's 4 prefill workers of TP 1 and 1 decode worker of TP 4 at 50 tokens/s/user: the decode worker takes
    more than the 4 prefill workers send, so the split serves 4 / (one 3000-token prompt on TP 1) requests/s, 150
    output tokens each, over 8 GPUs."""
    model = catalog.model(MODEL)
    d = deployment(model, build_cluster(catalog, INSTANCE, 1), _cfg(1))
    prompt_s = prefill_alone_s(d, _cfg(1))
    row = next(r for r in checks[0].rows if r.speed_tokens_per_s_per_user == 50.0)
    assert row.dynamo_split is not None and row.dynamo_split.layout == "4P(tp1):1D(tp4)"
    # the saturated queue: rho = 2a / (1 + 2a) with a ~ 1e6 s / prompt_s, i.e. 1 to 1e-6
    assert row.dynamo_split.tokens_per_s_per_gpu == pytest.approx(4 / prompt_s * 150 / 8, rel=1e-6)


def test_simulation_is_deterministic() -> None:
    cat = load_catalog(None)
    a = check_disagg(cat, speeds=(50.0,), nodes=(1,), seed=3)
    b = check_disagg(cat, speeds=(50.0,), nodes=(1,), seed=3)
    assert a == b
    row = a[0].rows[0]
    assert row.split is not None and row.colocated is not None
    assert row.split.sim_itl_s > 0 and row.colocated.sim_itl_s > 0


def test_bad_inputs() -> None:
    cat = load_catalog(None)
    with pytest.raises(InputError, match="nodes"):
        check_disagg(cat, speeds=(50.0,), nodes=(3,), simulate_best=False)
    with pytest.raises(InputError, match="speeds"):
        check_disagg(cat, speeds=(0.0,), simulate_best=False)


def test_report_names_both_claims(checks: list[NodeCheck]) -> None:
    text = "\n".join(report_lines(checks))
    assert "+30 % (INF-055)" in text and "over 2x (INF-056)" in text
    assert text.count("best ratio") == 2


def test_cli_disaggcheck_json() -> None:
    res = CliRunner().invoke(cli, ["validate", "--only", "disaggcheck", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert list(data) == ["disagg_check_dynamo"]
    nodes = data["disagg_check_dynamo"]["nodes"]
    assert [n["nodes"] for n in nodes] == [1, 2]
    assert [n["claim"] for n in nodes] == [1.3, 2.0]
    for n in nodes:
        assert len(n["rows"]) == 10
        assert n["best_ratio"] == max(r["ratio"] for r in n["rows"] if r["ratio"] is not None)
