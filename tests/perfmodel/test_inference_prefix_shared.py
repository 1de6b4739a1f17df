"""Reference-counted prefix sharing (session 17): a prefix held by running requests is a hit, costs the new request
no KV for its tokens, stays resident while referenced and is evicted LRU once no one references it (vLLM's automatic
prefix caching, ``ref_cnt``; SGLang's radix cache, ``lock_ref``). Pool arithmetic checked by hand
(docs/inference.md, Routers that see the replicas, and prefix caching)."""

from __future__ import annotations

import pytest

from fmstack.catalog import load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.perfmodel.inference import ServeConfig, deployment
from fmstack.perfmodel.inference_prefix import PrefixCache
from fmstack.perfmodel.inference_sim import BatchingSim, SimConfig
from fmstack.perfmodel.inference_sim_io import SimRequest

POOL = 65_280
"""Llama 3.1 8B fp8 on one H100 at ``kv_memory_fraction`` 0.06: 15 sequences of 4,096 + 256 tokens."""
OWN = 4096 + 256 - 3072
"""A hit's own reservation: its prompt past the 3,072-token prefix and its output, 1,280 tokens."""


def _sim(max_num_tokens: int) -> BatchingSim:
    cfg = ServeConfig(precision="fp8", input_len=4096, output_len=256, kv_memory_fraction=0.06,
                      max_num_tokens=max_num_tokens)  # fmt: skip
    cat = load_catalog()
    d = deployment(cat.model("llama3.1-8b"), build_cluster(cat, "p5.48xlarge", 1), cfg)
    s = BatchingSim(d, cfg, SimConfig(request_rate_per_s=1.0, num_requests=10, warmup_requests=0))
    s.use_prefix_cache(3072)
    return s


def _send(s: BatchingSim, at_s: float, group: int = 0) -> SimRequest:
    req = SimRequest(0, at_s, 4096, 256)
    req.group = group
    s.accept(req)
    return req


def test_a_running_prefix_is_shared() -> None:
    """A (group 0) at t = 0 misses and reserves 4,096 + 256 = 4,352 tokens: 65,280 - 4,352 = 60,928 free. Its
    prompt is one 4,096-token iteration; then its 3,072 prefix tokens become the shared prefix, referenced by A (free
    unchanged). B (group 0), arriving during that iteration, is admitted after it: a hit on a referenced prefix
    reserves only its own 1,280 tokens (60,928 - 1,280 = 59,648 free; the pool is 1,280 + 1,280 own + 3,072 shared +
    59,648 free = 65,280) and starts 3,072 tokens in. Both finish: 59,648 + 1,280 + (1,280 + 3,072) = 65,280, the
    prefix now unreferenced (evictable) in the free part. C (group 0) then hits it and, as vLLM's ``allocate_slots``
    counts a computed block at ``ref_cnt`` 0 as allocated, takes its own 1,280 and the prefix's 3,072 from the free
    part: 60,928."""
    s = _sim(4096)
    cache = s.prefix_caches[0]
    assert s._kv_tokens_free == POOL
    a, b = _send(s, 0.0), _send(s, 1e-6)
    s.run_until(1e-5)
    assert s._kv_tokens_free == POOL - 4352 and not a.prefix_hit
    s.run_until(0.5)  # A's prompt iteration is over (~30 ms), B admitted; both decode until ~1.2 s
    assert (a.kv_shared, a.prefix_held, a.prefix_hit) == (3072, True, False)
    assert (b.kv_shared, b.prefix_held, b.prefix_hit) == (3072, True, True)
    assert b.prefilled == 4096 and cache.referenced(0)
    assert s._kv_tokens_free == POOL - 4352 - OWN == 59_648
    assert cache.pinned_tokens == 3072 and cache.tokens == 0
    assert OWN + OWN + cache.pinned_tokens + s._kv_tokens_free == POOL
    s.run_until(3.0)
    assert a.generated == b.generated == 256
    assert s._kv_tokens_free == POOL and cache.tokens == 3072 and cache.pinned_tokens == 0
    c = _send(s, 3.0)
    s.run_until(3.0 + 1e-5)
    assert c.prefix_hit and s._kv_tokens_free == POOL - OWN - 3072 == 60_928
    assert cache.pinned_tokens == 3072 and cache.tokens == 0


