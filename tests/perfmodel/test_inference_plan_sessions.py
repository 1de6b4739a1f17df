"""`plan serve --turns N` (session 19, helper E): the mean turn a multi-turn workload is screened at and the history
hits each router gives it, by hand; the session router against round-robin; one turn is the plan of before
(docs/inference.md, Multi-turn sessions and Planner)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from fmstack.catalog import load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.perfmodel.inference import ServeConfig, deployment_for, estimate_serve
from fmstack.perfmodel.inference_disagg import SLO
from fmstack.perfmodel.inference_open_loop import simulate_open_loop_fleet
from fmstack.perfmodel.inference_plan import plan_serve
from fmstack.perfmodel.inference_plan_analytic import analytic
from fmstack.perfmodel.inference_plan_session import fewest_replicas, holds_conversation
from fmstack.perfmodel.inference_session import SessionWorkload
from fmstack.perfmodel.inference_session_mean import (
    cache_units,
    cached_tokens,
    hit_turns,
    mean_prompt_tokens,
    screen_config,
)

FOUR = SessionWorkload(turns=4, think_time_s=10.0)
SLO_CHAT = SLO(ttft_s=1.0, itl_s=0.05)


def test_mean_turn_by_hand() -> None:
    # turns of 512 new + 256 out: prompts 512, 1,280, 2,048, 2,816; mean 1,664 = 512 + 3 / 2 x 768
    assert mean_prompt_tokens(FOUR, 512, 256) == 1664.0
    assert mean_prompt_tokens(SessionWorkload(turns=1), 512, 256) == 512.0
    # where the turn before ran: its whole history, (t - 1) x 768
    assert [cached_tokens(t, 512, 256, 1) for t in (1, 2, 3, 4)] == [0.0, 768.0, 1536.0, 2304.0]
    # no cache: nothing
    assert [cached_tokens(t, 512, 256, None) for t in (1, 2, 3, 4)] == [0.0] * 4
    # 4 caches, blind: turn 3 finds turn 2's 1,536 one time in 4, else turn 1's 768 one time in 4 of the 3 in 4
    assert cached_tokens(3, 512, 256, 4) == pytest.approx(0.25 * 1536 + 0.75 * 0.25 * 768)
    # the share of turns that find something: 0, 1/4, 7/16, 37/64 over 4 turns
    assert hit_turns(FOUR, 4) == pytest.approx((0 + 16 + 28 + 37) / 64 / 4)
    assert hit_turns(FOUR, 1) == 0.75 and hit_turns(FOUR, None) == 0.0


def test_prefill_work_grows_by_the_mean_history_without_a_cache() -> None:
    """No cache: each turn computes its whole prompt, 512 + the mean history 3 / 2 x 768 = 1,664 new tokens on
    average; every turn following its history computes only its 512 new ones (1,152 of 1,664 cached)."""
    cfg = ServeConfig(input_len=512, output_len=256)
    none = screen_config(cfg, FOUR, None)
    assert (none.input_len, none.prefix_hit_rate) == (1664, 0.0)
    follow = screen_config(cfg, FOUR, 1)
    assert follow.input_len == 1664 and follow.prefix_hit_rate == pytest.approx(1152 / 1664)
    assert follow.input_len - math.floor(follow.prefix_hit_rate * follow.input_len) == 512
    # an odd history rounds the mean prompt up: 3 turns of 100 + 21: 100 + 121 = 221
    assert screen_config(ServeConfig(input_len=100, output_len=21), SessionWorkload(turns=3), None).input_len == 221
    assert cache_units("session", 7, 1) == 1 and cache_units("kv", 7, 8) == 8
    assert cache_units("round-robin", 7, 1) == 7 and cache_units("random", None, 8) is None


def test_screened_prefill_time_grows_as_the_mean_prompt() -> None:
    """The analytic model's prompt work at the screened mean turn, no cache: a single request's TTFT (one prompt
    alone, concurrency 1) is that of a 1,664-token prompt, more than a 512-token one's."""
    cat = load_catalog()
    arch, cluster = cat.model("llama3.1-8b"), build_cluster(cat, "p5.48xlarge", 1, part_of_domain=True)
    one = ServeConfig(input_len=512, output_len=256, concurrency=1)
    screened = screen_config(one, FOUR, None)
    direct = replace(one, input_len=1664)
    assert estimate_serve(arch, cluster, screened).ttft_s == estimate_serve(arch, cluster, direct).ttft_s
    assert estimate_serve(arch, cluster, screened).ttft_s > estimate_serve(arch, cluster, one).ttft_s


