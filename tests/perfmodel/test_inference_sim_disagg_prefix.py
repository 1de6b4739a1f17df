"""The prefill pool's prefix caches in a disaggregated split: hits by hand under the global queue and the cache-aware
router, a hit's prefill priced as exactly the uncached tokens with the KV transfer unchanged, and no change without a
prefix workload."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fmstack.catalog import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel.inference import ServeConfig, deployment
from fmstack.perfmodel.inference_prefix import PrefixWorkload
from fmstack.perfmodel.inference_sim import SimConfig
from fmstack.perfmodel.inference_sim_disagg import DisaggSim, pool_stats
from fmstack.perfmodel.inference_step import Deployment, step_time

# a hit leaves ISL - L = 1,024 tokens: one full budget; a miss is two full chunks. Each prefill replica then works on
# exactly one prompt at a time, so a prompt taken after another of its group on the same replica always hits
ISL, L, OSL, CHUNK, KV_S = 2048, 1024, 16, 1024, 0.002


@pytest.fixture(scope="module")
def setup(catalog: Catalog) -> tuple[Deployment, ServeConfig]:
    model = catalog.model("llama3.1-8b")
    cluster = build_cluster(catalog, "p5.48xlarge", 1)
    cfg = ServeConfig(tp=1, precision="fp8", input_len=ISL, output_len=OSL, max_num_tokens=CHUNK)
    return deployment(model, cluster, cfg), cfg


def _burst(
    d: Deployment, cfg: ServeConfig, groups: list[int], router: str, monkeypatch: pytest.MonkeyPatch, rate: float = 1e9
) -> DisaggSim:
    """``groups`` arriving at ``rate`` (1e9/s: a burst within nanoseconds) on 2 prefill + 1 decode replicas."""
    monkeypatch.setattr(PrefixWorkload, "draw", lambda self, rng, n: np.array(groups[:n], dtype=np.int64))
    sim = SimConfig(request_rate_per_s=rate, num_requests=len(groups), warmup_requests=0, seed=0, router=router,
                    prefix=PrefixWorkload(groups=4, prefix_len=L))  # fmt: skip
    s = DisaggSim(d, cfg, sim, prefill_replicas=2, decode_replicas=1, kv_transfer_s=KV_S)
    s.run()
    return s


GROUPS = [0, 0, 1, 1, 2, 2, 3, 3] * 2


def test_burst_hits_by_hand_global_queue_vs_cache_aware(
    setup: tuple[Deployment, ServeConfig], monkeypatch: pytest.MonkeyPatch
) -> None:
    """16 requests of groups 0 0 1 1 2 2 3 3 0 0 1 1 2 2 3 3 in a burst on 2 prefill replicas.

    Global queue (round-robin): replica 0 takes request 0, replica 1 request 1; both then run the same sequence of
    hits and misses, replica 0 always a nanosecond ahead, so it takes the even requests (groups 0 1 2 3 0 1 2 3) and
    replica 1 the odd ones (the same): each sees each group twice, misses its first sighting: 8 misses, 8 hits.
    Cache-aware: request 0 to replica 0 (equal empty trees, the lowest), request 1 follows group 0 there; group 1
    to replica 1 (smaller tree), group 2 to replica 0 (trees equal: 2,048 + 1,024 each), group 3 to replica 1 (its
    tree is smaller); the second half follows the groups: 4 misses (one per group), 12 hits."""
    d, cfg = setup
    rr = _burst(d, cfg, GROUPS, "round-robin", monkeypatch)
    assert [q.prefix_hit for q in rr._requests] == [False] * 8 + [True] * 8
    assert pool_stats(rr).prefix_hit_rate == 0.5
    ca = _burst(d, cfg, GROUPS, "cache-aware", monkeypatch)
    assert [q.rid for q in ca._requests if not q.prefix_hit] == [0, 2, 4, 6]
    st = pool_stats(ca)
    assert st.prefix_hit_rate == 12 / 16
    assert st.prefix_token_hit_rate == pytest.approx(12 * L / (16 * ISL))
    # every prompt's whole KV moved either way (a hit removes prefill work only)
    assert all(x == KV_S for x in ca.kv_moved.values()) and len(ca.kv_moved) == 16
    assert [c.hits for c in ca.prefix.caches] == [6, 6] and [c.lookups for c in ca.prefix.caches] == [8, 8]


def test_a_hit_prefills_exactly_its_uncached_tokens(
    setup: tuple[Deployment, ServeConfig], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two requests of one group far apart on one prefill replica: the second's prefill is one iteration of its
    ISL - L = 1,024 uncached tokens attending the cached 1,024 (context 1,024 x 1,024 + 1,024 x 1,025 / 2), the
    first's two chunks of 1,024; busy time falls by exactly the difference; both TTFTs add the same KV transfer."""
    d, cfg = setup
    monkeypatch.setattr(PrefixWorkload, "draw", lambda self, rng, n: np.zeros(n, dtype=np.int64))
    sim = SimConfig(request_rate_per_s=1e-4, num_requests=2, warmup_requests=0, seed=0,
                    prefix=PrefixWorkload(groups=1, prefix_len=L))  # fmt: skip
    s = DisaggSim(d, cfg, sim, prefill_replicas=1, decode_replicas=1, kv_transfer_s=KV_S)
    s.run()
    n = float(ISL - L)
    miss = [float(step_time(d, 0.0, 0.0, n, n * n * k + n * (n + 1) / 2, float(k == 1)).total_s) for k in range(2)]
    hit = float(step_time(d, 0.0, 0.0, n, n * L + n * (n + 1) / 2, 1.0).total_s)
    assert [t for _, t in s._prefill_log] == pytest.approx([*miss, hit], rel=1e-12)
    assert hit < miss[0] + miss[1]
    first = float(step_time(d, 1.0, float(ISL)).total_s)
    a, b = s._requests
    assert not a.prefix_hit and b.prefix_hit
    assert a.first_token_s - a.arrival_s == pytest.approx(sum(miss) + KV_S + first, abs=1e-6)
    assert b.first_token_s - b.arrival_s == pytest.approx(hit + KV_S + first, abs=1e-6)
    assert s.kv_moved == {0: KV_S, 1: KV_S}
    # after the transfers the prefix is unreferenced, evictable, inside the free part: the free part is the pool
    cache = s.prefix.caches[0]
    assert cache.tokens == L and cache.pinned_tokens == 0 and s.prefix.free_tokens[0] == s.prefix.pool_tokens


