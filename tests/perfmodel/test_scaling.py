"""`fmstack scale` sweeps: each EFA generation at its own per-node bandwidth, the global batch held fixed
(strong scaling) and reported per point, GPU kinds rounded to sizes they can form."""

from __future__ import annotations

import pytest

from fmstack.catalog import Catalog
from fmstack.catalog.topology import resolve_instance
from fmstack.errors import InputError
from fmstack.perfmodel.planner import SearchSpace
from fmstack.perfmodel.scaling import EFA_GENERATIONS, round_to_valid_nodes, run_sweep

# the first 8-GPU AWS instance of each EFA generation (the node fabrics.yaml's node_bw_gbps cites)
REFERENCE_NODE = {"efa-v1": "p4d.24xlarge", "efa-v2": "p5.48xlarge", "efa-v3": "p5en.48xlarge",
                  "efa-v4": "p6-b200.48xlarge"}  # fmt: skip


def test_efa_node_bandwidth_matches_the_reference_instance(catalog: Catalog) -> None:
    for fabric_name, instance_name in REFERENCE_NODE.items():
        fabric, inst = catalog.fabric(fabric_name), catalog.instance(instance_name)
        assert inst.network == fabric_name
        assert fabric.node_bw_gbps == inst.network_bw_gbps
        assert fabric.node_gpus == inst.num_gpus
    assert catalog.fabric("efa-v1").node_bw_gbps == 400 / 8  # p4d: 4 x 100 Gb/s EFA


def test_efa_axis_gives_each_generation_its_bandwidth_and_latency(catalog: Catalog) -> None:
    result = run_sweep(catalog, catalog.model("llama3.1-70b"), axis="efa", values=list(EFA_GENERATIONS),
                       instance="p5.48xlarge", gpus=512, tokens=2e12, space=SearchSpace())  # fmt: skip
    points = {p.value: p for p in result.points}
    # 8-GPU p5 nodes: the reference nodes also have 8 GPUs, so the node keeps the generation's bandwidth
    assert [points[f].network_bw_gbps_per_node for f in EFA_GENERATIONS] == [50, 400, 400, 400]
    assert [points[f].network_latency_us for f in EFA_GENERATIONS] == [
        catalog.fabric(f).latency_us for f in EFA_GENERATIONS
    ]
    assert [points[f].scale_out_fabric for f in EFA_GENERATIONS] == list(EFA_GENERATIONS)
    # an eighth of the bandwidth and almost twice the latency cannot be as fast; newer generations are no slower
    tps = [points[f].tokens_per_s for f in EFA_GENERATIONS]
    assert tps[0] < tps[1] <= tps[2] <= tps[3]
    assert all(p.global_batch == 512 and not p.global_batch_changed for p in result.points)


def test_efa_axis_keeps_the_instance_bandwidth_for_its_own_fabric(catalog: Catalog) -> None:
    # p6-b300 has EFA v4 at 800 GB/s per node (twice the p6-b200 reference): its own point keeps 800
    result = run_sweep(catalog, catalog.model("llama3.1-8b"), axis="efa", values=["efa-v4", "efa-v1"],
                       instance="p6-b300.48xlarge", gpus=64, tokens=1e12, space=SearchSpace())  # fmt: skip
    assert [p.network_bw_gbps_per_node for p in result.points] == [800, 50]


def test_nodes_axis_holds_the_global_batch_fixed(catalog: Catalog) -> None:
    # without --global-batch the first point's default (about 4M tokens = 512 x 8192) is held at every point;
    # before, the planner re-chose the default per point and 512 nodes ran at gb1024
    result = run_sweep(catalog, catalog.model("llama3.1-70b"), axis="nodes", values=["64", "128", "256", "512"],
                       instance="p5.48xlarge", gpus=512, tokens=2e12, space=SearchSpace())  # fmt: skip
    assert result.reference_global_batch == 512
    assert [p.global_batch for p in result.points] == [512] * 4
    assert [p.efficiency_kind for p in result.points] == ["strong"] * 4
    assert not any(p.global_batch_changed for p in result.points)
    assert [p.num_nodes for p in result.points] == [64, 128, 256, 512]
    assert [p.global_batch_tokens for p in result.points] == [512 * 8192] * 4


def test_nodes_axis_says_when_a_point_cannot_run_at_the_batch(catalog: Catalog) -> None:
    # one sequence per step means dp = mb = 1, so every GPU must be model parallel: llama3.1-8b allows at most
    # tp 8 (the p5 NVLink domain) x pp 32 (its layers) x cp 8 = 2048 GPUs, fewer than 512 nodes x 8 = 4096
    result = run_sweep(catalog, catalog.model("llama3.1-8b"), axis="nodes", values=["1", "512"],
                       instance="p5.48xlarge", gpus=8, tokens=1e12, space=SearchSpace(global_batch=1))  # fmt: skip
    first, big = result.points
    assert (first.global_batch, first.global_batch_changed, first.efficiency_kind) == (1, False, "strong")
    assert big.global_batch != 1
    assert big.global_batch_changed
    assert big.efficiency_kind == "batch-changed"
    assert f"gb{big.global_batch} instead of gb1" in big.note


