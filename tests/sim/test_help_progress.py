"""`fmstack simulate --help` names every choice of --policy, --recovery and --faults (it said only "Scheduling
policy." and "Recovery mode."), and a run reports its progress in simulated time without changing its output."""

from __future__ import annotations

import json

from click.testing import CliRunner

from fmstack.catalog import Catalog
from fmstack.cli.sim_cmd import simulate
from fmstack.orchestration.policies import POLICIES
from fmstack.perfmodel.failures import failure_model_names
from fmstack.perfmodel.goodput import RecoveryMode
from fmstack.sim.config import SimConfig
from fmstack.sim.metrics import summarise
from fmstack.sim.simulator import Simulator
from tests.sim.conftest import FlatSpeed


def test_help_names_every_choice() -> None:
    text = " ".join(CliRunner().invoke(simulate, ["--help"]).output.split())
    for name in [*POLICIES, *(m.value.replace("_", "-") for m in RecoveryMode), *failure_model_names()]:
        assert name in text, name
    assert "Random seed" in text


def test_progress_is_simulated_time_and_changes_nothing(catalog: Catalog) -> None:
    cfg = SimConfig(nodes=8, days=2.5, jobs=120, seed=3)
    seen: list[float] = []
    with_bar = summarise(Simulator(cfg, catalog, speed=FlatSpeed()).run(seen.append))
    without = summarise(Simulator(cfg, catalog, speed=FlatSpeed()).run())
    assert json.dumps(with_bar) == json.dumps(without)
    # every simulated hour (samples at 0, 3,600, ..., 60 h = the horizon, events at the horizon included), then
    # the end of the run
    assert seen == [3600.0 * k for k in range(61)] + [2.5 * 86400.0]


def test_cli_prints_no_progress_when_stderr_is_not_a_terminal() -> None:
    r = CliRunner().invoke(simulate, ["--nodes", "4", "--days", "1", "--jobs", "20", "--json"])
    assert r.exit_code == 0, r.output
    json.loads(r.output)  # stdout is the JSON alone
