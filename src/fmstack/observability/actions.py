"""The node-health actions, ordered by severity (re-exported by :mod:`fmstack.observability.health`).

The ladder follows aws-samples gpu-cluster-healthcheck ("replace, don't repair": MONITOR < RESET < REBOOT <
ISOLATE) and NVIDIA NVSentinel's RecommendedAction (NONE, COMPONENT_RESET, RESTART_BM, REPLACE_VM); RESTART_JOB
is NVIDIA's Xid-catalog bucket RESTART_APP. See shared/reference/observability.md §3 and §7.
"""

from __future__ import annotations

import enum


class Action(enum.Enum):
    """What to do with a node; a larger ``value`` is more severe, so ``max`` picks the one to take."""

    NONE = 0
    RESTART_JOB = 1
    RESET_GPU = 2
    REBOOT_NODE = 3
    REPLACE_NODE = 4

    @property
    def severity(self) -> int:
        return self.value

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Action):
            return NotImplemented
        return self.value < other.value

    def __le__(self, other: object) -> bool:
        if not isinstance(other, Action):
            return NotImplemented
        return self.value <= other.value

    @classmethod
    def parse(cls, text: str) -> Action:
        """``"reset_gpu"``, ``"RESET-GPU"`` -> ``Action.RESET_GPU``; raises ``KeyError`` for unknown names."""
        return cls[text.strip().upper().replace("-", "_")]
