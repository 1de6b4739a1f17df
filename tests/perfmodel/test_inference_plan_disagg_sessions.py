"""`plan serve --turns N` screens disaggregated splits (session 19, helper H): the split's mean turn by hand (the
prefill caches hold each session's previous prompt, not its answer), the blind router's fixed point over the prefill
caches, attention-DP pools left out (docs/inference.md, Planner: Multi-turn sessions; Multi-turn sessions in a
split)."""

from __future__ import annotations

import pytest

from fmstack.catalog import load_catalog
from fmstack.catalog.schema import ModelArch
from fmstack.catalog.topology import Cluster, build_cluster
from fmstack.perfmodel.inference import ServeConfig
from fmstack.perfmodel.inference_disagg import SLO
from fmstack.perfmodel.inference_plan_candidate import ClusterOf
from fmstack.perfmodel.inference_plan_disagg_session import (
    cached_prompt_tokens,
    screen_split,
    session_split_analytic,
)
from fmstack.perfmodel.inference_session import SessionWorkload
from fmstack.perfmodel.inference_session_mean import hit_turns

FOUR = SessionWorkload(turns=4, think_time_s=5.0)
SLO_SPLIT = SLO(ttft_s=0.5, itl_s=0.012)
CFG = ServeConfig(tp=1, precision="fp8", input_len=512, output_len=256, max_num_tokens=2048)


@pytest.fixture(scope="module")
def setup() -> tuple[ModelArch, ClusterOf]:
    cat = load_catalog()
    clusters: dict[tuple[str, int], Cluster] = {}

    def cluster_of(name: str, nodes: int) -> Cluster:
        if (name, nodes) not in clusters:
            clusters[name, nodes] = build_cluster(cat, name, nodes, part_of_domain=True)
        return clusters[name, nodes]

    return cat.model("llama3.1-8b"), cluster_of


def test_split_mean_turn_by_hand(setup: tuple[ModelArch, ClusterOf]) -> None:
    """Behind the session router every later turn lands on the prefill replica of its turn before, which holds that
    turn's prompt (not its answer): turns 2, 3, 4 find 512, 1,280, 2,048 tokens and compute 768 each (the last
    answer's 256 and the new 512), turn 1 its 512: (512 + 3 x 768) / 4 = 704 of the mean prompt's 1,664 computed,
    960 cached (57.7 %), against 1,152 (69.2 %) on a colocated replica, which keeps the answer too."""
    model, cluster_of = setup
    assert [cached_prompt_tokens(t, 512, 256, 1) for t in (1, 2, 3, 4)] == [0.0, 512.0, 1280.0, 2048.0]
    c = session_split_analytic(CFG, cluster_of, model, 150.0, SLO_SPLIT, "p5.48xlarge", 1, FOUR,
                               router="session")  # fmt: skip
    assert c is not None and c.mode == "disaggregated"
    assert c.prefix_hit_rate == 960 / 1664
    assert 1664 - c.prefix_hit_rate * 1664 == pytest.approx(704) == (512 + 3 * 768) / 4
    assert c.prefix_request_hit_rate == 0.75  # turns 2-4 of 4
    # the same split screened for independent turns of the mean prompt, its prefill computing all of it, needs no
    # fewer prefill replicas; the decode pool holds the same mean context either way
    whole = screen_split(ServeConfig(tp=1, precision="fp8", input_len=1664, output_len=256, max_num_tokens=2048),
                         cluster_of, model, 150.0, SLO_SPLIT, "p5.48xlarge", 1)  # fmt: skip
    assert whole is not None
    assert whole.prefill_replicas >= c.prefill_replicas and whole.decode_replicas == c.decode_replicas


def test_blind_router_screens_the_hits_of_its_own_prefill_replicas(setup: tuple[ModelArch, ClusterOf]) -> None:
    """Behind round-robin a turn lands on each of the ``P`` prefill caches one time in ``P``: two caches give turns
    2-4 256, 768 (1/4 x 512 + 1/2 x 1,280) and 1,408 (1/8 x 512 + 1/4 x 1,280 + 1/2 x 2,048) tokens; the row is
    screened at the hits of its own ``P`` (the fixed point), no more than the session router's."""
    model, cluster_of = setup
    assert [cached_prompt_tokens(t, 512, 256, 2) for t in (1, 2, 3, 4)] == [0.0, 256.0, 768.0, 1408.0]
    c = session_split_analytic(CFG, cluster_of, model, 150.0, SLO_SPLIT, "p5.48xlarge", 1, FOUR,
                               router="round-robin")  # fmt: skip
    follow = session_split_analytic(CFG, cluster_of, model, 150.0, SLO_SPLIT, "p5.48xlarge", 1, FOUR,
                                    router="session")  # fmt: skip
    assert c is not None and follow is not None
    p = c.prefill_replicas
    assert p > 1
    cached = sum(cached_prompt_tokens(t, 512, 256, p) for t in (1, 2, 3, 4))
    assert c.prefix_hit_rate == pytest.approx(cached / 4 / 1664, rel=1e-12)
    assert c.prefix_request_hit_rate == pytest.approx(hit_turns(FOUR, p))
    assert c.prefix_hit_rate < follow.prefix_hit_rate and p >= follow.prefill_replicas


def test_attention_dp_pools_are_not_screened_with_sessions(setup: tuple[ModelArch, ClusterOf]) -> None:
    """A split's sessions are simulated without attention DP in either pool: such a split is no candidate."""
    model, cluster_of = setup
    adp = ServeConfig(tp=2, ep=2, attention_dp=True, precision="fp8", input_len=512, output_len=256)
    for pre, dec in ((adp, None), (CFG, adp)):
        assert session_split_analytic(pre, cluster_of, model, 150.0, SLO_SPLIT, "p5.48xlarge", 1, FOUR,
                                      decode_cfg=dec, router="session") is None  # fmt: skip
