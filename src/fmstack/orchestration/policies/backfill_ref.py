"""The backfill cycle as written before session 8's speed-up, kept callable as the reference.

:class:`fmstack.orchestration.policies.backfill.BackfillPolicy` with ``reference=True`` runs this instead of its
faster cycle; tests and ``benchmarks/bench_backfill.py`` compare the two (same seed, same simulator output).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING

import numpy as np

from fmstack.orchestration.policies.base import UNLIMITED_PLAN_S, Capacity, PendingJob, RunningJob

if TYPE_CHECKING:
    from fmstack.orchestration.policies.backfill import BackfillPolicy

_START = attrgetter("start_s")
_LIMIT = attrgetter("time_limit_s")
_GPUS = attrgetter("num_gpus")


def reference_backfill(
    policy: BackfillPolicy,
    now_s: float,
    order: Sequence[PendingJob],
    running: Collection[RunningJob],
    capacity: Capacity,
    *,
    reservations: list[tuple[int, float]] | None = None,
) -> list[int]:
    """The cycle as it was before session 8 (the reference that :meth:`BackfillPolicy.backfill` must match).

    ``reservations``, when given, receives (job id, planned start s, a multiple of ``bf_resolution_s``) of
    each reservation made; the cycle stops once no remaining job could start now, so later jobs get none.
    """
    p = policy.params
    res = p.bf_resolution_s
    gpn = policy.gpus_per_node
    begin = math.floor(now_s / res)
    width = max(1, math.floor((now_s + p.bf_window_s) / res) - begin)
    run = list(running)
    nrun = len(run)
    # a running job holds its GPUs (whole nodes) through the slot its expected end falls in
    ends = np.fromiter(map(_START, run), float, nrun) + np.fromiter(map(_LIMIT, run), float, nrun)
    ends = np.minimum(ends, now_s + UNLIMITED_PLAN_S)  # an unlimited job: a year on, as Slurm plans it
    gpus = np.fromiter(map(_GPUS, run), np.int64, nrun)
    gpus = np.where(gpus <= gpn, gpus, -(-gpus // gpn) * gpn)
    from fmstack.orchestration.policies.backfill import SlotMap

    slot_map = SlotMap.from_releases(capacity.free_gpus, np.ceil(ends / res - begin).astype(np.int64), gpus, width)
    starts: list[int] = []
    reserved = 0
    tested = list(order[: p.bf_max_job_test])
    m = len(tested)
    needs_a = np.fromiter(map(_GPUS, tested), np.int64, m)
    needs_a = np.where(needs_a <= gpn, needs_a, -(-needs_a // gpn) * gpn)
    # a job holds every slot its time limit touches, at least one
    limits = np.minimum(np.fromiter(map(_LIMIT, tested), float, m), UNLIMITED_PLAN_S)
    slots_a = np.maximum(1, np.ceil(limits / res)).astype(np.int64)
    needs: list[int] = needs_a.tolist()
    durs: list[int] = slots_a.tolist()
    # Only starts now matter, and the map only shrinks during a cycle: once no remaining job could start
    # now, later reservations change nothing. ``last`` is the last job that still could.
    last = slot_map.last_startable(needs_a, slots_a, 0, m - 1)
    # A job that cannot start within the window neither starts nor reserves; nor does any later job
    # needing as many GPUs for as long.
    sizes = sorted(set(needs))
    size_ix = {g: k for k, g in enumerate(sizes)}
    never_d = [math.inf] * len(sizes)
    # never_d[k]: the shortest duration that failed so far for a size <= sizes[k]
    changed = False
    free = slot_map.free
    earliest = slot_map.earliest
    for i, job in enumerate(tested):
        if changed and last >= i and not slot_map.startable(needs[last], durs[last]):
            last = slot_map.last_startable(needs_a, slots_a, i, last - 1)
        changed = False
        if i > last:
            break
        need = needs[i]
        duration = durs[i]
        k = size_ix[need]
        if never_d[k] <= duration:
            continue
        t = earliest(need, duration)
        if t == 0 and capacity.try_start(job):
            free[:duration] -= need
            starts.append(job.job_id)
            changed = True
        elif t >= 0 and (p.reserve_count == 0 or reserved < p.reserve_count):
            free[t : t + duration] -= need
            reserved += 1
            if reservations is not None:
                reservations.append((job.job_id, (begin + t) * res))
            # a reservation from slot t on cannot change what is free in the first durs[last] slots
            changed = t < durs[last]
        elif t < 0:
            for kk in range(k, len(sizes)):
                if never_d[kk] > duration:
                    never_d[kk] = duration
    return starts
