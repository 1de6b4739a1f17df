"""Replicas simulated together behind one router (session 16): the joint run of one replica is the single-replica
run bit for bit; the prefix cache against Che's approximation; the hit rates each router gives, derived by hand;
how the routers order at one load (docs/inference.md, Routers)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fmstack.catalog import load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.perfmodel.inference import ServeConfig, deployment
from fmstack.perfmodel.inference_prefix import PrefixCache, PrefixWorkload, che_hit_rate
from fmstack.perfmodel.inference_router import BALANCE_ABS_THRESHOLD, Router
from fmstack.perfmodel.inference_sim import SimConfig, simulate
from fmstack.perfmodel.inference_sim_fleet import simulate_fleet

CFG70 = ServeConfig(tp=2, precision="fp8", input_len=2048, output_len=256)
CASES = [
    ("llama3.1-70b", CFG70, 3.0, 0.0),
    ("llama3.1-8b", ServeConfig(precision="fp8", input_len=512, output_len=128, max_num_tokens=256), 6.0, 0.5),
    # long prompts in 512-token chunks: the chunk stretches stop at every arrival in the joint run
    ("llama3.1-70b", ServeConfig(tp=2, precision="fp8", input_len=8192, output_len=64, max_num_tokens=512), 1.0, 0.2),
]


def _d(model: str, cfg: ServeConfig):  # type: ignore[no-untyped-def]
    cat = load_catalog()
    return deployment(cat.model(model), build_cluster(cat, "p5.48xlarge", 1), cfg)


@pytest.mark.parametrize(("model", "cfg", "rate", "spread"), CASES)
@pytest.mark.parametrize("router", ["round-robin", "random", "least-loaded", "power-of-two", "cache-aware", "kv"])
def test_one_replica_together_is_the_single_run(
    model: str, cfg: ServeConfig, rate: float, spread: float, router: str
) -> None:
    """One replica behind any router: the same arrivals, lengths, iterations and percentiles, bit for bit."""
    d = _d(model, cfg)
    sim = SimConfig(request_rate_per_s=rate, num_requests=300, warmup_requests=30, seed=3, length_spread=spread)
    alone = simulate(d, cfg, sim)
    together = simulate_fleet(d, cfg, replace(sim, router=router)).result
    assert together.percentiles() == alone.percentiles()
    assert together.means() == alone.means()
    assert together.iterations == alone.iterations


@pytest.mark.parametrize(("groups", "capacity", "zipf"), [(100, 20, 0.8), (1000, 100, 0.7), (50, 25, 0.0)])
def test_lru_hit_rate_is_che(groups: int, capacity: int, zipf: float) -> None:
    """An LRU cache of ``capacity`` prefixes under independent Zipf requests hits as Che's approximation says (Che,
    Tung, Wang 2002; Fricker et al. 2012: accurate to about 1e-3 at these sizes); uniform popularity: exactly
    capacity / groups (the cache holds a uniformly random set)."""
    w = PrefixWorkload(groups=groups, prefix_len=100, zipf=zipf)
    cache, hits, n = PrefixCache(), 0, 0
    for i, g in enumerate(w.draw(np.random.default_rng(0), 300_000).tolist()):
        hit = cache.lookup(g)
        if not hit:
            cache.insert(g, 100, capacity * 100)
        if i >= 50_000:  # the cache is full long before
            hits, n = hits + hit, n + 1
    che = che_hit_rate(w.probabilities(), capacity)
    assert abs(hits / n - che) < 0.005
    if zipf == 0:
        assert che == pytest.approx(capacity / groups)


def test_cache_shrinks_with_the_free_pool() -> None:
    """The capacity is the free KV: admissions that take it evict the least recently used prefixes first."""
    cache = PrefixCache()
    for g in range(4):
        cache.insert(g, 100, 1000)
    assert cache.lookup(0)  # 0 is now the most recently used; 1 the least
    cache.fit(250)
    assert [g in cache for g in range(4)] == [True, False, False, True]
    cache.insert(9, 300, 250)  # longer than the room: not cached
    assert 9 not in cache and cache.tokens == 200


@pytest.mark.parametrize("seed", [0, 1])
def test_cache_aware_keeps_each_group_on_one_replica(seed: int) -> None:
    """G = 8 groups of a 1536-token prefix over N = 4 replicas, 400 requests at low load, ample KV (Llama 3.1 8B on
    an H100): the cache-aware router sends each group where it went first, so only the G first requests miss (hit
    rate 1 - 8 / 400 = 0.98); round-robin spreads each group's 50 requests over all four replicas, each missing it
    once (1 - 32 / 400 = 0.92)."""
    cfg = ServeConfig(precision="fp8", input_len=2048, output_len=64)
    d = _d("llama3.1-8b", cfg)
    sim = SimConfig(request_rate_per_s=1.0, replicas=4, num_requests=400, warmup_requests=0, seed=seed,
                    prefix=PrefixWorkload(groups=8, prefix_len=1536))  # fmt: skip
    hit = {r: simulate_fleet(d, cfg, replace(sim, router=r)).prefix_hit_rate for r in ("cache-aware", "round-robin")}
    assert hit["cache-aware"] == pytest.approx(1 - 8 / 400)
    assert hit["round-robin"] == pytest.approx(1 - 8 * 4 / 400)


def test_cache_aware_rules() -> None:
    """sglang_router's cache_aware: shortest queue when max - min > 64 and max > 1.5 min; else the replica that holds
    the prefix when it is more than 30 % of the prompt, else the smallest tree."""
    r = Router(name="cache-aware", replicas=2, rng=np.random.default_rng(0))
    assert r.pick([0, 0], 7, 1024, 2048) == 0  # nobody holds group 7: the smallest tree (ties: the first)
    assert r.pick([1, 0], 7, 1024, 2048) == 0  # replica 0 holds it, 50 % of the prompt
    assert r.pick([0, 0], 8, 1024, 2048) == 1  # a new group: the smaller tree is replica 1's
    assert r.pick([0, 0], 7, 512, 2048) == 1  # 25 % matched, not above 0.3: the smaller tree (2048 against 3072)
    # 65 over, but 230 < 1.5 x 165: balanced; group 7 is held by 0 and 1, which was sent it last
    assert r.pick([165 + BALANCE_ABS_THRESHOLD + 1, 165], 7, 1024, 2048) == 1
    assert r.pick([200, 100], 7, 1024, 2048) == 1  # 100 over and 200 > 150: the shortest queue
    assert r.imbalanced == 1


def _runs(spread: float, seed: int) -> dict[str, tuple[float, float]]:
    d = _d("llama3.1-70b", CFG70)
    sim = SimConfig(request_rate_per_s=3.0, replicas=4, num_requests=4000, warmup_requests=400, seed=seed,
                    length_spread=spread)  # fmt: skip
    out = {}
    for router in ("least-loaded", "round-robin", "random"):
        res = simulate_fleet(d, CFG70, replace(sim, router=router)).result
        out[router] = (res.ttft_s[99], res.latency_s[99])
    return out


@pytest.mark.parametrize("seed", [0, 1])
def test_router_order_with_varied_lengths(seed: int) -> None:
    """Llama 3.1 70B TP 2 fp8, 2048/256 tokens spread by 0.9, 3 req/s per replica over 4: least-loaded balances what
    is in flight, so its latency p99 is the lowest; round-robin spaces the prompts (every 4th arrival), so its TTFT
    p99 is the lowest; random is last on both (measured, not forced: least-loaded does not beat round-robin's TTFT,
    as it counts requests and not the prompts in them)."""
    runs = _runs(0.9, seed)
    ttft = {r: v[0] for r, v in runs.items()}
    lat = {r: v[1] for r, v in runs.items()}
    assert lat["least-loaded"] <= lat["round-robin"] <= lat["random"]
    assert ttft["round-robin"] <= ttft["least-loaded"] <= ttft["random"]


def test_least_loaded_herds_with_equal_lengths() -> None:
    """Equal lengths: requests admitted together finish together, the replica they leave is the least loaded for the
    next several arrivals, and their prompts queue behind each other: least-loaded's TTFT p99 is over twice
    round-robin's (0.89 s against 0.33 s), while its latency p99 stays round-robin's (within 1 %)."""
    runs = _runs(0.0, 0)
    assert runs["least-loaded"][0] > 2 * runs["round-robin"][0]
    assert runs["least-loaded"][1] == pytest.approx(runs["round-robin"][1], rel=0.01)
