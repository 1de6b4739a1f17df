"""The discrete-event engine: clock, event heap with a tie-break counter, random generator and id counters,
all on one :class:`Environment` instance (as simpy's ``Environment`` in src/simpy/core.py), so two simulations
in one process never interfere and the same seed gives the same sequence of events.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

import numpy as np


class Environment:
    """Simulated time in seconds, pending events, the run's RNG and id counters."""

    def __init__(self, seed: int) -> None:
        self.now_s = 0.0
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = 0
        self._ids: dict[str, int] = {}
        self.events_processed = 0

    def schedule(self, at_s: float, kind: int, data: Any = None) -> None:
        """Queue an event; events at the same time run in the order they were scheduled."""
        if at_s < self.now_s:
            at_s = self.now_s
        heapq.heappush(self._heap, (at_s, self._seq, kind, data))
        self._seq += 1

    def next_id(self, name: str) -> int:
        n = self._ids.get(name, 0)
        self._ids[name] = n + 1
        return n

    def __len__(self) -> int:
        return len(self._heap)

    def run(self, until_s: float, handle: Callable[[int, Any], None]) -> None:
        """Pop events in time order and hand each to ``handle(kind, data)`` until ``until_s``."""
        heap = self._heap
        pop = heapq.heappop
        while heap and heap[0][0] <= until_s:
            t, _, kind, data = pop(heap)
            self.now_s = t
            self.events_processed += 1
            handle(kind, data)
        self.now_s = max(self.now_s, until_s)
