"""Slurm preemption victim selection with reordering to minimise the victims.

Slurm doc/html/preempt.shtml: candidates are tried in order until the pending job fits; the select plugin then
reorders them (the last one needed first, the others after it) and repeats, so that fewer jobs are preempted
(``reorder_count`` default 1). Oracle from the page: an 8-node job, candidates of 2, 4 and 8 nodes -> only the
8-node job is preempted.
"""

from __future__ import annotations

from collections.abc import Sequence


def _greedy(need: int, free: int, candidates: Sequence[tuple[int, int]]) -> list[tuple[int, int]] | None:
    victims: list[tuple[int, int]] = []
    for cand in candidates:
        if free >= need:
            break
        victims.append(cand)
        free += cand[1]
    return victims if free >= need else None


def select_victims(
    need_nodes: int, free_nodes: int, candidates: Sequence[tuple[int, int]], reorder_count: int = 1
) -> list[int]:
    """Job ids to preempt so that ``need_nodes`` fit; ``candidates`` are (job_id, nodes) in preemption order.

    Returns [] if the job already fits, and raises nothing when it cannot fit: then the list is empty too and
    the caller keeps the job pending (check with ``free + sum(candidates) >= need`` first if that matters).
    """
    victims = _greedy(need_nodes, free_nodes, candidates)
    if not victims:
        return []
    for _ in range(reorder_count):
        last = victims[-1]
        rest = [c for c in candidates if c != last]
        again = _greedy(need_nodes, free_nodes, [last, *rest])
        if again is None or len(again) >= len(victims):
            break
        victims = again
    return [job_id for job_id, _ in victims]