def test_a_miss_looks_again_at_its_first_chunk() -> None:
    """2,048-token chunks: A's prompt takes two iterations. B (group 0) is admitted after A's first, before A's prefix
    is cached: a miss, 4,352 reserved (65,280 - 2 x 4,352 = 56,576 free), no chunk (A takes the budget). After A's
    second chunk the prefix is shared; B's first chunk comes next and looks again: a hit on a referenced prefix gives
    back its 3,072 prefix tokens (59,648 free, as if it had hit at admission) and starts 3,072 tokens in."""
    s = _sim(2048)
    a, b = _send(s, 0.0), _send(s, 1e-6)
    s.run_until(0.05)  # A's first chunk done (~36 ms), B admitted: both missed
    assert a.prefilled == 2048 and b.prefilled == 0 and not b.prefix_hit
    assert s._kv_tokens_free == POOL - 2 * 4352 == 56_576
    s.run_until(0.1)  # A's second chunk done (~78 ms): B's first chunk taken from past the prefix
    assert b.prefix_hit and b.kv_shared == 3072 and s._kv_tokens_free == 59_648


def test_referenced_prefixes_are_not_evicted() -> None:
    """fit() evicts unreferenced prefixes only, LRU first; releasing the last reference makes a prefix the most
    recently used evictable one."""
    cache = PrefixCache()
    for g in range(3):
        cache.insert(g, 100, 1000)
    assert cache.acquire(0) == 100  # unreferenced: its tokens leave the free part
    assert cache.acquire(0) == 0  # referenced already: shared at no cost
    cache.fit(0)
    assert [g in cache for g in range(3)] == [True, False, False]
    assert (cache.tokens, cache.pinned_tokens) == (0, 100)
    assert cache.release(0) == 0 and cache.release(0) == 100
    assert cache.publish(5, 100) and not cache.publish(5, 100)
    cache.fit(100)
    assert 0 in cache and 5 in cache
    with pytest.raises(KeyError):
        cache.release(7)


def _adp(catalog_model: str = "qwen3-235b-a22b"):  # type: ignore[no-untyped-def]
    cfg = ServeConfig(tp=8, ep=8, precision="fp8", attention_dp=True, input_len=1024, output_len=200)
    cat = load_catalog()
    return cat, cfg, deployment(cat.model(catalog_model), build_cluster(cat, "p5.48xlarge", 1), cfg)


def test_attention_dp_ranks_cache_on_their_own() -> None:
    """Qwen3 235B on 8 H100s, attention DP over 8 ranks: each rank its own prefix cache (SGLang's DP-attention ranks
    each run a scheduler with its own radix cache). 8 groups of a 768-token prefix, 400 requests at 1 req/s, ample
    KV: a rank misses each group it is given exactly once (no eviction, no two prompts of a group at once), so the
    requests that hit are ``1 - (sum over ranks of the groups it saw) / 400``; TensorRT-LLM's assignment (fewest active
    prompt tokens, lowest rank on ties) gives rank 0 the most requests at this load, so the low ranks see all 8
    groups and the high ones fewer. One cache for the replica would miss 8."""
    from fmstack.perfmodel.inference_prefix import PrefixWorkload
    from fmstack.perfmodel.inference_sim_fleet import run_fleet

    _, cfg, d = _adp()
    sim = SimConfig(request_rate_per_s=1.0, num_requests=400, warmup_requests=0, seed=0,
                    prefix=PrefixWorkload(groups=8, prefix_len=768))  # fmt: skip
    run = run_fleet(d, cfg, sim)
    caches = run.replicas[0].prefix_caches
    assert len(caches) == 8
    seen = [sum(g in c for g in range(8)) for c in caches]
    assert [c.lookups - c.hits for c in caches] == seen  # each rank: one miss per group it saw
    assert sum(c.lookups for c in caches) == 400
    hit = sum(q.prefix_hit for q in run.requests) / 400
    assert hit == pytest.approx(1 - sum(seen) / 400)
    assert seen[0] == 8 and 8 < sum(seen) < 64 and hit < 1 - 8 / 400


def test_attention_dp_screening_by_hand() -> None:
    """Screening an attention-DP candidate (no prefix cache before session 17): each rank's room is its share of the
    replica's, ``((max - C) x 1224 / 768 + C) / 8`` prefixes of 2,000 equally popular (Che exact: room / groups,
    rounded up to a hundredth)."""
    import math

    from fmstack.perfmodel.inference import max_concurrency
    from fmstack.perfmodel.inference_disagg import SLO
    from fmstack.perfmodel.inference_plan_analytic import analytic
    from fmstack.perfmodel.inference_prefix import PrefixWorkload

    cat, cfg, d = _adp()
    w = PrefixWorkload(groups=2000, prefix_len=768)
    c = analytic(cfg, build_cluster(cat, "p5.48xlarge", 1), cat.model("qwen3-235b-a22b"), 20.0, SLO(ttft_s=2.0,
                 itl_s=0.2), "p5.48xlarge", 1, prefix=w)  # fmt: skip
    assert c is not None and c.attention_dp
    room = math.floor(((max_concurrency(d, cfg) - c.concurrency) * 1224 / 768 + c.concurrency) / 8)
    assert 0 < room < 2000
    assert c.prefix_request_hit_rate == pytest.approx(math.ceil(100 * room / 2000 - 1e-9) / 100)
