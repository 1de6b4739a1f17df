"""Pure scheduling policies (Slurm-like and Kueue-like), usable alone or by the fleet twin.

A policy implements :class:`SchedulingPolicy`; :data:`POLICIES` maps a name to a factory (one file per policy,
one line each here). :func:`make_policy` turns a name into a policy or raises InputError listing the names.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import replace
from typing import Protocol

from fmstack.errors import InputError
from fmstack.orchestration.policies.backfill import BackfillParams, BackfillPolicy
from fmstack.orchestration.policies.base import Capacity, CountCapacity, PendingJob, Plan, RunningJob
from fmstack.orchestration.policies.fifo import FifoPolicy, SjfPolicy
from fmstack.orchestration.policies.kueue_policy import KueuePolicy

__all__ = [
    "KUEUE_POLICIES",
    "POLICIES",
    "BackfillParams",
    "Capacity",
    "CountCapacity",
    "PendingJob",
    "Plan",
    "RunningJob",
    "SchedulingPolicy",
    "make_policy",
]


class SchedulingPolicy(Protocol):
    """Decides which pending jobs start now (and which running ones to preempt first)."""

    @property
    def name(self) -> str: ...

    @property
    def interval_s(self) -> float:
        """Period of the periodic pass (backfill cycle); 0 for none."""
        ...

    def schedule(
        self,
        now_s: float,
        pending: Collection[PendingJob],
        running: Collection[RunningJob],
        capacity: Capacity,
        *,
        periodic: bool = False,
    ) -> Plan: ...


def _easy(gpus_per_node: int, queues: tuple[str, ...]) -> SchedulingPolicy:
    return BackfillPolicy(params=BackfillParams(reserve_count=1), gpus_per_node=gpus_per_node, name="easy-backfill")


POLICIES: dict[str, Callable[[int, tuple[str, ...]], SchedulingPolicy]] = {
    "fifo": lambda gpn, queues: FifoPolicy(),
    "sjf": lambda gpn, queues: SjfPolicy(),
    "slurm-backfill": lambda gpn, queues: BackfillPolicy(gpus_per_node=gpn),
    "easy-backfill": _easy,
    "kueue": lambda gpn, queues: KueuePolicy(queues=queues or ("default",)),
    "kueue-strict": lambda gpn, queues: KueuePolicy(
        queues=queues or ("default",), queueing_strategy="StrictFIFO", name="kueue-strict"
    ),
}
KUEUE_POLICIES = ("kueue", "kueue-strict")
"""The Kueue-like policies: BestEffortFIFO (Kueue's default queueing strategy) and StrictFIFO."""


def make_policy(
    name: str, gpus_per_node: int = 8, queues: tuple[str, ...] = (), *, bf_window_s: float | None = None
) -> SchedulingPolicy:
    """The policy registered as ``name`` (``queues``: the ClusterQueues a Kueue-like policy creates;
    ``bf_window_s``: the look-ahead of a backfill policy, Slurm's bf_window, ignored by the others)."""
    try:
        factory = POLICIES[name]
    except KeyError:
        raise InputError("policy", f"unknown policy {name!r}; allowed: {', '.join(POLICIES)}") from None
    policy = factory(gpus_per_node, queues)
    if bf_window_s is not None and isinstance(policy, BackfillPolicy):
        policy = replace(policy, params=replace(policy.params, bf_window_s=bf_window_s))
    return policy
