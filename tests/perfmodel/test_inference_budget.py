"""The token budget caps the running sequences: ``max_num_tokens x out / (new + out)`` (Little's law on the
iteration's tokens), clients beyond it queue; below the cap the curve is untouched; open-loop rates above it are
refused (docs/inference.md, token budget)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from fmstack.catalog import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel import inference
from fmstack.perfmodel.inference import (
    ServeConfig,
    concurrency_for_rate,
    deployment,
    estimate_serve,
    max_concurrency,
    running_limit,
    serve_curve,
)
from fmstack.perfmodel.inference_closed_loop import simulate_closed_loop
from fmstack.perfmodel.inference_step import Deployment

# Llama 3.1 8B, tp 1, 2048/128, a 2048-token budget: the KV pool holds 205 sequences, the budget sustains fewer
CFG = ServeConfig(tp=1, input_len=2048, output_len=128, max_num_tokens=2048)


@pytest.fixture(scope="module")
def d8(catalog: Catalog) -> Deployment:
    return deployment(catalog.model("llama3.1-8b"), build_cluster(catalog, "p5.48xlarge", 1), CFG)


def test_the_cap_by_hand(d8: Deployment) -> None:
    # R decodes + R / out prompts of 2048 tokens per iteration <= 2048 tokens: R <= 2048 x 128 / 2176
    assert running_limit(d8, CFG) == pytest.approx(2048 * 128 / 2176)
    assert max_concurrency(d8, CFG) > 150  # the memory would run more
    # a cached prefix shortens the new prompt: 50 % of 2048 cached leaves 1024 tokens to schedule
    assert running_limit(d8, replace(CFG, prefix_hit_rate=0.5, max_num_tokens=1024)) == pytest.approx(1024 * 128 / 1152)
    # the default budget does not bind here: the memory's limit stands
    assert running_limit(d8, replace(CFG, max_num_tokens=8192)) == max_concurrency(d8, CFG)
    # static batching has no per-iteration budget in the model
    assert running_limit(d8, replace(CFG, scheduler="static")) == max_concurrency(d8, CFG)


def test_below_the_cap_nothing_changes(d8: Deployment, monkeypatch: pytest.MonkeyPatch) -> None:
    cap = running_limit(d8, CFG)
    conc = np.arange(1.0, math.floor(cap) + 1.0)
    with_cap = serve_curve(d8, CFG, conc)
    monkeypatch.setattr(inference, "budget_running", lambda *args: math.inf)
    assert running_limit(d8, CFG) == max_concurrency(d8, CFG)
    without = serve_curve(d8, CFG, conc)
    for name in ("running", "ttft_s", "itl_s", "latency_s", "requests_per_s"):
        assert np.array_equal(getattr(with_cap, name), getattr(without, name)), name  # bit-identical


def test_beyond_the_cap_clients_queue(d8: Deployment) -> None:
    cap = running_limit(d8, CFG)
    curve = serve_curve(d8, CFG, np.array([cap, 160.0, 400.0]))
    assert np.all(curve.running == cap)
    assert np.all(curve.requests_per_s == curve.requests_per_s[0])
    assert np.all(curve.itl_s == curve.itl_s[0])
    # each client waits for the (C - cap) ahead of it, at the completion rate
    wait = (np.array([cap, 160.0, 400.0]) - cap) / curve.requests_per_s[0]
    np.testing.assert_allclose(curve.ttft_s, curve.ttft_s[0] + wait, rtol=1e-12)


@pytest.mark.parametrize("clients", [160, 400])
def test_cap_binding_matches_the_simulation(d8: Deployment, clients: int) -> None:
    """The simulation admits prompts within the budget (FCFS, chunked): its mean TTFT and completion rate agree
    within 10 % (measured 2026-11-23: 2.68 vs 2.57 s and 15.66 vs 15.74 requests/s at 160 clients; 18.01 vs
    17.84 s and 15.66 vs 15.72 at 400). Before the cap the analytic model ran 205 sequences: 12.4 s at 400."""
    cfg = replace(CFG, concurrency=clients)
    est = estimate_serve(d8.model, d8.cluster, cfg)
    sim = simulate_closed_loop(d8, cfg, clients, est.latency_s)
    assert est.ttft_s == pytest.approx(sim.mean_ttft_s, rel=0.10)
    assert est.requests_per_s == pytest.approx(sim.completion_rate_per_s, rel=0.10)
    assert est.itl_s == pytest.approx(sim.mean_itl_s, rel=0.10)


def test_open_loop_above_the_budget_is_refused(d8: Deployment) -> None:
    open_cfg = replace(CFG, request_rate_per_s=1.0)
    cap = running_limit(d8, open_cfg)
    top = float(serve_curve(d8, open_cfg, np.array([cap])).requests_per_s[0])
    assert concurrency_for_rate(d8, open_cfg, 0.9 * top) < cap
    with pytest.raises(InputError, match="max-num-tokens"):
        concurrency_for_rate(d8, open_cfg, 1.05 * top)
