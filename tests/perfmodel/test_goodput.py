"""Failure models, Young/Daly intervals and goodput: cited and hand-checked numbers, and invariants."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fmstack.catalog import Catalog, load_catalog
from fmstack.catalog.topology import Cluster, build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel.checkpoint import CheckpointIO, Transfer, checkpoint_io, checkpoint_size
from fmstack.perfmodel.failures import FailureModel, load_failure_model
from fmstack.perfmodel.goodput import (
    GoodputEstimate,
    RecoveryMode,
    RecoveryTimes,
    daly_interval_s,
    estimate_goodput,
    prob_no_spare,
    young_interval_s,
)

DAY_S = 86400.0
CAT = load_catalog()  # read-only; Hypothesis tests cannot take function-scoped fixtures
LLAMA3 = load_failure_model()
SIZE_405B = checkpoint_size(CAT.model("llama3.1-405b"))


def test_young_interval_worked_case() -> None:
    # failure-rates.md: M = 185.6 min, C = 1 min -> sqrt(2 * 1 * 185.6) = sqrt(371.2) = 19.27 min
    assert young_interval_s(185.6 * 60, 60) / 60 == pytest.approx(19.2666, abs=1e-4)
    assert round(young_interval_s(185.6 * 60, 60) / 60, 1) == 19.3


def test_daly_interval_worked_case() -> None:
    # Daly (2006): C / 2M = 1 / 371.2 = 0.0026940, sqrt = 0.0519034;
    # 19.26655 * (1 + 0.0519034 / 3 + 0.0026940 / 9) - 1 = 19.26655 * 1.0176005 - 1 = 18.6057 min
    assert daly_interval_s(185.6 * 60, 60) / 60 == pytest.approx(18.6057, abs=1e-4)
    # restart time does not move Daly's optimum; C >= 2M gives M
    assert daly_interval_s(185.6 * 60, 60, restart_s=600) == daly_interval_s(185.6 * 60, 60)
    assert daly_interval_s(100.0, 250.0) == 100.0


def test_llama3_failure_model_reproduces_the_published_counts() -> None:
    # 16,384 GPUs (2,048 p5 nodes) x 54 days: 419 unexpected, 466 with the 47 planned (arXiv 2407.21783 Table 5)
    assert LLAMA3.expected_failures(16384, 54 * DAY_S, gpus_per_node=8) == pytest.approx(419)
    planned = load_failure_model(include_planned=True)
    assert planned.expected_failures(16384, 54 * DAY_S, gpus_per_node=8) == pytest.approx(466)
    # job MTBF 54 x 24 h / 419 = 3.093 h = 185.6 min; per node 419 / (2048 x 54) x 1000 = 3.79 per 1000 node-days
    assert LLAMA3.mtbf_s(16384, 8) / 60 == pytest.approx(185.585, abs=1e-3)
    assert LLAMA3.failures_per_1000_node_days == pytest.approx(3.7887, abs=1e-4)
    # node-loss causes: GPU 268 + unplanned host maintenance 32 + host 21 = 321 of 419
    assert LLAMA3.node_loss_share == pytest.approx(321 / 419)


def test_gpu_causes_scale_with_gpus_and_host_causes_with_nodes() -> None:
    # 16,384 GPUs on 4-GPU nodes = 4,096 nodes: the 268 GPU failures stay, the 151 others double -> 570
    assert LLAMA3.expected_failures(16384, 54 * DAY_S, gpus_per_node=4) == pytest.approx(268 + 2 * 151)


def test_meta_rsc1_matches_kokolis_projection() -> None:
    # 6.50 failures per 1000 node-days at 2,048 nodes -> 1 / (6.5e-3 x 2048) days = 1.80 h (Kokolis et al. 1.8 h)
    assert load_failure_model("meta-rsc1").mtbf_s(16384, 8) / 3600 == pytest.approx(1.8029, abs=1e-4)


def test_overrides_and_bad_mtbf() -> None:
    assert load_failure_model(node_mtbf_h=1000).mtbf_s(800, 8) == pytest.approx(1000 / 100 * 3600)
    assert load_failure_model(job_mtbf_s=7200).mtbf_s(16384) == 7200
    for kwargs in ({"node_mtbf_h": -5.0}, {"job_mtbf_s": 0.0}, {"node_mtbf_h": math.nan}):
        with pytest.raises(InputError) as err:
            load_failure_model(**kwargs)  # type: ignore[arg-type]
        assert err.value.field == "mtbf"
    with pytest.raises(InputError) as err:
        young_interval_s(-1.0, 60)
    assert err.value.field == "mtbf"
    with pytest.raises(InputError, match="known: llama3"):
        load_failure_model("nope")


def test_sampling_is_seeded_and_follows_the_shares() -> None:
    a = [LLAMA3.sample_interarrival_s(np.random.default_rng(7), 16384, 8) for _ in range(3)]
    b = [LLAMA3.sample_interarrival_s(np.random.default_rng(7), 16384, 8) for _ in range(3)]
    assert a == b
    rng = np.random.default_rng(1)
    cats = [LLAMA3.sample_category(rng) for _ in range(2000)]
    assert set(cats) <= set(LLAMA3.category_shares)
    assert "gpu" in cats


def _cluster(nodes: int) -> Cluster:
    return build_cluster(CAT, "p5.48xlarge", nodes)


def _fixed_io(blocking_s: float, read_s: float = 0.0, background_s: float = 0.0) -> CheckpointIO:
    write = Transfer(tier="fsx-persistent-1000", op="write", bytes_total=1.0, time_s=blocking_s, limits_gbps={"x": 1.0})
    restore = Transfer(tier="fsx-persistent-1000", op="read", bytes_total=1.0, time_s=read_s, limits_gbps={"x": 1.0})
    return CheckpointIO(
        size=SIZE_405B,
        tier="fsx-persistent-1000",
        durable_tier=None,
        write=write,
        durable_write=None,
        restore=restore,
        async_save=False,
        blocking_s=blocking_s,
        background_s=background_s,
        fsx_capacity_tib=None,
        durable=True,
    )


def test_goodput_is_dalys_wall_time_by_hand() -> None:
    # Daly's (2006) complete model with M = 100 s, R = 4 + 6 = 10 s, tau = 20 s, delta = 5 s, U = 1000 s:
    # W = 100 e^0.1 (e^0.25 - 1) 1000 / 20 = 100 x 1.105171 x 0.284025 x 50 = 1569.48 s
    fm = FailureModel(name="t", source="test", failures_per_node_hour=1.0, gpus_per_node=8, job_mtbf_s=100.0)
    times = RecoveryTimes(detection_s=4.0, restart_s=6.0, replacement_s=0.0, rollback="checkpoint", source="test")
    est = estimate_goodput(
        step_time_s=1.0,
        num_gpus=8,
        cluster=_cluster(1),
        checkpoint=_fixed_io(5.0),
        failure_model=fm,
        recovery=RecoveryMode.checkpoint_restart,
        interval_s=20.0,
        train_time_s=1000.0,
        recovery_times=times,
    )
    assert est.time_to_train_s == pytest.approx(1569.4832, abs=1e-3)
    assert est.goodput == pytest.approx(1000 / 1569.4832, abs=1e-6)
    assert est.checkpoint_overhead_s == pytest.approx(1000 / 20 * 5)
    assert est.expected_failures == pytest.approx(15.694832, abs=1e-5)
    assert est.checkpoint_interval_steps == 20


def _breakdown_sums(est: GoodputEstimate) -> None:
    parts = (
        est.checkpoint_overhead_s
        + est.lost_progress_s
        + est.detection_restart_s
        + est.checkpoint_read_s
        + est.replacement_wait_s
    )
    assert parts == pytest.approx(est.lost_s, rel=1e-9, abs=1e-6)


def _estimate(
    nodes: int, io: CheckpointIO, mode: RecoveryMode, spares: int = 0, interval_s: float | None = None
) -> GoodputEstimate:
    cluster = _cluster(nodes)
    return estimate_goodput(
        step_time_s=6.0,
        num_gpus=cluster.num_gpus,
        cluster=cluster,
        checkpoint=io,
        failure_model=LLAMA3,
        recovery=mode,
        spares=spares,
        interval_s=interval_s,
        train_time_s=30 * DAY_S,
    )


def _fsx_io(capacity_tib: float, async_save: bool, nodes: int = 512) -> CheckpointIO:
    return checkpoint_io(
        SIZE_405B,
        _cluster(nodes),
        tier="fsx-persistent-1000",
        fsx_capacity_tib=capacity_tib,
        async_save=async_save,
        catalog=CAT,
    )


MODES = st.sampled_from(list(RecoveryMode))


@settings(max_examples=40, deadline=None)
@given(nodes=st.integers(1, 4096), more=st.integers(1, 4096), mode=MODES, spares=st.integers(0, 8))
def test_goodput_falls_as_nodes_rise(nodes: int, more: int, mode: RecoveryMode, spares: int) -> None:
    io = _fixed_io(blocking_s=30.0, read_s=60.0)
    fixed_a, fixed_b = (_estimate(n, io, mode, spares, interval_s=600.0) for n in (nodes, nodes + more))
    assert fixed_b.goodput < fixed_a.goodput
    opt_a, opt_b = (_estimate(n, io, mode, spares) for n in (nodes, 2 * nodes + more))
    assert opt_b.goodput < opt_a.goodput
    for est in (fixed_a, fixed_b, opt_a, opt_b):
        assert 0.0 < est.goodput <= 1.0
        assert est.time_to_train_s >= est.ideal_s
        _breakdown_sums(est)


@settings(max_examples=30, deadline=None)
@given(cap=st.floats(6.0, 200.0), factor=st.floats(1.1, 10.0), async_save=st.booleans(), mode=MODES)
def test_goodput_rises_with_faster_checkpoints(cap: float, factor: float, async_save: bool, mode: RecoveryMode) -> None:
    slow, fast = _fsx_io(cap, async_save), _fsx_io(cap * factor, async_save)
    assert fast.write_s < slow.write_s
    opt_fast, opt_slow = _estimate(512, fast, mode), _estimate(512, slow, mode)
    interval = max(slow.background_s, 1200.0)
    fixed_fast, fixed_slow = (_estimate(512, io, mode, interval_s=interval) for io in (fast, slow))
    if mode is RecoveryMode.checkpointless:
        # Peers, not checkpoints, restore the state: faster storage only lets the default interval shrink
        # towards Daly's, so goodput may drop by at most the extra stalls (blocking / interval).
        assert opt_fast.goodput >= opt_slow.goodput - fast.blocking_s / opt_fast.checkpoint_interval_s
        assert fixed_fast.goodput >= fixed_slow.goodput
        return
    assert opt_fast.goodput >= opt_slow.goodput
    assert fixed_fast.goodput > fixed_slow.goodput


@settings(max_examples=30, deadline=None)
@given(nodes=st.integers(16, 4096), spares=st.integers(0, 32), mode=MODES)
def test_goodput_rises_with_spares(nodes: int, spares: int, mode: RecoveryMode) -> None:
    io = _fixed_io(blocking_s=30.0, read_s=60.0)
    a, b = _estimate(nodes, io, mode, spares), _estimate(nodes, io, mode, spares + 1)
    assert b.goodput >= a.goodput
    assert b.replacement_wait_s <= a.replacement_wait_s
    if spares == 0:
        assert b.goodput > a.goodput


def test_prob_no_spare_is_a_poisson_tail() -> None:
    assert prob_no_spare(0, 3.0) == 1.0
    assert prob_no_spare(1, 0.5) == pytest.approx(1 - math.exp(-0.5))
    assert prob_no_spare(2, 0.5) == pytest.approx(1 - math.exp(-0.5) * 1.5)


def test_recovery_modes_rank_as_their_costs() -> None:
    io = _fsx_io(100.0, async_save=True)
    g = {m: _estimate(2048, io, m).goodput for m in RecoveryMode}
    assert g[RecoveryMode.checkpointless] > g[RecoveryMode.auto_resume] > g[RecoveryMode.checkpoint_restart]
    assert g[RecoveryMode.elastic] > g[RecoveryMode.auto_resume]  # runs a replica short instead of waiting


def test_interval_respects_background_write_and_whole_steps() -> None:
    io = _fsx_io(20.0, async_save=True)  # 5.68e12 B / 20 GB/s = 284 s in the background
    est = _estimate(512, io, RecoveryMode.auto_resume)
    assert est.checkpoint_interval_s >= io.background_s
    assert est.checkpoint_interval_s == pytest.approx(est.checkpoint_interval_steps * 6.0)
    with pytest.raises(InputError) as err:
        _estimate(512, io, RecoveryMode.auto_resume, interval_s=60.0)
    assert err.value.field == "interval_s"


def test_local_only_checkpoint_cannot_restart_after_node_loss(catalog: Catalog) -> None:
    io = checkpoint_io(
        SIZE_405B, _cluster(512), tier="local-nvme", fsx_capacity_tib=None, async_save=True, catalog=catalog
    )
    with pytest.raises(InputError, match="lost with its node"):
        _estimate(512, io, RecoveryMode.checkpoint_restart)
    assert 0 < _estimate(512, io, RecoveryMode.checkpointless).goodput < 1


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"recovery": "pray"}, "recovery"),
        ({"spares": -1}, "spares"),
        ({"step_time_s": 0.0}, "step_time_s"),
        ({"train_time_s": -1.0}, "train_time_s"),
        ({"num_gpus": 10**6}, "num_gpus"),
    ],
)
def test_bad_goodput_inputs(kwargs: dict[str, object], field: str) -> None:
    cluster = _cluster(64)
    args: dict[str, object] = {
        "step_time_s": 6.0,
        "num_gpus": cluster.num_gpus,
        "cluster": cluster,
        "checkpoint": _fixed_io(10.0),
        "failure_model": LLAMA3,
        "recovery": "auto_resume",
        "train_time_s": DAY_S,
    }
    args.update(kwargs)
    with pytest.raises(InputError) as err:
        estimate_goodput(**args)  # type: ignore[arg-type]
    assert err.value.field == field


def test_user_failure_file_and_its_errors(tmp_path: Path) -> None:
    good = tmp_path / "rates.yaml"
    good.write_text(
        "models:\n  mine:\n    source: our fleet, 2025\n    gpus_per_node: 4\n    failures_per_1000_node_days: 24\n",
        encoding="utf-8",
    )
    # 24 per 1000 node-days = 1e-3 per node-hour; 1,000 nodes of 4 GPUs -> MTBF 1 h
    assert load_failure_model("mine", path=good).mtbf_s(4000, 4) == pytest.approx(3600.0)
    bad = tmp_path / "bad.yaml"
    bad.write_text("models:\n  mine:\n    source: x\n    gpus_per_node: 4\n", encoding="utf-8")
    with pytest.raises(InputError, match="failures_per_1000_node_days") as err:
        load_failure_model("mine", path=bad)
    assert err.value.field == "failure_model"
    with pytest.raises(InputError, match="cannot read"):
        load_failure_model("mine", path=tmp_path / "missing.yaml")


def test_elastic_job_of_one_replica_waits_like_the_others() -> None:
    io = _fixed_io(blocking_s=30.0, read_s=60.0)
    one_node = {m: _estimate(1, io, m) for m in (RecoveryMode.elastic, RecoveryMode.auto_resume)}
    assert one_node[RecoveryMode.elastic].goodput == pytest.approx(one_node[RecoveryMode.auto_resume].goodput)
