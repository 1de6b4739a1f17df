"""The fleet twin on UltraServer nodes (GB200 NVL72: 18 nodes of 4 GPUs per NVLink domain).

Review, 2026-11-24: ``simulate --instance p6e-gb200.36xlarge`` failed on its first generated job of 32 nodes
("num_nodes(32) must be a multiple of 18"); a job that is not a whole number of domains now runs at the speed per
GPU of the next whole number of domains (sim/speed.py).
"""

from __future__ import annotations

import pytest

from fmstack.catalog.loader import load_catalog
from fmstack.sim.config import SimConfig
from fmstack.sim.metrics import summarise
from fmstack.sim.simulator import Simulator
from fmstack.sim.speed import PerfModelSpeed

GB200 = "p6e-gb200.36xlarge"


def test_partial_ultraserver_job_runs_at_the_whole_domains_rate_per_gpu() -> None:
    speed = PerfModelSpeed(load_catalog(), GB200)
    assert speed.gpn == 4 and speed.nodes_per_domain == 18
    whole = speed.tokens_per_s("llama3.1-70b", 36 * 4, True)  # two whole NVL72 domains
    assert speed.tokens_per_s("llama3.1-70b", 32 * 4, True) == pytest.approx(whole * 32 / 36, rel=1e-12)
    # inside one domain the model takes part of it directly: 14 nodes are not scaled from 18
    part = speed.tokens_per_s("llama3.1-70b", 14 * 4, True)
    assert part > 0 and part != pytest.approx(speed.tokens_per_s("llama3.1-70b", 18 * 4, True) * 14 / 18)


def test_simulate_a_gb200_fleet_with_generated_jobs() -> None:
    cfg = SimConfig(instance=GB200, nodes=72, days=2.0)
    sim = Simulator(cfg, load_catalog()).run()
    sizes = {j.num_gpus for j in sim.jobs.values()}
    assert any(g > 72 and (g // 4) % 18 for g in sizes)  # the trace has jobs of partial UltraServers
    assert summarise(sim)["jobs"]["completed"] > 0


def test_a_fleet_named_by_its_ultraserver_places_jobs_on_part_of_one() -> None:
    """A 2-node job on a fleet of u-p6e-gb200x36 UltraServers (9 nodes each) was refused as not whole UltraServers."""
    speed = PerfModelSpeed(load_catalog(), "u-p6e-gb200x36")
    assert speed.nodes_per_domain == 9
    assert speed.tokens_per_s("llama3.1-8b", 2 * 4, True) > 0
    cfg = SimConfig(instance="u-p6e-gb200x36", nodes=36, days=1.0, jobs=100)
    assert summarise(Simulator(cfg, load_catalog()).run())["jobs"]["completed"] > 0