def test_fewest_replicas_is_the_fixed_point() -> None:
    # rate(N) = 10 / (1 + N / 10) (hits fall with N): qps 30 -> N = 4 (4 x 10 / 1.4 = 28.6 < 30), 5 (33.3 >= 30)
    def at(n: int | None) -> tuple[float, int] | None:
        return (10.0 / (1 + (n or 10**9) / 10), n or 0)

    assert fewest_replicas(at, 30.0) == (5, 5)
    assert fewest_replicas(at, 5.0) == (1, 1)
    assert fewest_replicas(lambda n: None if (n or 99) > 2 else (1.0, 0), 5.0) is None


@pytest.mark.parametrize("qps", [2.0, 10.0, 40.0])
def test_session_router_screens_no_more_replicas_than_round_robin(qps: float) -> None:
    """Invariant: following the history caches at least what a blind router does at any replica count (``u = 1``
    against ``u = N``), so its rate is at least as high and it needs no more replicas."""
    cat = load_catalog()
    arch, cluster = cat.model("llama3.1-70b"), build_cluster(cat, "p5.48xlarge", 1, part_of_domain=True)
    for tp in (2, 4, 8):
        for chunk in (512, 2048):
            cfg = ServeConfig(tp=tp, precision="fp8", input_len=512, output_len=256, max_num_tokens=chunk)
            got = {
                r: analytic(cfg, cluster, arch, qps, SLO_CHAT, "p5.48xlarge", 1, sessions=FOUR, router=r)
                for r in ("session", "round-robin")
            }
            if got["round-robin"] is not None:
                assert got["session"] is not None
                assert got["session"].replicas <= got["round-robin"].replicas
                assert got["session"].prefix_hit_rate >= got["round-robin"].prefix_hit_rate


def test_screened_row_is_its_mean_turn() -> None:
    """A session row's rate, TTFT and ITL are `estimate serve`'s at the mean turn and its screened hit share (its
    estimate_command), at the row's concurrency."""
    cat = load_catalog()
    arch, cluster = cat.model("llama3.1-70b"), build_cluster(cat, "p5.48xlarge", 1, part_of_domain=True)
    cfg = ServeConfig(tp=4, precision="fp8", input_len=512, output_len=256, max_num_tokens=512)
    c = analytic(cfg, cluster, arch, 4.0, SLO_CHAT, "p5.48xlarge", 1, sessions=FOUR, router="session")
    assert c is not None and c.prefix_hit_rate == pytest.approx(1152 / 1664)
    est = estimate_serve(
        arch, cluster, replace(cfg, input_len=1664, prefix_hit_rate=c.prefix_hit_rate, concurrency=c.concurrency)
    )
    assert est.requests_per_s == pytest.approx(c.rate_per_replica_rps, rel=1e-9)
    assert est.ttft_s == pytest.approx(c.mean_ttft_s, rel=1e-9) and est.itl_s == pytest.approx(c.mean_itl_s, rel=1e-9)


def test_a_pool_that_cannot_hold_the_conversation_is_not_a_candidate() -> None:
    cat = load_catalog()
    arch, cluster = cat.model("llama3.1-70b"), build_cluster(cat, "p5.48xlarge", 1, part_of_domain=True)
    cfg = ServeConfig(tp=2, precision="bf16", input_len=8192, output_len=1024)
    d = deployment_for(arch, cluster, cfg)
    long = SessionWorkload(turns=12)  # 110,592 tokens: more than TP 2 bf16's pool (about 58,000 tokens)
    assert not holds_conversation(d, cfg, long)
    assert analytic(cfg, cluster, arch, 1.0, SLO(ttft_s=10, itl_s=1), "p5.48xlarge", 1, sessions=long) is None
    assert holds_conversation(d, cfg, SessionWorkload(turns=2))


