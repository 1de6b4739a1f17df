"""A split's replicas placed on its nodes, each prefill -> decode pair's KV link, and the simulations' per-pair
transfer: the placement by hand, a no-load request paying its pair's link (hand-checked TTFT), the KV-locality
tie-break, a uniform matrix bit for bit as one figure, determinism."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from fmstack.catalog import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.cli.main import cli
from fmstack.errors import InputError
from fmstack.perfmodel.inference import ServeConfig, deployment
from fmstack.perfmodel.inference_disagg import kv_move, kv_transfer_s, prefill_alone_s
from fmstack.perfmodel.inference_disagg_place import kv_pair_times, place_split
from fmstack.perfmodel.inference_sim import SimConfig
from fmstack.perfmodel.inference_sim_disagg import DisaggSim, simulate_disagg, simulate_disagg_stats
from fmstack.perfmodel.inference_sim_disagg_adp import AdpDisaggSim
from fmstack.perfmodel.inference_step import Deployment, step_time

ISL, OSL, CHUNK = 2048, 256, 2048


def test_five_prefill_one_decode_tp2_on_two_p5_nodes_by_hand() -> None:
    """12 GPUs on two 8-GPU nodes (one NVLink domain each): the decode replica and three prefill replicas fill node
    0, the other two prefill replicas sit on node 1; pairs (0..2, 0) are NVLink, (3, 0) and (4, 0) EFA."""
    s = place_split(5, 1, 2, 2, 8, 1)
    assert s.nodes == 2 and s.decode_nodes == ((0,),)
    assert s.prefill_nodes == ((0,), (0,), (0,), (1,), (1,))
    assert [s.same_domain(p, 0) for p in range(5)] == [True, True, True, False, False]
    assert s.nvlink_pairs_share == pytest.approx(3 / 5)


def test_decode_replicas_spread_over_the_domains_first() -> None:
    # 6P:2D tp 2 on two p5 nodes: one decode replica per node, three prefill replicas beside each
    s = place_split(6, 2, 2, 2, 8, 1)
    assert s.decode_domain == (0, 1) and s.prefill_domain == (0, 0, 0, 1, 1, 1)
    assert s.nvlink_pairs_share == pytest.approx(6 / 12)
    # 3P(tp4):1D(tp2), 14 GPUs: the decode replica and one prefill replica on node 0
    assert place_split(3, 1, 4, 2, 8, 1).prefill_domain == (0, 1, 1)


def test_a_spread_that_splits_a_nodes_room_falls_back_to_largest_first() -> None:
    """2 decode tp 2 spread one per node leave 6 GPUs a node: three tp-4 prefill replicas no longer fit the two
    paid nodes; largest first packs them (two on node 0, one on node 1 beside both decode replicas)."""
    s = place_split(3, 2, 4, 2, 8, 1)
    assert s.nodes == 2
    assert s.prefill_nodes == ((0,), (0,), (1,)) and s.decode_nodes == ((1,), (1,))


def test_the_nvlink_domain_not_the_node_decides() -> None:
    # p6e-gb200: 4 GPUs a node, 18 nodes a 72-GPU domain: 4P:2D tp 8 (two nodes each) all in domain 0
    s = place_split(4, 2, 8, 8, 4, 18)
    assert s.nodes == 12 and set(s.prefill_domain) == set(s.decode_domain) == {0}
    assert s.decode_nodes == ((0, 1), (2, 3)) and s.nvlink_pairs_share == 1.0
    # a TP 16 prefill replica spans two p5 nodes: no domain, every pair over EFA
    t = place_split(2, 1, 16, 8, 8, 1)
    assert t.prefill_domain == (None, None) and t.nvlink_pairs_share == 0.0


def test_placement_is_deterministic_and_checked() -> None:
    assert place_split(7, 3, 2, 4, 8, 1) == place_split(7, 3, 2, 4, 8, 1)
    with pytest.raises(InputError):
        place_split(0, 1, 2, 2, 8, 1)


@pytest.fixture(scope="module")
def tp2(catalog: Catalog) -> tuple[Deployment, ServeConfig, float, float]:
    """Llama 3.1 70B fp8 tp 2 on p5: the NVLink and the EFA figure of one prompt's KV, from kv_transfer_s."""
    model = catalog.model("llama3.1-70b")
    cluster = build_cluster(catalog, "p5.48xlarge", 1)
    cfg = ServeConfig(tp=2, precision="fp8", input_len=ISL, output_len=OSL, max_num_tokens=CHUNK)
    _, nv = kv_transfer_s(model, cluster, cfg, same_domain=True)
    _, efa = kv_transfer_s(model, cluster, cfg, same_domain=False)
    return deployment(model, cluster, cfg), cfg, nv, efa


