"""Faults: when they strike, what they are, and what the node-health engine does about them.

Rates and cause shares come from the shared failure model (:func:`fmstack.perfmodel.failures.
load_failure_model`, Llama 3 Table 5 by default). Failures strike nodes of the pool uniformly (a series system:
fleet rate = per-node rate x nodes); planned maintenance arrives at the model's planned rate. Each cause becomes
node signals that :class:`fmstack.observability.health.HealthEngine` turns into an action ([D] mapping):

- ``gpu``: a GPU fault of one Xid class drawn with Llama 3 Table 5's shares of the GPU rows
  (:mod:`fmstack.sim.gpu_faults`: faulty GPU -> Xid 79 and a GPU missing, reboot; HBM3 -> Xid 48 + 63 with a
  remap pending, reset; SRAM -> Xid 94 restart the job or 95 reset; GSP -> Xid 119, reset; silent data
  corruption -> diagnostics fail, replace; thermal -> slowdown, the job restarts). The engine escalates repeats
  within its recurrence window (:mod:`fmstack.sim.node_history`: 24 h; planned maintenance not counted).
  Until session 17 every GPU fault was Xid 79 and a reboot;
- ``dependency``, ``network``, ``unknown``: Xid 13 (application error) -> restart the job, the node is fine;
- ``host``, ``unplanned_maintenance``: no GPU signal exists for them; the node is replaced (node_loss in the
  failure model).

Repair times ([D], change with :class:`RepairTimes`): GPU reset 10 min, reboot with health checks 30 min. A
replacement takes the recovery mode's ``replacement_s`` (:data:`fmstack.perfmodel.goodput.RECOVERY_DEFAULTS`:
1 h, AWS News Blog Dec 2025, recovery "can take up to an hour" on self-managed clusters), the one value the
analytic goodput model uses too. Detection delay: the recovery mode's ``detection_s`` (Slurm's SlurmdTimeout
300 s for checkpoint-restart, slurm.conf.5).
"""

from __future__ import annotations

from dataclasses import dataclass

from fmstack.observability.health import Action, HealthEngine, NodeSignals
from fmstack.sim.gpu_faults import GpuFaultClass


@dataclass(frozen=True, kw_only=True, slots=True)
class RepairTimes:
    """Seconds a node is out for each action."""

    reset_s: float = 600.0
    reboot_s: float = 1800.0
    maintenance_s: float = 1800.0
    """Planned maintenance (firmware, configuration): like a reboot."""

    def out_s(self, action: Action, replacement_s: float) -> float:
        """Seconds out for ``action``; ``replacement_s``: the recovery mode's replacement time."""
        return {
            Action.NONE: 0.0,
            Action.RESTART_JOB: 0.0,
            Action.RESET_GPU: self.reset_s,
            Action.REBOOT_NODE: self.reboot_s,
            Action.REPLACE_NODE: replacement_s,
        }[action]


def signals_for(
    category: str, gpu_fault: GpuFaultClass | None, gpus_per_node: int, resets: int, reboots: int, restarts: int = 0
) -> NodeSignals | None:
    """Node signals of a failure cause (``gpu_fault``: the Xid class of a ``gpu`` failure), or None when no health
    signal describes it (host hardware)."""
    if category == "gpu":
        if gpu_fault is None:
            raise ValueError("a gpu failure needs its Xid class (fmstack.sim.gpu_faults)")
        return gpu_fault.signals(gpus_per_node, resets, reboots, restarts)
    if category in ("host", "unplanned_maintenance"):
        return None
    return NodeSignals(xids=[13], restarts_in_window=restarts, resets_in_window=resets, reboots_in_window=reboots)


def decide(
    engine: HealthEngine,
    category: str,
    gpu_fault: GpuFaultClass | None,
    gpus_per_node: int,
    resets: int,
    reboots: int,
    restarts: int = 0,
) -> Action:
    """The health engine's action for a failure of ``category`` on a node with this history (counts in the
    recurrence window). A failure the engine takes no node action for (thermal slowdown) still stopped the job: it
    restarts."""
    action = engine_action(engine, category, gpu_fault, gpus_per_node, resets, reboots, restarts)
    return Action.RESTART_JOB if action == Action.NONE else action


def engine_action(
    engine: HealthEngine,
    category: str,
    gpu_fault: GpuFaultClass | None,
    gpus_per_node: int,
    resets: int,
    reboots: int,
    restarts: int = 0,
) -> Action:
    """The engine's own action (NONE for a thermal slowdown; REPLACE_NODE for a cause no signal describes): what
    the node's history records (:mod:`fmstack.sim.node_history`)."""
    signals = signals_for(category, gpu_fault, gpus_per_node, resets, reboots, restarts)
    return Action.REPLACE_NODE if signals is None else engine.decide(signals).action
