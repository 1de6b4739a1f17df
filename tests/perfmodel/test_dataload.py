"""Data-loading throughput and FSx sizing: hand-checked capacities and bad input."""

from __future__ import annotations

import pytest

from fmstack.catalog import Catalog
from fmstack.errors import InputError
from fmstack.perfmodel.dataload import (
    bytes_per_token_for_vocab,
    dataload_requirement,
    fsx_capacity_for,
    fsx_capacity_needed,
    fsx_throughput_gbps,
)


def test_token_bytes_follow_megatron_dtype() -> None:
    # Megatron-LM DType.optimal_dtype: uint16 below 65,500, else int32
    assert bytes_per_token_for_vocab(50257) == 2  # GPT-2/GPT-3
    assert bytes_per_token_for_vocab(65499) == 2
    assert bytes_per_token_for_vocab(65500) == 4
    assert bytes_per_token_for_vocab(128256) == 4  # Llama 3


def test_read_requirement_by_hand() -> None:
    # 2.69e6 tokens/s x 4 B = 10.76 MB/s; x 3 read amplification = 32.3 MB/s
    assert dataload_requirement(2.69e6, bytes_per_token=4) == pytest.approx(0.01076)
    assert dataload_requirement(2.69e6, bytes_per_token=4, read_amplification=3) == pytest.approx(0.03228)
    assert dataload_requirement(1e6) == pytest.approx(0.002)  # default 2 B (uint16)


def test_fsx_capacity_rounds_up_to_offered_sizes(catalog: Catalog) -> None:
    # PERSISTENT-250 reads at min(640, 250) = 250 MB/s/TiB: 4 GB/s -> 16 TiB -> 7 x 2.4 = 16.8 TiB
    assert fsx_capacity_for(4.0, "fsx-persistent-250", catalog) == pytest.approx(16.8)
    # exactly on a step stays there: 2.4 GB/s at 1000 MB/s/TiB = 2.4 TiB
    assert fsx_capacity_for(2.4, "fsx-persistent-1000", catalog) == pytest.approx(2.4)
    # below the minimum: 1.2 TiB
    assert fsx_capacity_for(0.1, "fsx-persistent-1000", catalog) == pytest.approx(1.2)
    # SCRATCH_2 writes at 100 MB/s/TiB: 1.2 GB/s -> 12 TiB = 5 x 2.4
    assert fsx_capacity_for(1.2, "fsx-scratch-2", catalog, op="write") == pytest.approx(12.0)
    assert fsx_throughput_gbps(16.8, "fsx-persistent-250", catalog) == pytest.approx(4.2)


def test_capacity_needed_takes_the_largest_need(catalog: Catalog) -> None:
    # write 50 GB/s at 1000 MB/s/TiB -> 50 TiB -> 21 x 2.4 = 50.4; space 2 x 5.68 TB = 10.3 TiB -> 12.0
    need = fsx_capacity_needed(
        "fsx-persistent-1000", catalog, read_gbps=0.01, write_gbps=50.0, stored_bytes=2 * 5.681947e12
    )
    assert need == pytest.approx(50.4)
    assert fsx_capacity_needed("fsx-persistent-1000", catalog, stored_bytes=2 * 5.681947e12) == pytest.approx(12.0)


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda c: fsx_capacity_for(1.0, "s3", c), "tier"),
        (lambda c: fsx_capacity_for(1.0, "fsx-9000", c), "tier"),
        (lambda c: fsx_capacity_for(-1.0, "fsx-persistent-250", c), "required_gbps"),
        (lambda c: fsx_throughput_gbps(0.0, "fsx-persistent-250", c), "fsx_capacity_tib"),
        (lambda c: dataload_requirement(-5.0), "tokens_per_s"),
        (lambda c: dataload_requirement(5.0, bytes_per_token=0), "bytes_per_token"),
        (lambda c: dataload_requirement(5.0, read_amplification=0.5), "read_amplification"),
        (lambda c: bytes_per_token_for_vocab(0), "vocab_size"),
    ],
)
def test_bad_input(catalog: Catalog, call: object, field: str) -> None:
    with pytest.raises(InputError) as err:
        call(catalog)  # type: ignore[operator]
    assert err.value.field == field
