"""The health engine's recurrence window in the fleet twin (session 17): a node's earlier restarts, resets and
reboots count only inside the window ending at a fault (24 h: NVIDIA NVSentinel's repeated-Xid rules look back
86,400 s), planned maintenance does not count, and a replacement clears the node. Scripted node histories run
through the real engine (fmstack.observability.health) inside the simulator, with and without the window.

The engine's thresholds (HealthPolicy defaults): a restart-job signal with >= 1 restart in the window -> reset; a
reset with >= 2 resets -> reboot (and with >= 1 reboot as well -> replace); a reboot with >= 1 reboot -> replace.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest

from fmstack.catalog import Catalog
from fmstack.observability.health import Action, HealthPolicy
from fmstack.sim.config import SimConfig
from fmstack.sim.gpu_faults import GpuFaultMix
from fmstack.sim.metrics import summarise
from fmstack.sim.node_history import NodeHistory, WindowCounts
from fmstack.sim.simulator import Simulator
from fmstack.sim.state import FAULT
from fmstack.sim.workload import Job
from tests.sim.conftest import FlatSpeed

H, DAY = 3600.0, 86400.0


class _Scripted(Simulator):
    """Faults at given times on given nodes, nothing else: ``script`` rows (time_s, node, category, Xid class)."""

    script: tuple[tuple[float, int, str, str | None], ...] = ()
    done = 0

    def _next_fault(self) -> float:
        return self.script[self.done][0] if self.done < len(self.script) else 1e12

    def _next_maint(self) -> float:
        return 1e12

    def _on_fault(self, _: Any) -> None:
        _, node, category, name = self.script[self.done]
        self.done += 1
        self.env.schedule(self._next_fault(), FAULT)
        if name is not None:  # the class drawn: the named one, the others with no weight
            self.gpu_classes = tuple(replace(k, count=float(k.name == name)) for k in GpuFaultMix().classes())
        self._strike(node, category, planned=category == "planned_maintenance")


Script = tuple[tuple[float, int, str, str | None], ...]


def _run(catalog: Catalog, script: Script, window_h: float) -> tuple[list[str], dict[str, Any]]:
    cls = type("Run", (_Scripted,), {"script": script})
    cfg = SimConfig(nodes=2, days=30.0, faults="llama3", seed=1, health_window_h=window_h)
    job = Job(job_id=1, submit_s=0.0, num_gpus=8, work_s=1.0, time_limit_s=3600.0)
    sim = cls(cfg, catalog, speed=FlatSpeed(), jobs=[job]).run()
    assert [f["time_s"] for f in sim.fault_log] == [t for t, *_ in script]  # every scripted fault struck
    return [f["action"] for f in sim.fault_log], summarise(sim)


GSP, XID79 = "gsp_xid119", "faulty_gpu_xid79"
RESET, REBOOT, REPLACE, RESTART = "RESET_GPU", "REBOOT_NODE", "REPLACE_NODE", "RESTART_JOB"


def test_a_reset_on_day_1_does_not_escalate_a_fault_on_day_20(catalog: Catalog) -> None:
    # node 0: three Xid 119 on day 1 (two hours apart), an Xid 79 on day 20, an Xid 119 two hours later
    script: Script = ((1 * H, 0, "gpu", GSP), (3 * H, 0, "gpu", GSP), (5 * H, 0, "gpu", GSP),
                      (20 * DAY, 0, "gpu", XID79), (20 * DAY + 2 * H, 0, "gpu", GSP))  # fmt: skip
    # 24 h: reset, reset, then 2 resets in the window -> reboot; on day 20 the window is empty: reboot, then reset
    with_window, s = _run(catalog, script, 24.0)
    assert with_window == [RESET, RESET, REBOOT, REBOOT, RESET]
    assert s["failures"]["escalations"] == {"RESET_GPU->REBOOT_NODE": 1}
    assert s["config"]["health_window_h"] == 24.0
    # the whole run (the twin before session 17): day 1's reboot is still counted on day 20 -> replace, which
    # clears the node, so the last reset is a reset again
    whole_run, s = _run(catalog, script, math.inf)
    assert whole_run == [RESET, RESET, REBOOT, REPLACE, RESET]
    assert s["failures"]["escalations"] == {"REBOOT_NODE->REPLACE_NODE": 1, "RESET_GPU->REBOOT_NODE": 1}
    assert s["config"]["health_window_h"] is None  # JSON has no infinity: null is the whole run


def test_planned_maintenance_is_not_a_reboot_in_the_window(catalog: Catalog) -> None:
    # a planned reboot, then an Xid 79 two hours later: a reboot, not a replacement (before session 17: replace)
    script: Script = ((1 * H, 0, "planned_maintenance", None), (3 * H, 0, "gpu", XID79))
    for window_h in (24.0, math.inf):
        actions, s = _run(catalog, script, window_h)
        assert actions == [REBOOT, REBOOT]
        assert s["failures"]["by_category"] == {"gpu": 1, "planned_maintenance": 1}
        assert s["failures"]["escalations"] == {}


def test_restarts_escalate_in_the_window_and_thermal_restarts_do_not_count(catalog: Catalog) -> None:
    # node 0: two Xid 13 (network faults) 2 h apart -> restart, then reset ("repeated on same GPU -> diag"); a third
    # 25 h after the second: the window holds no restart (the reset it became is no restart) -> restart.
    # node 1: a thermal slowdown (the engine takes no action; the job restarts) then an Xid 13: a restart
    script: Script = ((1 * H, 0, "network", None), (3 * H, 0, "network", None), (28 * H, 0, "network", None),
                      (2 * H, 1, "gpu", "thermal_slowdown"), (4 * H, 1, "network", None))  # fmt: skip
    ordered: Script = tuple(sorted(script))
    actions, s = _run(catalog, ordered, 24.0)
    by_time = dict(zip([t for t, *_ in ordered], actions, strict=True))
    assert [by_time[t] for t, *_ in script] == [RESTART, RESET, RESTART, RESTART, RESTART]
    assert s["failures"]["escalations"] == {"RESTART_JOB->RESET_GPU": 1}


def test_window_bounds_are_inclusive_and_replacement_clears() -> None:
    h = NodeHistory(1, DAY)
    h.record(0, 0.0, Action.RESET_GPU)
    h.record(0, 10.0, Action.REBOOT_NODE)
    h.record(0, 20.0, Action.NONE)  # a thermal slowdown: not counted
    assert h.counts(0, DAY) == WindowCounts(restarts=0, resets=1, reboots=1)  # t = now - window: in (NVSentinel $gte)
    assert h.counts(0, DAY + 5.0) == WindowCounts(reboots=1)
    h.record(0, DAY + 6.0, Action.RESTART_JOB)
    assert h.counts(0, DAY + 6.0) == WindowCounts(restarts=1, reboots=1)
    h.record(0, DAY + 7.0, Action.REPLACE_NODE)
    assert h.counts(0, DAY + 8.0) == WindowCounts()


def test_the_policy_field_is_the_default_window() -> None:
    assert HealthPolicy().recurrence_window_s == 86_400.0  # NVSentinel RepeatedXIDErrorOnSameGPU: 86,400 s
    assert SimConfig().health_window_h == 24.0
    with pytest.raises(ValueError, match="recurrence_window_s"):
        HealthPolicy(recurrence_window_s=0.0)