def test_one_turn_is_the_plan_of_before() -> None:
    cat = load_catalog()
    kw = {"qps": 20.0, "input_len": 1024, "output_len": 256, "slo": SLO(ttft_s=0.5, itl_s=0.03),
          "instances": ("p5.48xlarge",)}  # fmt: skip
    assert plan_serve(cat, cat.model("llama3.1-8b"), **kw) == plan_serve(cat, cat.model("llama3.1-8b"), **kw,
                                                                          sessions=None)  # fmt: skip


def test_session_plan_needs_no_more_gpus_than_round_robin() -> None:
    """The measured example (docs/inference.md, Planner): Llama 3.1 70B, 40 req/s of 4-turn sessions, 512 new / 256
    out per turn, 10 s think time, TTFT p99 1 s, ITL p99 50 ms, on p5.48xlarge. Invariant asserted: the session
    router's plan takes no more GPUs nor dollars than round-robin's; both verified by simulation."""
    cat = load_catalog()
    kw = {"qps": 40.0, "input_len": 512, "output_len": 256, "slo": SLO_CHAT, "instances": ("p5.48xlarge",),
          "sessions": FOUR}  # fmt: skip
    rr = plan_serve(cat, cat.model("llama3.1-70b"), **kw)
    sess = plan_serve(cat, cat.model("llama3.1-70b"), **kw, router="session")
    assert rr.best.meets_slo and sess.best.meets_slo
    assert sess.best.num_gpus <= rr.best.num_gpus
    assert sess.best.cost_per_hour_usd <= rr.best.cost_per_hour_usd
    # splits are searched with sessions since session 19 (helper H): here a split is the best of both plans
    assert rr.best.mode == sess.best.mode == "disaggregated"
    assert rr.sessions == FOUR and rr.disaggregation is None


@pytest.mark.parametrize("router", ["round-robin", "session"])
def test_screened_history_share_is_optimistic(router: str) -> None:
    """The screening counts every history as cached (no eviction): the simulated sessions, run at the screened
    replicas, serve no larger share of prompt tokens from the cache. Behind the session router the screened share is an
    upper bound (every later turn hits its whole history); behind round-robin it is the expectation under independent
    routing, so the margin is thin: here 2 replicas each, round-robin 32.4 % screened vs 32.2 % simulated, session
    55.6 % vs 54.0 % (70B at 40 req/s, 5 and 3 replicas: 20.9 % vs 19.7 %, 69.2 % vs 67.6 %)."""
    cat = load_catalog()
    arch, cluster = cat.model("llama3.1-8b"), build_cluster(cat, "p5.48xlarge", 1, part_of_domain=True)
    cfg = ServeConfig(tp=1, precision="fp8", input_len=512, output_len=128, max_num_tokens=512)
    three = SessionWorkload(turns=3, think_time_s=5.0)
    c = analytic(cfg, cluster, arch, 60.0, SLO(ttft_s=0.5, itl_s=0.02), "p5.48xlarge", 1, sessions=three, router=router)
    assert c is not None and c.replicas > 1
    d = deployment_for(arch, cluster, cfg)
    _, fleet = simulate_open_loop_fleet(d, cfg, 60.0 / c.replicas, replicas=c.replicas, router=router, sessions=three)
    assert fleet is not None and fleet.sessions is not None
    simulated = fleet.sessions["token_hit_rate"]
    assert isinstance(simulated, float) and 0 < simulated <= c.prefix_hit_rate


