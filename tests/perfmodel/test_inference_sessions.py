"""Multi-turn sessions in the joint replica simulation (fmstack.perfmodel.inference_session, inference_sim_session):
a hand-worked small case, the hit-rate invariants of sticky, KV-aware and round-robin routing, the think time and the
session rate, closed-loop clients and seed determinism."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from fmstack.catalog import load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel.inference import ServeConfig, deployment
from fmstack.perfmodel.inference_prefix import PrefixCache, PrefixWorkload
from fmstack.perfmodel.inference_router_kv import KvRouter, KvRouterConfig
from fmstack.perfmodel.inference_session import SessionWorkload, check_context, session_key
from fmstack.perfmodel.inference_sim_fleet import simulate_fleet
from fmstack.perfmodel.inference_sim_io import SimConfig, SimRequest
from fmstack.perfmodel.inference_sim_session import SessionRun, run_sessions

IN, OUT = 100, 20


@cache
def _d8b() -> object:
    cat = load_catalog()
    cfg = ServeConfig(input_len=IN, output_len=OUT, precision="fp8")
    return deployment(cat.model("llama3.1-8b"), build_cluster(cat, "p5.48xlarge", 1, part_of_domain=True), cfg)


def _run(*, turns: int, think: float, rate: float | None = 2.0, replicas: int = 1, router: str = "round-robin",
         n: int = 6, seed: int = 0, concurrency: int | None = None, prefix: PrefixWorkload | None = None,
         inp: int = IN, out: int = OUT) -> SessionRun:  # fmt: skip
    sim = SimConfig(request_rate_per_s=rate, concurrency=concurrency, replicas=replicas, router=router, num_requests=n,
                    warmup_requests=0, seed=seed, prefix=prefix,
                    sessions=SessionWorkload(turns=turns, think_time_s=think))  # fmt: skip
    return run_sessions(_d8b(), ServeConfig(input_len=inp, output_len=out, precision="fp8"), sim)  # type: ignore[arg-type]


def _later(run: SessionRun) -> list[SimRequest]:
    return [q for q in run.requests if q.turn > 1 and q.generated >= q.output_len]


def test_two_sessions_three_turns_by_hand() -> None:
    """One replica, 2 sessions of 3 turns of 100 new tokens and 20 out, no think time (so exactly 2 sessions) and
    no eviction. Turn 1: 100 prompt tokens, nothing cached; it leaves 100 + 20 = 120 cached. Turn 2: 120 + 100 = 220
    prompt tokens, 120 of them hit; it leaves 240. Turn 3: 240 + 100 = 340, 240 hit; it leaves 360. Both histories
    of 360 stay cached, unreferenced; every KV token is free again."""
    run = _run(turns=3, think=0.0)
    assert len(run.requests) == 6
    for sid in (0, 1):
        turns = sorted((q for q in run.requests if q.session == sid), key=lambda q: q.turn)
        assert [q.turn for q in turns] == [1, 2, 3]
        assert [q.input_len for q in turns] == [100, 220, 340]
        assert [q.history for q in turns] == [0, 120, 240]
        assert [q.prefix_hit for q in turns] == [False, True, True]
        assert [q.kv_shared if q.prefix_hit else 0 for q in turns] == [0, 120, 240]
        assert all(q.generated == OUT for q in turns)
        # think time 0: the next turn arrives as the last one's last token comes out
        assert [q.arrival_s for q in turns[1:]] == [q.last_token_s for q in turns[:2]]
    (rep,) = run.replicas
    cache_ = rep.prefix_caches[0]
    assert (cache_.tokens, cache_.pinned_tokens) == (720, 0)
    assert cache_.size(session_key(0)) == cache_.size(session_key(1)) == 360
    assert rep._kv_tokens_free == rep.kv_pool_tokens  # the whole pool free once all have finished


def _followed(run: SessionRun) -> tuple[list[SimRequest], list[SimRequest]]:
    """The later turns, and those sent to the replica that served their session's turn before."""
    where = {id(q): k for k, r in enumerate(run.replicas) for q in r.requests}
    before = {(q.session, q.turn): q for q in run.requests}
    later = _later(run)
    return later, [q for q in later if where[id(q)] == where[id(before[(q.session, q.turn - 1)])]]


