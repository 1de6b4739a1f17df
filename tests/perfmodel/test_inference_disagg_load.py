"""A disaggregated split's pools and the load they take (session 13 review): a rate above a pool's capacity is an
InputError naming the pool and its capacity (the simulation used to print finite percentiles of a queue that grows
without bound), a rate near it has no steady state, and the run's warm-up grows with the busier pool's
relaxation time."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fmstack.catalog import Catalog
from fmstack.catalog.topology import Cluster, build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel.inference import ServeConfig, deployment, max_concurrency
from fmstack.perfmodel.inference_disagg import prefill_alone_s
from fmstack.perfmodel.inference_disagg_load import PoolCapacity, check_split_load, pool_capacity, split_warmup
from fmstack.perfmodel.inference_plan_disagg import SplitRun, run_split
from fmstack.perfmodel.inference_step import step_time

# Llama 3.1 70B TP 2 fp8 on p5, 8192/256 tokens: the docs' split (6 prefill + 1 decode replicas at 5 req/s)
CFG = ServeConfig(tp=2, precision="fp8", input_len=8192, output_len=256, max_num_tokens=2048)


@pytest.fixture(scope="module")
def cap(catalog: Catalog) -> PoolCapacity:
    d = deployment(catalog.model("llama3.1-70b"), build_cluster(catalog, "p5.48xlarge", 1), CFG)
    return pool_capacity(d, CFG, d, CFG)


def _run(catalog: Catalog, qps: float, p: int, dec: int) -> SplitRun:
    def cluster_of(name: str, nodes: int) -> Cluster:
        return build_cluster(catalog, name, nodes)

    return run_split(cluster_of, catalog.model("llama3.1-70b"), CFG, "p5.48xlarge", qps, p, dec, 0)


def test_pool_capacity_by_hand(catalog: Catalog, cap: PoolCapacity) -> None:
    """Prefill: an 8192-token prompt is four full 2048-token iterations, so a busy replica finishes one prompt per
    ``prefill_alone_s`` (1.295 prompts/s). Decode: the 58 slots the KV pool holds, each request 256 decode steps at
    the mean context: ``58 / (256 x ITL(58))``, the best of every batch size (7.195 requests/s)."""
    d = deployment(catalog.model("llama3.1-70b"), build_cluster(catalog, "p5.48xlarge", 1), CFG)
    assert cap.prefill_rps == pytest.approx(1 / prefill_alone_s(d, CFG), rel=1e-9)
    assert cap.prefill_rps == pytest.approx(1.295, abs=1e-3)
    slots = max_concurrency(d, CFG)
    assert cap.decode_slots == slots == 58
    itl = float(step_time(d, float(slots), 8192 + 128).total_s)
    assert cap.decode_rps == pytest.approx(slots / (256 * itl), rel=1e-12)
    assert cap.decode_rps == pytest.approx(7.195, abs=1e-3)


def test_check_split_load_names_the_busier_pool(cap: PoolCapacity) -> None:
    util, pool = check_split_load(cap, 5.0, 6, 1)
    assert pool == "decode" and util == pytest.approx(5.0 / cap.decode_rps, rel=1e-12)  # 69.5 % vs 64.3 % prefill
    with pytest.raises(InputError) as err:
        check_split_load(cap, 9.0, 7, 1)  # prefill 7 x 1.295 = 9.07 takes it; decode 7.2 does not
    assert err.value.field == "qps"
    assert err.value.message.startswith("9 requests/s exceeds the decode pool's capacity, 1 replica(s) x 7.195 = "
                                        "7.195 requests/s")  # fmt: skip
    assert "prefill" not in err.value.message and "raise --decode-replicas or lower --qps" in err.value.message
    with pytest.raises(InputError, match=r"prefill pool's capacity, 6 replica\(s\) x 1\.295 = 7\.771 requests/s and "
                       r"the decode pool's capacity"):  # fmt: skip
        check_split_load(cap, 12.0, 6, 1)


def test_overloaded_split_is_refused_not_simulated(catalog: Catalog) -> None:
    """Just above the prefill pool's capacity (1.01 x 6 x 1.295 req/s): the old run printed percentiles of a queue
    that only grows; now an InputError naming the pool."""
    with pytest.raises(InputError, match=r"^qps: .* exceeds the prefill pool's capacity, 6 replica\(s\) x 1.295"):
        _run(catalog, 1.01 * 6 * 1.29516, 6, 2)


def test_near_capacity_split_has_no_steady_state(catalog: Catalog, cap: PoolCapacity) -> None:
    with pytest.raises(InputError) as err:
        _run(catalog, 0.99 * cap.decode_rps, 6, 1)
    assert err.value.field == "qps" and "keeps the decode pool 99.0 % busy" in err.value.message
    assert "raise --decode-replicas or lower --qps" in err.value.message


def test_split_warmup_by_hand() -> None:
    """Little's law sets the warm-up far from capacity (100 in flight: 100 warm-up, then max(1,000, 2 x 100)
    measured: as many as a colocated check measures, session 14; 200 before); at 90 % busy the relaxation time
    (341.76 requests, Morse) asks for 3 x -> 1,026 warm-up and 5 x -> 1,709 measured."""
    assert split_warmup(100.0, 0.5, "decode", 5.0) == (100, 1100)
    assert split_warmup(100.0, 0.9, "decode", 5.0) == (1026, 1026 + 1709)
    assert split_warmup(math.inf, 0.5, "prefill", 5.0) == (1000, 3000)
    assert np.isclose(0.9 / (1 - math.sqrt(0.9)) ** 2, 341.76, atol=0.01)


def test_the_docs_split_still_runs(catalog: Catalog) -> None:
    """6P:1D at 5 req/s: the decode pool 69.5 % busy (25 requests per relaxation time): Little's law sets the run."""
    run = _run(catalog, 5.0, 6, 1)
    assert run.warmup_requests < 1000 and run.result.completed > 0
