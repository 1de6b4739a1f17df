"""Multi-turn sessions in a disaggregated split (:mod:`fmstack.perfmodel.inference_sim_disagg_session`): later turns'
prefill tokens by hand behind the session router, each turn's KV transfer priced at its whole prompt, the blind
router's hits against the screening's formula, the colocated run's session arrivals, and the same seed's same run."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fmstack.catalog import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel.inference import ServeConfig, deployment
from fmstack.perfmodel.inference_plan_disagg_session import cached_prompt_tokens
from fmstack.perfmodel.inference_session import SessionWorkload
from fmstack.perfmodel.inference_sim import SimConfig
from fmstack.perfmodel.inference_sim_disagg_session import SessionDisaggSim
from fmstack.perfmodel.inference_sim_session import run_sessions
from fmstack.perfmodel.inference_step import Deployment

ISL, OSL, TURNS = 512, 256, 4


@pytest.fixture(scope="module")
def setup(catalog: Catalog) -> tuple[Deployment, ServeConfig]:
    model = catalog.model("llama3.1-8b")
    cluster = build_cluster(catalog, "p5.48xlarge", 1)
    cfg = ServeConfig(tp=1, precision="fp8", input_len=ISL, output_len=OSL)
    return deployment(model, cluster, cfg), cfg


def _kv_s(tokens: int) -> list[list[float]]:
    """A made-up link: 1 ms per 1,000 prompt tokens for every pair (4 prefill x 1 decode)."""
    return [[tokens * 1e-6] for _ in range(4)]


def _sim(d: Deployment, cfg: ServeConfig, router: str, seed: int = 0, rate: float = 8.0) -> SessionDisaggSim:
    sim = SimConfig(request_rate_per_s=rate, num_requests=1000, warmup_requests=0, seed=seed, router=router,
                    sessions=SessionWorkload(turns=TURNS, think_time_s=2.0))  # fmt: skip
    s = SessionDisaggSim(d, cfg, sim, prefill_replicas=4, decode_replicas=1, kv_time=_kv_s)
    s.run()
    return s


def test_session_router_later_turns_compute_the_last_answer_and_the_new_message(
    setup: tuple[Deployment, ServeConfig],
) -> None:
    """Behind the session router every later turn lands on the prefill replica that ran its turn before, which
    holds that turn's prompt, ``(t - 2) x 768 + 512`` tokens (the answer was generated on the decode replica): turn
    ``t``'s prompt is ``(t - 1) x 768 + 512``, so it computes 768 = 256 (the last answer) + 512 (the new message);
    a first turn computes its 512. Each turn's KV transfer is its whole prompt's (``kv_time`` of its length)."""
    d, cfg = setup
    s = _sim(d, cfg, "session")
    turns = [q for q in s.measured() if q.generated >= q.output_len]
    assert {q.turn for q in turns} == {1, 2, 3, 4}
    for q in turns:
        assert q.input_len == (q.turn - 1) * (ISL + OSL) + ISL
        assert q.input_len - q.kv_shared == (ISL if q.turn == 1 else OSL + ISL)
        assert q.prefix_hit == (q.turn > 1)
        assert s.kv_moved[q.rid] == q.input_len * 1e-6


def test_blind_router_hits_as_the_screening_formula(setup: tuple[Deployment, ServeConfig]) -> None:
    """Round-robin over 4 prefill replicas is blind to sessions: turn ``t`` lands on the replica of its turn before
    about 1 / 4 of the time (then it computes 768 tokens, as behind the session router, whose share is 1), finds some
    earlier prompt with probability ``1 - (3 / 4)^(t - 1)``, and its cached tokens average
    :func:`cached_prompt_tokens` (the split's screening). Tolerance: about 3 binomial standard deviations of ~260
    turns per turn number (0.08 on a share, 0.06 on the token shares), the seed fixed."""
    d, cfg = setup
    s = _sim(d, cfg, "round-robin")
    later = [q for q in s.measured() if q.generated >= q.output_len and q.turn > 1]
    full = sum(q.input_len - q.kv_shared == OSL + ISL for q in later) / len(later)
    assert abs(full - 1 / 4) <= 0.08
    for t in range(2, TURNS + 1):
        qs = [q for q in later if q.turn == t]
        hit = sum(q.prefix_hit for q in qs) / len(qs)
        assert abs(hit - (1 - (3 / 4) ** (t - 1))) <= 0.08
        prompt = (t - 1) * (ISL + OSL) + ISL
        cached = float(np.mean([q.kv_shared for q in qs]))
        assert abs(cached / prompt - cached_prompt_tokens(t, ISL, OSL, 4) / prompt) <= 0.06


def test_cached_prompt_tokens_by_hand() -> None:
    """One cache (the session router): turn t finds turn t-1's prompt, (t - 2) x 768 + 512; turn 1 nothing. Two
    caches, turn 3: turn 2's prompt (1,280) with probability 1/2, turn 1's (512) with 1/4: 640 + 128 = 768."""
    assert [cached_prompt_tokens(t, ISL, OSL, 1) for t in (1, 2, 3, 4)] == [0.0, 512.0, 1280.0, 2048.0]
    assert math.isclose(cached_prompt_tokens(3, ISL, OSL, 2), 768.0)
    assert cached_prompt_tokens(3, ISL, OSL, None) == 0.0


def test_same_seed_same_run_and_the_colocated_arrivals(setup: tuple[Deployment, ServeConfig]) -> None:
    """The same seed gives the same turns, float for float; another seed other ones. The sessions start when the
    colocated run's do at the same deployment rate and seed (2 replicas at 4 req/s each: 8 req/s in all)."""
    d, cfg = setup
    a, b, c = _sim(d, cfg, "kv"), _sim(d, cfg, "kv"), _sim(d, cfg, "kv", seed=1)
    key = [(q.arrival_s, q.input_len, q.first_token_s, q.last_token_s) for q in a._requests]
    assert key == [(q.arrival_s, q.input_len, q.first_token_s, q.last_token_s) for q in b._requests]
    assert key != [(q.arrival_s, q.input_len, q.first_token_s, q.last_token_s) for q in c._requests]
    colo = run_sessions(d, cfg, SimConfig(request_rate_per_s=4.0, num_requests=1000, warmup_requests=0, seed=0,
                                          replicas=2, sessions=SessionWorkload(turns=TURNS, think_time_s=2.0)))  # fmt: skip
    starts = sorted(q.arrival_s for q in a._requests if q.turn == 1)
    colo_starts = sorted(q.arrival_s for q in colo.requests if q.turn == 1)
    n = min(len(starts), len(colo_starts))
    assert n > 200 and starts[:n] == colo_starts[:n]


def test_refusals(setup: tuple[Deployment, ServeConfig]) -> None:
    """A split's sessions need the session workload; a scalar prefix hit rate is refused (the run gives the hits)."""
    d, cfg = setup
    sim = SimConfig(request_rate_per_s=1.0, num_requests=10, warmup_requests=0, seed=0)
    with pytest.raises(InputError, match="turns"):
        SessionDisaggSim(d, cfg, sim, prefill_replicas=1, decode_replicas=1, kv_time=lambda n: [[0.0]])
    with_sessions = SimConfig(
        request_rate_per_s=1.0, num_requests=10, warmup_requests=0, seed=0, sessions=SessionWorkload(turns=2)
    )
    hit = ServeConfig(tp=1, precision="fp8", input_len=ISL, output_len=OSL, prefix_hit_rate=0.5)
    with pytest.raises(InputError, match="prefix-hit-rate"):
        SessionDisaggSim(d, hit, with_sessions, prefill_replicas=1, decode_replicas=1, kv_time=lambda n: [[0.0]])