@pytest.mark.parametrize("turns", [2, 3, 4, 7])
def test_session_router_screens_every_turn_count(turns: int) -> None:
    """Behind the session router every later turn hits its history, whatever the turn count: a layout whose chunk
    budget exceeds the mean prompt is screened at the new tokens past the history. Regression: the test was a float
    comparison ``hit_turns >= 1 - 1 / N``, False at N = 3 and 7 ((N - 1) / N rounds below), which rejected the
    70B TP4 chunk-2048 layout at 3 and 7 turns (19.3 and 16.1 req/s per replica once fixed)."""
    cat = load_catalog()
    arch, cluster = cat.model("llama3.1-70b"), build_cluster(cat, "p5.48xlarge", 1, part_of_domain=True)
    cfg = ServeConfig(tp=4, precision="fp8", input_len=512, output_len=256, max_num_tokens=2048)
    sessions = SessionWorkload(turns=turns, think_time_s=10.0)
    c = analytic(cfg, cluster, arch, 40.0, SLO_CHAT, "p5.48xlarge", 1, sessions=sessions, router="session")
    assert c is not None
    assert c.prefix_request_hit_rate == pytest.approx((turns - 1) / turns)


def test_first_turn_system_prefix_by_hand() -> None:
    """Session 20: a shared system prefix's first-turn hits. ``screen_config`` adds the first turn's expected cached
    tokens over the turns (none without a cache); ``first_turn_prefix`` is Che's figure in the mean turn's whole pool:
    1 where every group fits, below 1 where a uniform popularity over many long prefixes does not."""
    from fmstack.perfmodel.inference_prefix import PrefixWorkload
    from fmstack.perfmodel.inference_session_mean import first_turn_prefix

    cfg = ServeConfig(tp=1, precision="fp8", input_len=512, output_len=256)
    base = screen_config(cfg, FOUR, 1)
    with_prefix = screen_config(cfg, FOUR, 1, 200.0)
    assert with_prefix.prefix_hit_rate * 1664 == pytest.approx(base.prefix_hit_rate * 1664 + 200 / 4, rel=1e-12)
    assert screen_config(cfg, FOUR, None, 200.0).prefix_hit_rate == 0.0
    assert hit_turns(FOUR, 1, 0.5) == pytest.approx((0 + 1 + 1 + 1 + 0.5) / 4)
    cat = load_catalog()
    d = deployment_for(cat.model("llama3.1-8b"), build_cluster(cat, "p5.48xlarge", 1), base)
    assert first_turn_prefix(PrefixWorkload(groups=4, prefix_len=256), d, base, 512, 1, "session") == (1.0, 256.0)
    assert first_turn_prefix(None, d, base, 512, 1, "session") == (0.0, 0.0)
    assert first_turn_prefix(PrefixWorkload(groups=4, prefix_len=256), d, base, 512, None, "round-robin") == (0.0, 0.0)
    many = PrefixWorkload(groups=100_000, prefix_len=511)
    hit, tokens = first_turn_prefix(many, d, base, 512, 1, "session")
    assert 0.0 < hit < 1.0 and tokens == hit * 511


def test_session_text_names_the_system_prefix_hits() -> None:
    from fmstack.perfmodel.inference_plan_candidate import Candidate
    from fmstack.perfmodel.inference_plan_session import session_plan_text

    row = Candidate(instance="p5.48xlarge", gpu="H100", precision="fp8", tp=2, ep=1, pp=1, nodes_per_replica=1,
                    replicas=3, nodes=1, num_gpus=8, cost_per_hour_usd=55.04, max_num_tokens=512,
                    rate_per_replica_rps=35.0, concurrency=68, mean_ttft_s=0.03, mean_itl_s=0.005,
                    prefix_hit_rate=21760 / 59904, prefix_request_hit_rate=0.648)  # fmt: skip
    plain = session_plan_text(FOUR, row, 512, 256, "round-robin")
    both = session_plan_text(FOUR, row, 512, 256, "round-robin", system_prefix=True)
    assert "36.3% of prompt tokens from cached history (65% of turns hit" in plain
    assert "36.3% of prompt tokens from cached history and the system prefixes of first turns (65%" in both