def test_pair_times_price_each_pair_on_its_link(
    catalog: Catalog, tp2: tuple[Deployment, ServeConfig, float, float]
) -> None:
    d, cfg, nv, efa = tp2
    model, cluster = catalog.model("llama3.1-70b"), build_cluster(catalog, "p5.48xlarge", 1)
    kv = kv_pair_times(model, cluster, cfg, d, None, 5, 1, 8, cluster.nodes_per_domain)
    assert [row[0] for row in kv.pair_s.rows()] == [nv, nv, nv, efa, efa]
    assert efa > nv and kv.best_s == nv == kv_move(model, cluster, cfg, d)[1]
    assert kv.by_link == {"NVLink (nvlink-4)": nv, "EFA-V2": efa} and kv.nvlink_pairs_share == pytest.approx(0.6)


def _sim(rate: float, n: int = 40, seed: int = 0) -> SimConfig:
    return SimConfig(request_rate_per_s=rate, num_requests=n, warmup_requests=5, seed=seed)


def test_a_no_load_request_from_a_remote_prefill_replica_pays_the_efa_transfer(
    tp2: tuple[Deployment, ServeConfig, float, float],
) -> None:
    """At no load prefill replica 0 takes every prompt; with it in the other domain (EFA) TTFT is its prompt (one
    2048-token iteration) + the EFA transfer + one decode iteration of one sequence at context 2048."""
    d, cfg, nv, efa = tp2
    first = float(step_time(d, 1.0, float(ISL)).total_s)
    prefill = float(step_time(d, 0.0, 0.0, float(ISL), ISL * (ISL + 1) / 2, 1.0).total_s)
    assert prefill == prefill_alone_s(d, cfg)
    remote = simulate_disagg(d, cfg, _sim(1e-4), prefill_replicas=2, decode_replicas=1, kv_transfer_s=[[efa], [nv]])
    local = simulate_disagg(d, cfg, _sim(1e-4), prefill_replicas=2, decode_replicas=1, kv_transfer_s=[[nv], [efa]])
    assert remote.ttft_s[50] == pytest.approx(prefill + efa + first, abs=1e-8)
    assert local.ttft_s[50] == pytest.approx(prefill + nv + first, abs=1e-8)


def test_equally_free_decode_replicas_prefer_the_one_in_the_prefill_replicas_domain(
    catalog: Catalog,
    tp2: tuple[Deployment, ServeConfig, float, float],
) -> None:
    d, cfg, nv, efa = tp2
    s = DisaggSim(d, cfg, _sim(1e-4), prefill_replicas=1, decode_replicas=2, kv_transfer_s=[[efa, nv]])
    r = s.run()
    assert set(s._decode_of.values()) == {1} and r.ttft_s[50] == pytest.approx(
        prefill_alone_s(d, cfg) + nv + float(step_time(d, 1.0, float(ISL)).total_s), abs=1e-8)  # fmt: skip
    # under load the most free slots still come first: both decode replicas take requests
    busy = DisaggSim(d, cfg, _sim(20.0, n=200), prefill_replicas=4, decode_replicas=2, kv_transfer_s=[[efa, nv]] * 4)
    busy.run()
    assert set(busy._decode_of.values()) == {0, 1}
    # attention DP in the decode pool: the (replica, rank) units tie the same way
    model, cluster = catalog.model("deepseek-v3"), build_cluster(catalog, "p5en.48xlarge", 1)
    adp = ServeConfig(tp=8, ep=8, precision="fp8", input_len=ISL, output_len=OSL, max_num_tokens=CHUNK,
                      attention_dp=True)  # fmt: skip
    da = deployment(model, cluster, adp)
    a = AdpDisaggSim(da, adp, _sim(1e-4, n=10), prefill_replicas=1, decode_replicas=2, kv_transfer_s=[[efa, nv]])
    a.run()
    assert set(a._decode_of.values()) == {1}


