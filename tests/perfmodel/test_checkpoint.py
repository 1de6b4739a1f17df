"""Checkpoint size and I/O: hand-checked sizes and write times per tier, and bad input."""

from __future__ import annotations

import pytest

from fmstack.catalog import Catalog
from fmstack.catalog.params import count_params
from fmstack.catalog.topology import Cluster, build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel.checkpoint import CheckpointSize, checkpoint_io, checkpoint_size

GB = 1e9
TIB = 2**40


@pytest.fixture(scope="module")
def llama405(catalog: Catalog) -> CheckpointSize:
    return checkpoint_size(catalog.model("llama3.1-405b"))


@pytest.fixture(scope="module")
def p5x2048(catalog: Catalog) -> Cluster:
    return build_cluster(catalog, "p5.48xlarge", 2048)


def test_llama31_405b_checkpoint_size_by_hand(catalog: Catalog, llama405: CheckpointSize) -> None:
    # Parameters by hand (arXiv 2407.21783 Table 3: 126 layers, h 16384, FFN 53248, 128 heads, 8 KV heads,
    # vocab 128256): attention 2*16384^2 + 2*16384*1024 = 570,425,344; SwiGLU 3*16384*53248 = 2,617,245,696;
    # two RMSNorms 32,768 -> 3,187,703,808 per layer x 126 = 401,650,679,808; embedding + output head
    # 2*128256*16384 = 4,202,692,608; final norm 16,384 -> 405,853,388,800.
    n = 405_853_388_800
    assert count_params(catalog.model("llama3.1-405b")).total == n
    assert llama405.num_params == n
    assert llama405.weights_bytes == n * 2  # bf16
    assert llama405.master_bytes == n * 4  # fp32 master copy
    assert llama405.optimizer_bytes == n * 8  # Adam m and v in fp32
    assert llama405.total_bytes == n * 14 == 5_681_947_443_200  # 5.68 TB
    assert llama405.total_gib == pytest.approx(5_681_947_443_200 / 2**30)  # 5291.7 GiB
    assert llama405.per_rank_bytes(16384) == pytest.approx(346_798_550.0, rel=1e-9)


def test_optimizer_and_precision_options(catalog: Catalog) -> None:
    m = catalog.model("llama3.1-405b")
    n = count_params(m).total
    assert checkpoint_size(m, optimizer="sgd", master_weights=False).total_bytes == n * (2 + 4)
    assert checkpoint_size(m, weight_dtype_bytes=4, master_weights=False, optimizer="none").total_bytes == n * 4


def test_fsx_write_is_capacity_times_disk_rate(catalog: Catalog, llama405: CheckpointSize, p5x2048: Cluster) -> None:
    # PERSISTENT-1000: min(2600 network, 1000 disk) MB/s per TiB x 120 TiB = 120 GB/s; 5.6819e12 B / 120e9 = 47.35 s
    io = checkpoint_io(
        llama405, p5x2048, tier="fsx-persistent-1000", fsx_capacity_tib=120, async_save=False, catalog=catalog
    )
    assert io.write.bottleneck == "fsx-throughput"
    assert io.write.gbps == pytest.approx(120.0)
    assert io.write_s == pytest.approx(5_681_947_443_200 / 120e9 + 0.001)
    assert io.blocking_s == io.write_s  # a synchronous save stalls for the whole write
    assert io.background_s == 0.0
    assert io.durable


def test_scratch2_write_uses_its_lower_write_rate(catalog: Catalog, llama405: CheckpointSize, p5x2048: Cluster) -> None:
    # SCRATCH_2 disk: 200 MB/s/TiB read, 100 write (STO-001): 120 TiB -> 12 GB/s write, 24 GB/s read
    io = checkpoint_io(llama405, p5x2048, tier="fsx-scratch-2", fsx_capacity_tib=120, async_save=False, catalog=catalog)
    assert io.write.gbps == pytest.approx(12.0)
    assert io.restore.gbps == pytest.approx(24.0)


def test_local_nvme_and_async_staging(catalog: Catalog, llama405: CheckpointSize, p5x2048: Cluster) -> None:
    # 2048 nodes x 8 devices x 2.7 GB/s = 44,236.8 GB/s; async stall = 346.8 MB per GPU / 64 GB/s = 5.42 ms
    io = checkpoint_io(llama405, p5x2048, tier="local-nvme", fsx_capacity_tib=None, async_save=True, catalog=catalog)
    assert io.write.bottleneck == "nvme-devices"
    assert io.write.gbps == pytest.approx(2048 * 8 * 2.7)
    assert io.blocking_s == pytest.approx(346_798_550.0 / 64e9, rel=1e-9)
    assert io.background_s == io.write_s
    assert not io.durable  # instance store is lost with its node