def test_kv_router_sends_a_cached_group_to_its_prefill_replica(
    setup: tuple[Deployment, ServeConfig], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Far apart (nothing in flight at an arrival), Dynamo's KV router picks the prefill replica whose cache holds the
    group (overlap 64 blocks lowers its cost), else a tie broken by its seeded draw: each group misses once."""
    d, cfg = setup
    s = _burst(d, cfg, [0, 1, 2, 3] * 4, "kv", monkeypatch, rate=1e-3)
    assert sum(not q.prefix_hit for q in s._requests) == 4
    assert s.prefix.router.kv is not None and s.prefix.router.kv.prefill_pool


def test_no_prefix_workload_is_unchanged(setup: tuple[Deployment, ServeConfig]) -> None:
    """Without a prefix workload the router is not read: the same requests, float for float."""
    d, cfg = setup
    out = []
    for router in ("round-robin", "kv"):
        sim = SimConfig(request_rate_per_s=20.0, num_requests=200, warmup_requests=20, seed=3, router=router)
        s = DisaggSim(d, cfg, sim, prefill_replicas=2, decode_replicas=1, kv_transfer_s=KV_S)
        s.run()
        assert s.prefix is None and math.isnan(pool_stats(s).prefix_hit_rate)
        out.append([(q.first_token_s, q.last_token_s) for q in s._requests])
    assert out[0] == out[1]


def test_refusals(setup: tuple[Deployment, ServeConfig]) -> None:
    d, cfg = setup
    sim = SimConfig(request_rate_per_s=1.0, num_requests=10, warmup_requests=0,
                    prefix=PrefixWorkload(groups=2, prefix_len=ISL))  # fmt: skip
    with pytest.raises(InputError, match="must be below --input-len"):
        DisaggSim(d, cfg, sim, prefill_replicas=1, decode_replicas=1, kv_transfer_s=KV_S)
    sim = SimConfig(request_rate_per_s=1.0, num_requests=10, warmup_requests=0,
                    prefix=PrefixWorkload(groups=2, prefix_len=L))  # fmt: skip
    with pytest.raises(InputError, match="either a scalar"):
        from dataclasses import replace

        DisaggSim(d, replace(cfg, prefix_hit_rate=0.5), sim, prefill_replicas=1, decode_replicas=1, kv_transfer_s=KV_S)
