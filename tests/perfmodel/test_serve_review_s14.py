"""Session 14 fresh review of the serving commands (helper B): short sequences priced in a fraction of a second, and
p99s measured over enough requests at low rates and in splits (docs/inference.md, open loop)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import fmstack.perfmodel.inference as inference
from fmstack.catalog import load_catalog
from fmstack.catalog.loader import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.perfmodel.inference import ServeConfig, concurrency_for_rate, deployment, max_concurrency, serve_curve


@pytest.fixture(scope="module")
def cat() -> Catalog:
    return load_catalog()


def test_rate_to_concurrency_needs_no_curve_point_by_point(cat: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    """Llama 3.1 8B TP 8 on a p5 node, 64/64 tokens: the KV pool holds thousands of sequences and the token budget
    keeps 8192 x 64 / 128 = 4,096 running. The concurrency for a rate is the interpolation over every integer
    concurrency (the definition, computed here point by point), but found from about 2 sqrt(4,096) = 128 points of
    the curve, not 4,096 (``estimate serve`` of 1/1 tokens took 11-22 s, plan serve's colocated checks as long)."""
    cfg = ServeConfig(tp=8, input_len=64, output_len=64, request_rate_per_s=1.0)
    d = deployment(cat.model("llama3.1-8b"), build_cluster(cat, "p5.48xlarge", 1), cfg)
    assert max_concurrency(d, cfg) > 4096
    every = np.append(np.arange(1.0, 4096.0), 4096.0)
    rps = serve_curve(d, cfg, every).requests_per_s
    points: list[int] = []

    def counted(*args: Any, **kw: Any) -> Any:
        points.append(int(np.size(args[2])))
        return serve_curve(*args, **kw)

    monkeypatch.setattr(inference, "serve_curve", counted)
    for share in (0.001, 0.3, 0.77, 0.999):
        rate = share * float(rps[-1])
        want = 1.0 if rate <= rps[0] else float(np.interp(rate, rps, every))
        points.clear()
        assert concurrency_for_rate(d, cfg, rate) == want
        assert sum(points) <= 2 * 64 + 2
