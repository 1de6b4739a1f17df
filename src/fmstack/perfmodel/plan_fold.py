"""One row per parallel layout: fold the planner's rows that differ only in virtual pipeline stages.

The planner enumerates virtual stages (Megatron-Core ``virtual_pipeline_model_parallel_size``) as one more axis, so
a layout that fits with v = 2, 3, 4, 5, 6 and 8 ran in the ranking up to seven times, a few tenths of a percent
apart, and pushed genuinely different layouts (another tp, pp, cp, sharding) off the list. Interleaving is a
schedule knob of the same layout: each layout is ranked once, by its best virtual-stage count, and says how many
counts fitted. ``overlap_ep`` is part of the fold too: the planner turns it on from the virtual stages (with
pp > 1 Megatron-Core allows the expert all-to-all overlap only on an interleaved schedule), so it is not a layout
choice of its own.
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np
from numpy.typing import NDArray

from fmstack.perfmodel.columns import Columns
from fmstack.perfmodel.num import FloatArray

FOLDED_COLUMNS = frozenset({"vpp", "overlap_ep"})
"""Columns a layout is folded over: the virtual-stage count, and the EP overlap the planner derives from it."""


def best_per_layout(cols: Columns[FloatArray], score: NDArray[np.float64], top: int) -> tuple[list[int], list[int]]:
    """The ``top`` best rows (lowest finite ``score``) with at most one row per layout, best first, ties by row
    index (as a stable sort of ``score``), and for each the number of its layout's rows that fit (finite score):
    the virtual-stage counts it was chosen among.

    The walk in score order stops after ``top`` layouts (at most ``top`` x virtual-stage counts rows); the counts
    compare the chosen layouts' keys with every fitting row.
    """
    fit = np.nonzero(np.isfinite(score))[0]
    if fit.size == 0 or top < 1:
        return [], []
    names = [f.name for f in fields(Columns) if f.name not in FOLDED_COLUMNS and getattr(cols, f.name) is not None]
    keys = np.column_stack([np.asarray(getattr(cols, name), dtype=np.float64)[fit] for name in names])
    order = np.argsort(score[fit], kind="stable")
    chosen: list[int] = []
    seen: set[bytes] = set()
    for pos in order:
        key = keys[pos].tobytes()
        if key in seen:
            continue
        seen.add(key)
        chosen.append(int(pos))
        if len(chosen) == top:
            break
    variants = [int(np.all(keys == keys[pos], axis=1).sum()) for pos in chosen]
    return [int(fit[pos]) for pos in chosen], variants