def test_one_figure_for_every_pair_is_the_scalar_run_bit_for_bit_and_runs_repeat(
    tp2: tuple[Deployment, ServeConfig, float, float],
) -> None:
    d, cfg, nv, efa = tp2
    kw = dict(prefill_replicas=3, decode_replicas=2)
    one = simulate_disagg(d, cfg, _sim(12.0, n=150), kv_transfer_s=nv, **kw)
    same = simulate_disagg(d, cfg, _sim(12.0, n=150), kv_transfer_s=[[nv, nv]] * 3, **kw)
    assert one.ttft_s == same.ttft_s and one.itl_s == same.itl_s
    mixed = [[nv, efa], [efa, nv], [efa, nv]]
    a, sa = simulate_disagg_stats(d, cfg, _sim(12.0, n=150), kv_transfer_s=mixed, **kw)
    b, _ = simulate_disagg_stats(d, cfg, _sim(12.0, n=150), kv_transfer_s=mixed, **kw)
    assert a.ttft_s == b.ttft_s and a.itl_s == b.itl_s
    assert nv < sa.kv_transfer_mean_s < efa and 0 < sa.kv_fastest_share < 1
    assert sa.kv_transfer_mean_s == pytest.approx(sa.kv_fastest_share * nv + (1 - sa.kv_fastest_share) * efa)


def test_a_pair_matrix_of_the_wrong_shape_is_an_input_error(tp2: tuple[Deployment, ServeConfig, float, float]) -> None:
    d, cfg, nv, _ = tp2
    with pytest.raises(InputError, match="2 x 1 pair times"):
        DisaggSim(d, cfg, _sim(1.0), prefill_replicas=2, decode_replicas=1, kv_transfer_s=[[nv, nv]])
    with pytest.raises(InputError, match=">= 0 s"):
        DisaggSim(d, cfg, _sim(1.0), prefill_replicas=1, decode_replicas=1, kv_transfer_s=[[-1.0]])


def test_the_split_json_gives_each_link_and_the_shares() -> None:
    argv = ["estimate", "serve", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--nodes", "2", "--tp", "2",
            "--precision", "fp8", "--input-len", str(ISL), "--output-len", str(OSL), "--qps", "20",
            "--prefill-replicas", "5", "--decode-replicas", "1", "--max-num-tokens", str(CHUNK), "--no-simulate",
            "--json"]  # fmt: skip
    result = CliRunner().invoke(cli, argv, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    z = json.loads(result.output)["disaggregated_simulation"]
    assert z["prefill_domains"] == [0, 0, 0, 1, 1] and z["decode_domains"] == [0]
    assert z["kv_pairs_nvlink_share"] == pytest.approx(0.6) and z["kv_link"].startswith("NVLink")
    nv, efa = z["kv_transfer_s_by_link"]["NVLink (nvlink-4)"], z["kv_transfer_s_by_link"]["EFA-V2"]
    assert z["kv_transfer_s"] == nv < efa
    share = z["kv_requests_nvlink_share"]
    assert 0.6 <= share < 1  # the tie-break keeps more than the pairs' share local
    assert z["kv_transfer_mean_s"] == pytest.approx(share * nv + (1 - share) * efa)
