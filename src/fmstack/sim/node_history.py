"""Each node's fault history, counted in the health engine's recurrence window.

The engine (:class:`fmstack.observability.health.HealthEngine`) escalates a fault by the job restarts, GPU resets
and reboots the node's earlier faults caused *in the recurrence window* (``HealthPolicy.recurrence_window_s``,
24 h: NVIDIA NVSentinel's repeated-Xid rules look back 86,400 s). Until session 17 the fleet twin counted them over
the whole run, so a reset on day 1 and another on day 20 escalated as if both were in the window.

What is counted ([D] where marked):
- the engine's own actions on faults: RESTART_JOB, RESET_GPU, REBOOT_NODE, at the time of the fault;
- not planned maintenance: it is no fault, and the engine's escalation is about recurring faults (the Xid catalog's
  "repeated on same GPU -> diag", Xid 79 "repeat -> replace", orchestration-05-xid-ecc.md; NVSentinel's rules
  count unhealthy events only). Until session 17 a planned reboot followed by an Xid 79 replaced the node;
- not the job restart a thermal slowdown causes: the engine takes no action for it (a watch reason), so no
  restart-job signal caused it;
- a replacement clears the node's history: the node is new hardware ([D], as the twin did before).

Per instance, per node; pure Python, no randomness: same seed, same output.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass

from fmstack.observability.health import Action

COUNTED = (Action.RESTART_JOB, Action.RESET_GPU, Action.REBOOT_NODE)
"""Actions the engine's ``*_in_window`` counts are made of, in NodeSignals order (restarts, resets, reboots)."""


@dataclass(frozen=True, slots=True)
class WindowCounts:
    """A node's earlier restarts, resets and reboots inside the window ending at a fault."""

    restarts: int = 0
    resets: int = 0
    reboots: int = 0


class NodeHistory:
    """Times of the counted actions on each node; ``window_s`` the recurrence window (``math.inf``: whole run)."""

    def __init__(self, num_nodes: int, window_s: float) -> None:
        if not window_s > 0:
            raise ValueError(f"window_s must be > 0, got {window_s}")
        self.window_s = window_s
        self._times: list[dict[Action, list[float]]] = [{a: [] for a in COUNTED} for _ in range(num_nodes)]

    def counts(self, node: int, time_s: float) -> WindowCounts:
        """Counted actions on ``node`` at times in ``[time_s - window_s, time_s]`` (NVSentinel's bounds: both ends
        in). Older times are dropped: a later fault's window starts later still."""
        start = time_s - self.window_s
        got: list[int] = []
        for action in COUNTED:
            times = self._times[node][action]
            old = bisect_left(times, start)
            if old:
                del times[:old]
            got.append(sum(1 for t in times if t <= time_s))
        return WindowCounts(*got)

    def record(self, node: int, time_s: float, action: Action) -> None:
        """Note the engine's ``action`` for a fault at ``time_s``; a replacement clears the node (new hardware)."""
        if action == Action.REPLACE_NODE:
            for times in self._times[node].values():
                times.clear()
        elif action in COUNTED:
            insort(self._times[node][action], time_s)
