"""The planner ranks each parallel layout once, by its best virtual-stage count (plan_fold.py)."""

from __future__ import annotations

import contextlib
import io
import json
import math

import numpy as np

from fmstack.catalog import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.cli.main import main
from fmstack.perfmodel.columns import columns_from_configs
from fmstack.perfmodel.config import TrainConfig
from fmstack.perfmodel.memory import DEFAULT_RESERVE_GIB, GIB
from fmstack.perfmodel.plan_fold import best_per_layout
from fmstack.perfmodel.planner import SearchSpace, enumerate_space, evaluate, plan_training

FOLDED = ("virtual_stages", "overlap_ep")


def _layout(config: TrainConfig) -> tuple[object, ...]:
    return tuple(getattr(config, f) for f in config.__dataclass_fields__ if f not in FOLDED)


def test_best_per_layout_by_hand() -> None:
    base = TrainConfig(tp=2, pp=2, dp=2, global_batch=8)
    rows = [base.with_(virtual_stages=v) for v in (1, 2, 4)] + [base.with_(tp=1, dp=4), base.with_(micro_batch=2)]
    cols = columns_from_configs(rows)
    # v2 is the layout's best (1.0); tp1 (1.5) is another layout; v4 (2.0) and v1 (3.0) fold into v2; the mb2 row
    # does not fit (inf) and is not ranked
    score = np.array([3.0, 1.0, 2.0, 1.5, math.inf])
    assert best_per_layout(cols, score, top=10) == ([1, 3], [3, 1])
    assert best_per_layout(cols, score, top=1) == ([1], [3])
    # equal scores: the lower row index wins, as the stable sort ranked them before
    assert best_per_layout(cols, np.array([1.0, 1.0, 1.0, 2.0, 2.0]), top=10) == ([0, 3, 4], [3, 1, 1])
    assert best_per_layout(cols, np.full(5, math.inf), top=10) == ([], [])


def test_plan_shows_each_layout_once_with_its_best_virtual_stages(catalog: Catalog) -> None:
    # the command of the report: before the fold its top 5 held tp4 pp2 dp16 cp2 mb1 zero1 with v4, v5 and v8
    model = catalog.model("llama3.1-70b")
    cluster = build_cluster(catalog, "p5.48xlarge", 32)
    space = SearchSpace(seq_len=8192)
    result = plan_training(model, [cluster], tokens=1e12, top=10, space=space)
    layouts = [_layout(e.config) for e in result.ranked]
    assert len(set(layouts)) == len(layouts) == 10
    # the check by brute force: every fitting row, grouped by layout, best step (ties: first row) per group
    cols, _ = enumerate_space(model, cluster, space)
    arrays = evaluate(model, cluster, cols)
    fits = arrays.memory.total / GIB <= cluster.gpu.hbm_gib - DEFAULT_RESERVE_GIB
    groups: dict[tuple[object, ...], list[int]] = {}
    for i in np.nonzero(fits)[0]:
        groups.setdefault(_layout(cols.row(int(i))), []).append(int(i))
    best = sorted((min(float(arrays.step_s[i]) for i in rows), key) for key, rows in groups.items())
    assert [key for _, key in best[:10]] == layouts
    assert [e.step_time_s for e in result.ranked] == [s for s, _ in best[:10]]
    assert result.vpp_variants == [len(groups[key]) for key in layouts]
    assert result.best.step_time_s == float(arrays.step_s[fits].min())  # the best row is the unfolded best
    assert result.vpp_variants[0] > 1  # the winner (tp4 pp2 cp2 v4) was chosen among several virtual-stage counts


def test_plan_json_and_notes_say_what_was_folded() -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["plan", "train", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--gpus", "256",
              "--tokens", "1e12", "--top", "5", "--json"])  # fmt: skip
    data = json.loads(out.getvalue())
    rows = data["ranked"]
    assert all(r["vpp_variants"] >= 1 for r in rows)
    assert data["vpp_folded"] == sum(r["vpp_variants"] - 1 for r in rows) > 0
    assert any("differed only in v folded" in n for n in data["notes"])
    assert len({json.dumps({k: v for k, v in r["config"].items() if k not in FOLDED}) for r in rows}) == 5
