"""Each node fails at the failure model's rate for its GPU count: per-GPU causes scale with the GPUs (docs/
resilience.md section 4, node equivalents = s_gpu x GPUs / g_ref + (1 - s_gpu) x nodes). Review (session 13): the
twin struck every node at the 8-GPU reference node's rate, so 4-GPU GB200 nodes failed 419/285 = 1.47 x too often.

Llama 3 (Table 5): 419 unexpected interruptions on 2,048 nodes of 8 H100 in 54 days, 268 of them GPU causes. Per
reference node-hour: 419 / (2,048 x 54 x 24). A node of g GPUs: (268 x g / 8 + 151) / (2,048 x 54 x 24)."""

from __future__ import annotations

import pytest

from fmstack.catalog import Catalog
from fmstack.perfmodel.failures import load_failure_model
from fmstack.sim.config import SimConfig
from fmstack.sim.simulator import Simulator
from fmstack.sim.workload import Job
from tests.sim.conftest import FlatSpeed

REF_NODE_HOURS = 2048 * 54 * 24


@pytest.mark.parametrize(("gpus", "per_ref_node_hours"), [(8, 419.0), (4, 268 * 4 / 8 + 151), (1, 268 / 8 + 151)])
def test_node_rate_by_hand(gpus: int, per_ref_node_hours: float) -> None:
    m = load_failure_model("llama3")
    assert m.node_failures_per_hour(gpus) == pytest.approx(per_ref_node_hours / REF_NODE_HOURS, rel=1e-12)
    shares = m.node_category_shares(gpus)
    assert shares["gpu"] == pytest.approx(268 * gpus / 8 / per_ref_node_hours, rel=1e-12)
    assert shares["network"] == pytest.approx(35 / per_ref_node_hours, rel=1e-12)
    assert sum(shares.values()) == pytest.approx(1.0, rel=1e-12)


def test_a_reference_node_keeps_the_models_own_numbers() -> None:
    # 8-GPU nodes: the same rate and shares, exactly (so runs on 8-GPU instances give the same bytes as before)
    m = load_failure_model("llama3")
    assert m.node_failures_per_hour(8) == m.failures_per_node_hour
    assert m.node_category_shares(8) == m.category_shares
    # a model without per-GPU causes (Meta RSC: a rate per node-day) does not depend on the GPUs per node
    rsc = load_failure_model("meta-rsc1")
    assert rsc.node_failures_per_hour(4) == rsc.failures_per_node_hour == pytest.approx(6.5 / 1000 / 24)


class _Mean:
    """An RNG whose exponential draws are their mean: the twin's next fault comes after exactly 1 / rate."""

    def exponential(self, scale: float) -> float:
        return scale


@pytest.mark.parametrize(("instance", "nodes", "spares", "per_ref_node_hours"),
                         [("p6e-gb200.36xlarge", 18, 2, 268 * 4 / 8 + 151), ("p5.48xlarge", 4, 1, 419.0)])  # fmt: skip
def test_the_fleet_twin_strikes_at_the_nodes_rate(
    catalog: Catalog, instance: str, nodes: int, spares: int, per_ref_node_hours: float
) -> None:
    # the fleet's rate: every node (pool and spares; the thinning keeps the pool's) at the node's rate. GB200 (4
    # GPUs a node), 20 nodes: 285 x 20 / (2,048 x 54 x 24) per hour, a fault every 2,048 x 54 x 24 x 3,600 / 5,700 s
    cfg = SimConfig(instance=instance, nodes=nodes, spares=spares, days=1.0, faults="llama3")
    sim = Simulator(cfg, catalog, speed=FlatSpeed(),
                    jobs=[Job(job_id=1, submit_s=0.0, num_gpus=4, work_s=60.0, time_limit_s=3600.0)])  # fmt: skip
    sim.env.rng = _Mean()  # type: ignore[assignment]
    want_s = REF_NODE_HOURS * 3600.0 / (per_ref_node_hours * (nodes + spares))
    assert sim._next_fault() == pytest.approx(want_s, rel=1e-12)
