"""UltraServer entries take effect, and catalog numbers that must agree are checked when the catalog loads.

The catalogs are the review's scratch catalogs (session 13): an UltraServer with a price and its own network, one
whose GPU count does not add up, an instance whose HBM total is a typo.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fmstack.catalog import Catalog, load_catalog
from fmstack.catalog.loader import HBM_TOLERANCE
from fmstack.catalog.topology import build_cluster, resolve_instance
from fmstack.errors import InputError
from fmstack.perfmodel.collectives_algos import link_params
from fmstack.perfmodel.config import TrainConfig
from fmstack.perfmodel.planner import SearchSpace, plan_training
from fmstack.perfmodel.training import estimate_training

US = """kind: ultraserver
entries:
  - name: u-p6e-gb200x72
    instance: p6e-gb200.36xlarge
    num_instances: 18
    num_gpus: {num_gpus}
    hbm_aggregate_tb: {hbm_tb}
    network: {network}
    network_bw_gbps: {bw}
    price_per_hour_usd: 1000.0
"""


def _catalog(tmp_path: Path, text: str, name: str = "us.yaml") -> Catalog:
    (tmp_path / name).write_text(text)
    return load_catalog(tmp_path)


def _us(
    tmp_path: Path, *, num_gpus: int = 72, hbm_tb: float = 13.4, network: str = "efa-v4", bw: float = 3600
) -> Catalog:
    return _catalog(tmp_path, US.format(num_gpus=num_gpus, hbm_tb=hbm_tb, network=network, bw=bw))


def test_ultraserver_price_is_split_per_instance(tmp_path: Path) -> None:
    cat = _us(tmp_path)
    inst = resolve_instance(cat, "u-p6e-gb200x72")
    assert inst.price_per_hour_usd == pytest.approx(1000.0 / 18)  # per instance-hour, the unit cost counts in
    assert inst.network_bw_gbps == pytest.approx(3600 / 18)  # 200 GB/s, the instance's own
    assert inst.gpu_memory_gb == pytest.approx(13400 / 18)
    # named by the instance, the instance's own (unpriced) entry
    assert cat.instance("p6e-gb200.36xlarge").price_per_hour_usd is None


def test_ultraserver_price_ranks_by_cost(tmp_path: Path) -> None:
    """Before: "cost needs a price for p6e-gb200.36xlarge" although the UltraServer had one. One UltraServer
    (18 instances) for t seconds costs t / 3600 x 1000 USD."""
    cat = _us(tmp_path)
    cluster = build_cluster(cat, "u-p6e-gb200x72", 18)
    result = plan_training(cat.model("llama3.1-8b"), [cluster], tokens=1e12, objective="cost", top=1,
                           space=SearchSpace())  # fmt: skip
    seconds = result.time_to_train_s[0]
    assert seconds is not None
    assert result.cost_usd[0] == pytest.approx(seconds / 3600 * 1000.0)


def test_ultraserver_network_is_the_scale_out_fabric(tmp_path: Path) -> None:
    """Before: the UltraServer's network and bandwidth were ignored (the instance's efa-v4 at 200 GB/s per node).
    ib-ndr at 36 GB/s per UltraServer: 2 GB/s per 4-GPU instance, 0.5 GB/s per GPU x 0.92 efficiency."""
    cat = _us(tmp_path, network="ib-ndr", bw=36)
    cluster = build_cluster(cat, "u-p6e-gb200x72", 36)
    assert cluster.scale_out.name == "ib-ndr"
    out = link_params(cluster, "scale-out")
    assert out is not None
    assert out.bw_gbps == pytest.approx(36 / 18 / 4 * 0.92)
    # two NVL72 domains: the data-parallel gradient reduction crosses the slow fabric and the step slows down
    builtin = build_cluster(load_catalog(), "u-p6e-gb200x72", 36)
    cfg = TrainConfig(dp=144, global_batch=576, micro_batch=2, seq_len=8192)
    model = cat.model("llama3.1-8b")
    slow, fast = estimate_training(model, cluster, cfg), estimate_training(model, builtin, cfg)
    assert slow.comm["dp"].link_s > 10 * fast.comm["dp"].link_s
    assert slow.step_time_s > fast.step_time_s


def test_builtin_ultraservers_resolve_to_their_instances_numbers(catalog: Catalog) -> None:
    # the built-in UltraServers' whole-server numbers are 9 and 18 times the instance's: nothing moves
    for name in ("u-p6e-gb200x36", "u-p6e-gb200x72"):
        us, inst = catalog.ultraserver(name), resolve_instance(catalog, name)
        base = catalog.instance(us.instance)
        assert inst.network == base.network
        assert inst.network_bw_gbps == pytest.approx(base.network_bw_gbps)
        assert inst.nvlink_domain_gpus == us.num_gpus
        assert inst.price_per_hour_usd == base.price_per_hour_usd


def test_ultraserver_gpu_count_must_add_up(tmp_path: Path) -> None:
    with pytest.raises(InputError) as e:
        _us(tmp_path, num_gpus=64)
    assert e.value.field == "ultraserver 'u-p6e-gb200x72' field 'num_gpus'"
    assert e.value.message == "64 != num_instances(18) x 4 GPUs per p6e-gb200.36xlarge = 72"


def test_ultraserver_hbm_must_match_its_gpus(tmp_path: Path) -> None:
    with pytest.raises(InputError) as e:
        _us(tmp_path, hbm_tb=1.34)  # a missing digit
    assert e.value.field == "ultraserver 'u-p6e-gb200x72' field 'hbm_aggregate_tb'"
    assert e.value.message.startswith("1.34 TB does not match num_gpus(72) x GB200 hbm_gb(186 GB) = 13.392 TB")


def test_ultraserver_network_must_be_a_fabric(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="unknown fabric 'efa-v9'") as e:
        _us(tmp_path, network="efa-v9")
    assert e.value.field == "ultraserver 'u-p6e-gb200x72' field 'network'"


INSTANCE = """kind: instance
entries:
  - name: dgx-tiny
    gpu: A100-80GB
    num_gpus: 8
    gpu_memory_gb: {mem}
    vcpus: 256
    host_memory_gib: 2048
    nvlink_domain_gpus: 8
    network: ib-hdr
    network_bw_gbps: 200