def test_s3_is_bound_by_request_rate_per_prefix(catalog: Catalog, llama405: CheckpointSize, p5x2048: Cluster) -> None:
    # 3,500 PUT/s per prefix x 8 MiB parts = 29.36 GB/s for one prefix; 5,500 GET/s for reads
    io = checkpoint_io(llama405, p5x2048, tier="s3", fsx_capacity_tib=None, async_save=False, catalog=catalog)
    assert io.write.bottleneck == "s3-request-rate"
    assert io.write.gbps == pytest.approx(3500 * 8 * 2**20 / GB)
    assert io.restore.gbps == pytest.approx(5500 * 8 * 2**20 / GB)
    # With enough prefixes the per-node client target (50 GB/s, STO-010) on 4 nodes binds instead
    small = build_cluster(catalog, "p5.48xlarge", 4)
    wide = checkpoint_io(
        llama405, small, tier="s3", fsx_capacity_tib=None, async_save=True, catalog=catalog, s3_prefixes=64
    )
    assert wide.write.bottleneck == "s3-client"
    assert wide.write.gbps == pytest.approx(4 * 50.0)


def test_tiered_save_writes_nvme_then_durable_in_background(
    catalog: Catalog, llama405: CheckpointSize, p5x2048: Cluster
) -> None:
    io = checkpoint_io(
        llama405,
        p5x2048,
        tier="local-nvme",
        durable_tier="fsx-persistent-250",
        fsx_capacity_tib=120,
        async_save=False,
        catalog=catalog,
    )
    assert io.blocking_s == io.write_s  # the NVMe write
    assert io.durable_write is not None
    assert io.background_s == io.durable_write.time_s
    assert io.durable_write.gbps == pytest.approx(120 * 250 / 1000)  # min(640, 250) MB/s/TiB
    assert io.restore.tier == "fsx-persistent-250"
    assert io.durable


@pytest.mark.parametrize(
    ("kwargs", "field", "text"),
    [
        (
            {"tier": "local-nvme", "instance": "grand-teton-h100"},
            "tier",
            "has no local NVMe (not listed in the catalog)",
        ),
        ({"tier": "fsx-persistent-250", "fsx_capacity_tib": 0}, "fsx_capacity_tib", "positive number of TiB"),
        ({"tier": "fsx-persistent-250", "fsx_capacity_tib": -3}, "fsx_capacity_tib", "positive number of TiB"),
        ({"tier": "fsx-persistent-250", "fsx_capacity_tib": 2.4}, "fsx_capacity_tib", "does not fit"),
        ({"tier": "fsx-persistent-250", "fsx_capacity_tib": None}, "fsx_capacity_tib", "needs a capacity"),
        ({"tier": "tape"}, "tier", "known: fsx-persistent-1000"),
        ({"tier": "s3", "durable_tier": "fsx-persistent-250"}, "durable_tier", "writes local NVMe first"),
        ({"tier": "s3", "s3_prefixes": 0}, "s3_prefixes", "positive"),
    ],
)
def test_bad_input_names_the_field(
    catalog: Catalog, llama405: CheckpointSize, kwargs: dict[str, object], field: str, text: str
) -> None:
    args = dict(kwargs)
    cluster = build_cluster(catalog, str(args.pop("instance", "p5.48xlarge")), 16)
    args.setdefault("fsx_capacity_tib", None)
    with pytest.raises(InputError) as err:
        checkpoint_io(llama405, cluster, async_save=False, catalog=catalog, **args)  # type: ignore[arg-type]
    assert err.value.field == field
    assert text in err.value.message


def test_async_staging_must_fit_host_memory(catalog: Catalog, llama405: CheckpointSize) -> None:
    # 5.68 TB over 2 nodes = 2.84 TB per node > 2 TiB of host memory on p5.48xlarge
    two = build_cluster(catalog, "p5.48xlarge", 2)
    with pytest.raises(InputError, match="host memory") as err:
        checkpoint_io(llama405, two, tier="s3", fsx_capacity_tib=None, async_save=True, catalog=catalog)
    assert err.value.field == "async_save"


def test_bad_size_inputs(catalog: Catalog) -> None:
    m = catalog.model("llama3.1-405b")
    with pytest.raises(InputError, match="allowed: adam"):
        checkpoint_size(m, optimizer="lion")
    with pytest.raises(InputError) as err:
        checkpoint_size(m, weight_dtype_bytes=0)
    assert err.value.field == "weight_dtype_bytes"
    with pytest.raises(InputError):
        checkpoint_size(m).per_rank_bytes(0)