@pytest.mark.parametrize(("gpus", "nodes"), [(512, 126), (4096, 1026), (72, 18), (8, 18), (36, 18), (108, 18)])
def test_ultraserver_rounds_to_the_nearest_whole_nvlink_domain(catalog: Catalog, gpus: int, nodes: int) -> None:
    # u-p6e-gb200x72: 18 p6e-gb200.36xlarge of 4 GPUs = 72 GPUs; 512 / 72 = 7.1 -> 7 racks; 4096 / 72 = 56.9 -> 57;
    # 108 / 72 = 1.5, a tie, rounds down; below one rack it rounds up to one
    got, note = round_to_valid_nodes(resolve_instance(catalog, "u-p6e-gb200x72"), gpus)
    assert got == nodes
    assert (note == "") == (gpus == 72)
    if note:
        assert f"{gpus} GPUs rounded to {nodes * 4}" in note


def test_instances_round_to_whole_nodes_only(catalog: Catalog) -> None:
    assert round_to_valid_nodes(catalog.instance("p5.48xlarge"), 512) == (64, "")
    assert round_to_valid_nodes(catalog.instance("p6e-gb200.36xlarge"), 8, whole_domains=False) == (2, "")
    # named by the instance, a job may use part of one rack, but above one rack it takes whole racks (Cluster's rule)
    assert round_to_valid_nodes(catalog.instance("p6e-gb200.36xlarge"), 512, whole_domains=False)[0] == 126
    assert round_to_valid_nodes(catalog.instance("p6e-gb200.36xlarge"), 10, whole_domains=False)[0] == 2


def test_gpu_axis_rounds_ultraservers_and_keeps_sequences_per_gpu(catalog: Catalog) -> None:
    values = ["p5.48xlarge", "u-p6e-gb200x72"]
    result = run_sweep(catalog, catalog.model("llama3.1-70b"), axis="gpu", values=values, instance="p5.48xlarge",
                       gpus=512, tokens=2e12, space=SearchSpace())  # fmt: skip
    p5, gb200 = result.points
    assert (p5.num_gpus, p5.global_batch) == (512, 512)
    assert (gb200.num_gpus, gb200.num_nodes) == (504, 126)
    assert gb200.global_batch == 504  # 512 sequences per 512 GPUs = 1 per GPU
    assert "512 GPUs rounded to 504 (126 nodes)" in gb200.note


def test_gpu_axis_skips_a_kind_that_cannot_run_instead_of_failing(catalog: Catalog) -> None:
    # llama3.1-70b does not fit on 8 H100 (80 GB each) but does on 8 B200 (180 GB each)
    result = run_sweep(catalog, catalog.model("llama3.1-70b"), axis="gpu", values=["p5.48xlarge", "p6-b200.48xlarge"],
                       instance="p5.48xlarge", gpus=8, tokens=2e12, space=SearchSpace())  # fmt: skip
    assert [p.value for p in result.points] == ["p6-b200.48xlarge"]
    assert len(result.skipped) == 1
    assert result.skipped[0].startswith("p5.48xlarge: skipped: no configuration of llama3.1-70b fits")
    assert "\n" not in result.skipped[0]


def test_sweep_fails_when_no_value_can_run(catalog: Catalog) -> None:
    with pytest.raises(InputError, match="no value of --axis efa could be planned"):
        run_sweep(catalog, catalog.model("llama3.1-405b"), axis="efa", values=["efa-v1", "efa-v2"],
                  instance="p5.48xlarge", gpus=8, tokens=1e12, space=SearchSpace())  # fmt: skip


def test_nodes_axis_skips_a_count_that_is_not_whole_ultraservers(catalog: Catalog) -> None:
    # u-p6e-gb200x72: 18 nodes of 4 GPUs per rack; 150 nodes is 8 racks and 6 nodes, which an UltraServer job cannot use
    result = run_sweep(catalog, catalog.model("llama3.1-8b"), axis="nodes", values=["144", "150", "288"],
                       instance="u-p6e-gb200x72", gpus=576, tokens=1e12, space=SearchSpace(global_batch=1152))  # fmt: skip
    assert [p.value for p in result.points] == ["144", "288"]
    assert len(result.skipped) == 1 and result.skipped[0].startswith("150: skipped: num_nodes(150) must be a multiple")


def test_a_skipped_point_gives_the_reason_at_the_batch_it_was_asked_for(catalog: Catalog) -> None:
    # one p5 node cannot hold Llama 3.1 70B training at any configuration: the reason quotes the asked gb64,
    # not the planner's default batch it also tried
    result = run_sweep(catalog, catalog.model("llama3.1-70b"), axis="nodes", values=["64", "1"],
                       instance="p5.48xlarge", gpus=512, tokens=2e12, space=SearchSpace(global_batch=64))  # fmt: skip
    assert [p.value for p in result.points] == ["64"]
    assert result.skipped[0].startswith("1: skipped: no configuration of llama3.1-70b fits")
    assert "gb64" in result.skipped[0]


def test_weak_scaling_and_impossible_nvlink_domains_are_refused(catalog: Catalog) -> None:
    model = catalog.model("llama3.1-8b")
    with pytest.raises(InputError, match=r"^weak: "):
        run_sweep(catalog, model, axis="gpu", values=["p5.48xlarge"], instance="p5.48xlarge", gpus=64, tokens=1e12,
                  space=SearchSpace(), weak=True)  # fmt: skip
    for bad in ("0", "-8", "12"):
        with pytest.raises(InputError, match="positive multiple of 8 GPUs per node"):
            run_sweep(catalog, model, axis="nvlink", values=[bad], instance="p5.48xlarge", gpus=64, tokens=1e12,
                      space=SearchSpace())  # fmt: skip
