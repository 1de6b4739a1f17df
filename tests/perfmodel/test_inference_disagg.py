"""Disaggregation: KV transfer size by hand, NVLink vs EFA, and when splitting pays off."""

from __future__ import annotations

import math

import pytest

from fmstack.catalog import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel.inference import ServeConfig
from fmstack.perfmodel.inference_disagg import SLO, compare_disaggregation, kv_transfer_s


def test_kv_transfer_bytes_by_hand(catalog: Catalog) -> None:
    m = catalog.model("llama3.1-70b")
    cfg = ServeConfig(tp=4, precision="fp8", input_len=3000, output_len=150)
    cl = build_cluster(catalog, "p5.48xlarge", 2)
    # 3000 tokens x 2 x 80 layers x 8 kv heads x 128 x 1 B (fp8 KV) = 491.52 MB; each of 4 GPUs sends a quarter
    size, nvlink = kv_transfer_s(m, cl, cfg, same_domain=True)
    _, efa = kv_transfer_s(m, cl, cfg, same_domain=False)
    assert size == 3000 * 2 * 80 * 8 * 128
    # a quarter over one GPU's EFA share (p5: 400 GB/s / 8 GPUs = 50 GB/s line rate) takes at least 2.46 ms
    assert efa >= size / 4 / 50e9
    assert nvlink < efa / 5


def test_disaggregation_wins_when_decode_batches_are_held_back(catalog: Catalog) -> None:
    m = catalog.model("llama3.1-70b")
    cl = build_cluster(catalog, "p5.48xlarge", 2)
    tight = compare_disaggregation(m, cl, ServeConfig(tp=8, precision="fp8", input_len=2000, output_len=500),
                                   SLO(ttft_s=1.0, itl_s=0.02))  # fmt: skip
    assert tight.gain > 1.0 and tight.why.startswith("disaggregation wins")
    assert tight.decode_concurrency > tight.colocated_concurrency
    assert tight.kv_link.startswith("EFA")  # two 8-GPU replicas on two nodes
    # the chosen operating point meets both targets: decode ITL, and prefill + M/D/1 wait + KV move + first gap
    assert tight.decode_itl_s <= 0.02
    assert tight.disagg_ttft_s <= 1.0 + 1e-9


def test_colocated_wins_when_prefill_dominates(catalog: Catalog) -> None:
    m = catalog.model("llama3.1-70b")
    cl = build_cluster(catalog, "p5.48xlarge", 1)
    r = compare_disaggregation(m, cl, ServeConfig(tp=2, precision="fp8", input_len=3000, output_len=150),
                               SLO(ttft_s=1.0, itl_s=0.03))  # fmt: skip
    assert r.gain < 1.0 and r.why.startswith("colocated wins")
    assert r.kv_link.startswith("NVLink")
    assert r.prefill_replicas + r.decode_replicas == r.replicas == 4


def test_disaggregation_needs_two_replicas(catalog: Catalog) -> None:
    with pytest.raises(InputError, match="at least 2 replicas"):
        compare_disaggregation(catalog.model("llama3.1-70b"), build_cluster(catalog, "p5.48xlarge", 1),
                               ServeConfig(tp=8), SLO(ttft_s=1.0, itl_s=0.05))  # fmt: skip


def test_a_colocated_goodput_of_zero_is_said_in_words(catalog: Catalog) -> None:
    # 70B tp4, 8k prompts, 1 s TTFT: colocated, one sequence's prompt goes in 32-token chunks beside its decode (256
    # iterations, 2.9 s to the first token); the "gain" over a colocated goodput of 0 printed as "6351156087739.83x"
    m, cl = catalog.model("llama3.1-70b"), build_cluster(catalog, "p5.48xlarge", 1)
    cfg = ServeConfig(tp=4, precision="fp8", input_len=8192, output_len=256)
    between = compare_disaggregation(m, cl, cfg, SLO(ttft_s=1.0, itl_s=0.015))
    assert between.colocated_rps == 0.0 < between.disagg_rps
    assert between.why.startswith("disaggregation wins: colocated misses the SLO (TTFT 1000 ms, ITL 15 ms) even at one")
    assert "x goodput" not in between.why
    neither = compare_disaggregation(m, cl, cfg, SLO(ttft_s=1.0, itl_s=0.005))
    assert neither.colocated_rps == neither.disagg_rps == 0.0
    assert neither.why.startswith("neither meets the SLO (TTFT 1000 ms, ITL 5 ms) at any load")


def test_one_output_token_colocated_is_held_to_ttft_alone(catalog: Catalog) -> None:
    """With one output token there is no inter-token gap: colocated replicas are held to TTFT only (before the
    fix: 0 req/s, the prompt iteration read as an ITL of 294 ms against 50 ms)."""
    m = catalog.model("llama3.1-70b")
    cl = build_cluster(catalog, "p5.48xlarge", 2)
    cmp = compare_disaggregation(m, cl, ServeConfig(tp=8, precision="fp8", input_len=2048, output_len=1),
                                 SLO(ttft_s=0.5, itl_s=0.05))  # fmt: skip
    assert cmp.colocated_rps > 0 and cmp.colocated_rps >= cmp.disagg_rps


def test_prefill_replicas_p99_is_the_fewest_and_searches_in_few_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fewest replicas whose Kingman p99 wait fits the budget (checked against the one below), found in a
    logarithmic number of bound evaluations: a budget just above zero once took one evaluation per replica count
    (100,000 and four seconds per plan layout before answering None)."""
    from fmstack.perfmodel import inference_disagg as m

    for rate, service, budget in ((5.0, 0.772, 0.3), (5.0, 0.772, 7.72e-5), (200.0, 0.05, 0.01), (0.1, 2.0, 5.0)):
        c = m.prefill_replicas_p99(rate, service, budget)
        assert c is not None
        assert m.kingman_wait_quantile_s(rate, service, c) <= budget
        assert c == max(1, math.floor(rate * service) + 1) or m.kingman_wait_quantile_s(rate, service, c - 1) > budget
    calls = 0
    bound = m.kingman_wait_quantile_s

    def counted(*args: float) -> float:
        nonlocal calls
        calls += 1
        return bound(*args)

    monkeypatch.setattr(m, "kingman_wait_quantile_s", counted)
    assert m.prefill_replicas_p99(5.0, 0.772, 0.772e-6) is None  # more than 100,000 replicas
    assert calls <= 60