def test_later_turns_hit_their_whole_history_where_the_last_turn_ran() -> None:
    """A large cache (8B fp8 on an H100: about a million KV tokens), low load. Whatever the router, a later turn sent
    where its session's turn before ran finds its whole history there. Sticky session affinity and SGLang's
    cache-aware router (its tree matches the last prompt: (t - 1) x 120 - 20 of (t - 1) x 120 + 100 tokens, above
    the 0.3 threshold; the load never imbalanced by 64 requests here) always send it there, so the share of later
    turns' prompt tokens served from the cache is sum(history) / sum(history + new) exactly. Dynamo's KV router
    mostly does (the active-blocks term can outweigh a short history's blocks), least-loaded less, round-robin about
    one time in 4."""
    share = {}
    for router in ("session", "cache-aware", "kv", "least-loaded", "round-robin"):
        later, followed = _followed(_run(turns=6, think=1.0, rate=2.0, replicas=4, router=router, n=600))
        assert len(later) > 300
        assert all(q.prefix_hit and q.kv_shared == q.history for q in followed)
        share[router] = len(followed) / len(later)
        got = sum(q.kv_shared for q in later if q.prefix_hit) / sum(q.input_len for q in later)
        ideal = sum(q.history for q in later) / sum(q.input_len for q in later)
        if share[router] == 1.0:
            assert got == ideal
        assert got <= ideal
    assert share["session"] == share["cache-aware"] == 1.0
    assert 1.0 > share["kv"] > share["least-loaded"] > share["round-robin"]


@pytest.mark.parametrize("router", ["round-robin", "random"])
def test_scattering_routers_hit_a_full_history_one_time_in_r(router: str) -> None:
    """R = 4 replicas, a big cache: a later turn finds its whole history only where the turn before it ran, which a
    router blind to sessions picks one time in R; it finds some history (a stale shorter one) where any earlier turn
    of its session ran: ``1 - (1 - 1/R)^(t - 1)`` for turn t."""
    r = 4
    run = _run(turns=4, think=0.5, rate=4.0, replicas=r, router=router, n=4000)
    later = _later(run)
    full = sum(q.prefix_hit and q.kv_shared == q.history for q in later) / len(later)
    assert full == pytest.approx(1 / r, abs=0.04)
    for t in (2, 3, 4):
        qs = [q for q in later if q.turn == t]
        assert sum(q.prefix_hit for q in qs) / len(qs) == pytest.approx(1 - (1 - 1 / r) ** (t - 1), abs=0.06)


def test_think_time_and_session_rate() -> None:
    """Turn t + 1 arrives an exponential think time (mean 2 s) after turn t's last token; sessions start at qps x
    replicas / turns per second (qps counts requests)."""
    run = _run(turns=4, think=2.0, rate=3.0, replicas=2, n=2000)
    by = {(q.session, q.turn): q for q in run.requests}
    gaps = [q.arrival_s - by[(q.session, q.turn - 1)].last_token_s for q in run.requests if q.turn > 1]
    assert min(gaps) >= 0
    # means of n exponential draws: within 4 standard errors (1 / sqrt(n) of the mean)
    assert np.mean(gaps) == pytest.approx(2.0, rel=4 / np.sqrt(len(gaps)))
    starts = sorted(q.arrival_s for q in run.requests if q.turn == 1)
    assert np.mean(np.diff(starts)) == pytest.approx(4 / (3.0 * 2), rel=4 / np.sqrt(len(starts) - 1))


def test_closed_loop_clients_run_sessions_back_to_back() -> None:
    """8 clients: at most 8 sessions in flight; a client's next session starts after its last turn ends."""
    run = _run(turns=3, think=0.2, rate=None, concurrency=8, n=300)
    events = sorted([(q.arrival_s, 1) for q in run.requests] + [(q.last_token_s, -1) for q in run.requests])
    live = np.cumsum([e for _, e in events])
    assert live.max() <= 8
    assert {q.session for q in run.requests} == set(range(max(q.session for q in run.requests) + 1))
    assert all(q.generated == q.output_len for q in run.requests)


def test_seed_determinism() -> None:
    one, two = (_run(turns=4, think=0.5, rate=4.0, replicas=4, router="kv", n=400) for _ in range(2))
    assert [(q.arrival_s, q.first_token_s, q.input_len, q.kv_shared) for q in one.requests] == [
        (q.arrival_s, q.first_token_s, q.input_len, q.kv_shared) for q in two.requests
    ]
    other = _run(turns=4, think=0.5, rate=4.0, replicas=4, router="kv", n=400, seed=1)
    assert [q.arrival_s for q in other.requests] != [q.arrival_s for q in one.requests]


