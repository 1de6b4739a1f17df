"""The joint run's lazy replicas (a stretch runs past the arrivals routed elsewhere; only the replica a request is sent
to is cut back to its arrival, ``BatchingSim.cut_at``) against the reference that stops every replica's stretch at
every arrival (``simulate_fleet(lazy=False)``): the same requests, float for float, and the same JSON."""

from __future__ import annotations

import json
from dataclasses import astuple, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fmstack.catalog import Catalog, load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.perfmodel.inference import ServeConfig, deployment
from fmstack.perfmodel.inference_prefix import PrefixWorkload
from fmstack.perfmodel.inference_sim import BatchingSim, SimConfig
from fmstack.perfmodel.inference_sim_fleet import FleetRun, run_fleet, simulate_fleet
from fmstack.perfmodel.inference_step import Deployment

ROUTERS = ["round-robin", "random", "least-loaded", "power-of-two", "cache-aware", "kv"]
PREFIXES = {
    "none": None,
    "8 groups": PrefixWorkload(groups=8, prefix_len=384),
    "200 groups, zipf 1": PrefixWorkload(groups=200, prefix_len=256, zipf=1.0),
}


def _same_runs(d: Deployment, cfg: ServeConfig, sim: SimConfig) -> tuple[FleetRun, FleetRun]:
    ref, lazy = run_fleet(d, cfg, sim, lazy=False), run_fleet(d, cfg, sim, lazy=True)
    assert [astuple(q) for q in lazy.requests] == [astuple(q) for q in ref.requests]
    for a, b in zip(lazy.replicas, ref.replicas, strict=True):
        assert [astuple(q) for q in a.requests] == [astuple(q) for q in b.requests]
        assert (a.iterations, a.busy_s, a.clock_s, a.finished, a.prompt_ranks) == (
            b.iterations, b.busy_s, b.clock_s, b.finished, b.prompt_ranks,
        )  # fmt: skip
    assert (lazy.router.imbalanced, lazy.router.tree_tokens) == (ref.router.imbalanced, ref.router.tree_tokens)
    fast, slow = simulate_fleet(d, cfg, sim), simulate_fleet(d, cfg, sim, lazy=False)
    assert repr(fast) == repr(slow)  # every float, nan included
    assert json.dumps(fast.to_json()) == json.dumps(slow.to_json())
    return ref, lazy


def _d8(catalog: Catalog, cfg: ServeConfig) -> Deployment:
    return deployment(catalog.model("llama3.1-8b"), build_cluster(catalog, "p5.48xlarge", 1), cfg)


@pytest.mark.parametrize("prefix", list(PREFIXES))
@pytest.mark.parametrize("router", ROUTERS)
@pytest.mark.parametrize(("spread", "chunked"), [(0.0, True), (0.5, True), (0.4, False)])
def test_lazy_replicas_give_the_same_floats(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch, router: str, prefix: str, spread: float, chunked: bool
) -> None:
    """Three replicas of Llama 3.1 8B near their capacity (queues, long batches), 256-token chunks of 1024-token
    prompts (chunk stretches), every router, with and without a prefix workload, equal and spread lengths, chunked
    and whole prompts; the lazy run takes back iterations past an arrival (the case exercises the cut)."""
    cfg = ServeConfig(precision="fp8", input_len=1024, output_len=128, max_num_tokens=256, max_batch=48)
    sim = SimConfig(request_rate_per_s=9.0, replicas=3, router=router, num_requests=240, warmup_requests=24,
                    length_spread=spread, chunked_prefill=chunked, prefix=PREFIXES[prefix], seed=5)  # fmt: skip
    undone: list[int] = []
    cut_at = BatchingSim.cut_at

    def spy(self: BatchingSim, time_s: float) -> None:
        before = self.iterations
        cut_at(self, time_s)
        undone.append(before - self.iterations)

    monkeypatch.setattr(BatchingSim, "cut_at", spy)
    _same_runs(_d8(catalog, cfg), cfg, sim)
    assert max(undone) > 0


def test_lazy_attention_dp_and_static(catalog: Catalog) -> None:
    """Attention DP (every rank's stretch) and static batching behind least-loaded and cache-aware routers."""
    adp = ServeConfig(tp=8, ep=8, precision="fp8", attention_dp=True, input_len=1024, output_len=200)
    d = deployment(catalog.model("qwen3-235b-a22b"), build_cluster(catalog, "p5.48xlarge", 1), adp)
    for router in ("least-loaded", "cache-aware"):
        sim = SimConfig(request_rate_per_s=10.0, replicas=2, router=router, num_requests=200, length_spread=0.5,
                        seed=2)  # fmt: skip
        _, lazy = _same_runs(d, adp, sim)
        assert 0 in lazy.replicas[0].prompt_ranks  # decode-only stretches ran
    for router in ("round-robin", "kv"):  # each rank its own prefix cache (session 17)
        sim = SimConfig(request_rate_per_s=10.0, replicas=2, router=router, num_requests=200, length_spread=0.5,
                        seed=2, prefix=PrefixWorkload(groups=6, prefix_len=512))  # fmt: skip
        _, lazy = _same_runs(d, adp, sim)
        assert any(q.prefix_hit for q in lazy.requests)
    static = ServeConfig(precision="fp8", input_len=512, output_len=128, scheduler="static", max_batch=32)
    sim = SimConfig(request_rate_per_s=12.0, replicas=3, router="least-loaded", num_requests=240, length_spread=0.3)
    _same_runs(_d8(catalog, static), static, sim)


@settings(max_examples=25, deadline=None)
@given(
    router=st.sampled_from(ROUTERS),
    prefix=st.sampled_from(list(PREFIXES)),
    replicas=st.integers(1, 4),
    rate=st.floats(2.0, 14.0),
    spread=st.sampled_from([0.0, 0.3, 0.8]),
    chunked=st.booleans(),
    budget=st.sampled_from([128, 512, 2048]),
    seed=st.integers(0, 1000),
)
def test_lazy_replicas_random_cases(
    router: str, prefix: str, replicas: int, rate: float, spread: float, chunked: bool, budget: int, seed: int
) -> None:
    cat = load_catalog()
    cfg = ServeConfig(precision="fp8", input_len=768, output_len=96, max_num_tokens=budget, max_batch=40)
    sim = SimConfig(request_rate_per_s=rate, replicas=replicas, router=router, num_requests=60 * replicas,
                    warmup_requests=6 * replicas, length_spread=spread, chunked_prefill=chunked,
                    prefix=PREFIXES[prefix], seed=seed)  # fmt: skip
    _same_runs(_d8(cat, cfg), cfg, replace(sim))
