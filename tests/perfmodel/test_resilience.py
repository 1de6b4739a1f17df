"""The resilience plan for Llama 3.1 405B on 16,384 H100 (2,048 p5.48xlarge), worked by hand (docs/resilience.md)."""

from __future__ import annotations

import pytest

from fmstack.catalog import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel.resilience import resilience_json

# Llama 3 paper (arXiv 2407.21783) sec. 3.3.2 / Table 4: 400 TFLOP/s per GPU on 16,384 H100, 16M-token batches.
# A stand-in for the training step model: tokens/s = 16384 x 400e12 / (6 x 405.85e9) = 2.691e6.
TOKENS_PER_S = 16384 * 400e12 / (6 * 405_853_388_800)
STEP_S = 16 * 2**20 / TOKENS_PER_S
TRAIN_S = 15.6e12 / TOKENS_PER_S  # 15.6T tokens


def _plan(catalog: Catalog, **kwargs: object) -> dict[str, object]:
    cluster = build_cluster(catalog, "p5.48xlarge", 2048)
    return resilience_json(
        model=catalog.model("llama3.1-405b"),
        cluster=cluster,
        catalog=catalog,
        step_time_s=STEP_S,
        train_time_s=TRAIN_S,
        tokens_per_s=TOKENS_PER_S,
        **kwargs,
    )


def test_llama405b_worked_example(catalog: Catalog) -> None:
    j = _plan(catalog)
    for key in (
        "checkpoint_size_gib",
        "checkpoint_write_s",
        "checkpoint_interval_s",
        "goodput",
        "time_to_train_s",
        "fsx_capacity_tib_needed",
    ):
        assert key in j
    assert j["checkpoint_size_gib"] == pytest.approx(5_681_947_443_200 / 2**30)
    # M = 54 x 86400 / 419 = 11,135.1 s; async save to FSx: write within 0.01 x M / 1.5 = 74.23 s
    # -> 5681.95 GB / 74.23 s = 76.54 GB/s at 1000 MB/s/TiB = 76.54 TiB -> 32 x 2.4 = 76.8 TiB
    assert j["mtbf_s"] == pytest.approx(54 * 86400 / 419)
    assert j["checkpoint_write_target_s"] == pytest.approx(0.01 * 54 * 86400 / 419 / 1.5)
    assert j["fsx_capacity_tib_needed"] == pytest.approx(76.8)
    assert j["fsx_capacity_tib_by"] == pytest.approx({"read": 1.2, "write": 76.8, "space": 12.0})
    # 5.6819e12 B / 76.8 GB/s + 1 ms latency = 73.98 s in the background; the interval cannot be shorter
    assert j["checkpoint_write_s"] == pytest.approx(5_681_947_443_200 / 76.8e9 + 0.001)
    assert j["checkpoint_interval_s"] >= j["checkpoint_background_s"]  # type: ignore[operator]
    assert j["bytes_per_token"] == 4  # vocab 128,256 needs int32
    assert 0 < j["goodput"] < 1  # type: ignore[operator]
    assert j["time_to_train_s"] > TRAIN_S  # type: ignore[operator]
    lost = j["lost_time_s"]
    assert isinstance(lost, dict)
    assert sum(lost.values()) == pytest.approx(j["time_to_train_s"] - TRAIN_S)  # type: ignore[operator]


def test_given_capacity_is_used_and_checked(catalog: Catalog) -> None:
    j = _plan(catalog, fsx_capacity_tib=240.0)
    assert j["fsx_capacity_tib_used"] == 240.0
    assert j["checkpoint_write_s"] == pytest.approx(5_681_947_443_200 / 240e9 + 0.001)
    with pytest.raises(InputError) as err:
        _plan(catalog, fsx_capacity_tib=0.0)
    assert err.value.field == "fsx_capacity_tib"


def test_spares_and_recovery_mode_raise_goodput(catalog: Catalog) -> None:
    base = _plan(catalog)
    spares = _plan(catalog, recovery="auto_resume", spares=16)
    assert spares["goodput"] > base["goodput"]  # type: ignore[operator]
    assert spares["lost_time_s"]["replacement_wait"] < base["lost_time_s"]["replacement_wait"]  # type: ignore[index]