def test_system_prefix_on_first_turns() -> None:
    """A shared system prefix (one group of 60 tokens) on the first turns: all but the first first turn on each
    replica hit it (59 tokens: the last prompt token is computed again only on a full hit, here 60 < 100 - 1)."""
    run = _run(turns=3, think=0.5, rate=2.0, replicas=2, router="session", n=300,
               prefix=PrefixWorkload(groups=1, prefix_len=60))  # fmt: skip
    first = [q for q in run.requests if q.turn == 1]
    assert sum(not q.prefix_hit for q in first) <= 2
    assert {q.kv_shared for q in first if q.prefix_hit} == {60}


def test_fleet_result_sessions_block() -> None:
    sim = SimConfig(request_rate_per_s=2.0, replicas=2, router="session", num_requests=300, warmup_requests=0,
                    sessions=SessionWorkload(turns=3, think_time_s=0.5))  # fmt: skip
    f = simulate_fleet(_d8b(), ServeConfig(input_len=IN, output_len=OUT, precision="fp8"), sim)  # type: ignore[arg-type]
    s = f.sessions
    assert s is not None
    assert (s["turns"], s["think_time_s"], s["hit_rate_later_turns"]) == (3, 0.5, 1.0)
    by_turn = s["by_turn"]
    assert isinstance(by_turn, list)
    assert [b["mean_prompt_tokens"] for b in by_turn] == [100.0, 220.0, 340.0]
    n2, n3 = by_turn[1]["requests"], by_turn[2]["requests"]
    assert s["token_hit_rate_later_turns"] == pytest.approx((n2 * 120 + n3 * 240) / (n2 * 220 + n3 * 340))
    assert "sessions" in f.to_json()


def test_kv_router_overlaps_the_cached_history() -> None:
    """Dynamo's cost on a later turn (history 320 of a 420-token prompt, 16-token blocks): the worker holding the
    whole history saves its 20 prefill blocks, one holding a stale 160 saves 10."""
    caches = [PrefixCache(), PrefixCache(), PrefixCache()]
    caches[1].store(session_key(7), 320, 1e9)
    caches[2].store(session_key(7), 160, 1e9)
    req = SimRequest(0, 0.0, 420, 20, group=session_key(7), session=7, turn=3, history=320)
    router = KvRouter(KvRouterConfig(), 3, np.random.default_rng(0))
    assert router.pick(req, caches, 0) == 1
    base = 420 / 16 + 420 // 16
    assert router.last_costs == pytest.approx([base, base - 20, base - 10])


def test_session_workload_checks() -> None:
    with pytest.raises(InputError, match="turns: must be >= 1"):
        SessionWorkload(turns=0)
    with pytest.raises(InputError, match="think-time-s"):
        SessionWorkload(turns=2, think_time_s=float("nan"))
    check_context(SessionWorkload(turns=4), 512, 256, 4 * 768)  # exactly the context: accepted
    with pytest.raises(InputError, match="= 3072 exceed the model's context of 3071"):
        check_context(SessionWorkload(turns=4), 512, 256, 4 * 768 - 1)
    with pytest.raises(InputError, match="router: must be one of"):
        SimConfig(request_rate_per_s=1.0, router="session")


def test_small_pool_evicts_and_gives_every_token_back() -> None:
    """Llama 3.1 70B bf16 on TP 2 leaves a KV pool of 58,368 tokens a replica: 8-turn sessions of up to 6,144 tokens
    evict histories (some later turns on their last turn's replica miss), and at the end every replica's pool is
    whole again: its free part the pool, no history referenced, the cached ones inside the free part."""
    cat = load_catalog()
    cfg = ServeConfig(input_len=512, output_len=256, precision="bf16", tp=2)
    d = deployment(cat.model("llama3.1-70b"), build_cluster(cat, "p5.48xlarge", 1, part_of_domain=True), cfg)
    sim = SimConfig(request_rate_per_s=1.0, replicas=2, router="session", num_requests=1200, warmup_requests=0,
                    length_spread=0.3, sessions=SessionWorkload(turns=8, think_time_s=5.0))  # fmt: skip
    run = run_sessions(d, cfg, sim)
    later, followed = _followed(run)
    assert len(followed) == len(later)
    assert sum(not q.prefix_hit for q in followed) > 0
    for rep in run.replicas:
        (c,) = rep.prefix_caches
        assert rep._kv_tokens_free == rep.kv_pool_tokens == 58_368
        assert c.pinned_tokens == 0 and 0 < c.tokens <= rep.kv_pool_tokens