"""


def test_instance_gpu_memory_must_match_its_gpus(tmp_path: Path) -> None:
    """Before: 8 GB for 8 x A100-80GB loaded silently."""
    with pytest.raises(InputError) as e:
        _catalog(tmp_path, INSTANCE.format(mem=8), "x.yaml")
    assert e.value.field == "instance 'dgx-tiny' field 'gpu_memory_gb'"
    assert e.value.message == (
        "8 GB does not match num_gpus(8) x A100-80GB hbm_gb(80 GB) = 640 GB; allowed: 576 to 704 GB"
    )
    assert _catalog(tmp_path, INSTANCE.format(mem=640), "x.yaml").instance("dgx-tiny").gpu_memory_gb == 640


def test_builtin_instances_are_within_the_tolerance(catalog: Catalog) -> None:
    """The tolerance is as wide as the published totals need and no wider: p6-b300.48xlarge lists 2,100 GB for
    8 x 288 GB B300 (-8.9 %), the widest gap; every other built-in instance is within 1 %."""
    gaps = {}
    for inst in catalog.all("instance"):
        gpu = catalog.gpu(inst.gpu)  # type: ignore[attr-defined]
        gaps[inst.name] = inst.gpu_memory_gb / (inst.num_gpus * gpu.hbm_gb) - 1  # type: ignore[attr-defined]
    assert gaps["p6-b300.48xlarge"] == pytest.approx(2100 / 2304 - 1)
    assert max(abs(g) for g in gaps.values()) == pytest.approx(abs(gaps["p6-b300.48xlarge"]))
    assert abs(gaps["p6-b300.48xlarge"]) < HBM_TOLERANCE
    assert all(abs(g) < 0.01 for name, g in gaps.items() if name != "p6-b300.48xlarge")
