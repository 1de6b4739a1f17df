"""Speculative decoding: expected tokens per step by hand, the cost of a speculative iteration, where it pays,
the simulation's draws against the expectation, seed determinism."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner

from fmstack.catalog import Catalog
from fmstack.catalog.topology import Cluster, build_cluster
from fmstack.cli.main import cli
from fmstack.errors import InputError
from fmstack.perfmodel.inference import ServeConfig, deployment, estimate_serve, memory_of
from fmstack.perfmodel.inference_sim import BatchingSim, SimConfig
from fmstack.perfmodel.inference_speculative import (
    SpecDecode,
    draw_tokens,
    expected_tokens,
    iid_expected_tokens,
    make_spec,
)
from fmstack.perfmodel.inference_step import ITERATION_OVERHEAD_S, step_time


def test_expected_tokens_by_hand() -> None:
    # Leviathan et al. 2023, Eq. (1): (1 - 0.8^4) / 0.2 = (1 - 0.4096) / 0.2 = 2.952
    assert iid_expected_tokens(0.8, 3) == pytest.approx(2.952, abs=1e-12)
    assert expected_tokens([0.8, 0.8, 0.8]) == pytest.approx(2.952, abs=1e-12)
    # chained per-position rates: 1 + 0.9 + 0.9 x 0.8 + 0.9 x 0.8 x 0.5 = 2.98
    assert expected_tokens([0.9, 0.8, 0.5]) == pytest.approx(2.98, abs=1e-12)
    assert iid_expected_tokens(1.0, 4) == 5.0


def test_mtp_default_is_the_cited_acceptance(catalog: Catalog) -> None:
    spec = make_spec("mtp", catalog.model("deepseek-v3"))
    assert spec is not None and spec.tokens == 3 and spec.acceptance == (0.85, 0.63, 0.63)
    # 1 + 0.85 + 0.85 x 0.63 + 0.85 x 0.63^2 = 1 + 0.85 + 0.5355 + 0.337365 = 2.722865
    assert spec.mean_tokens_per_step == pytest.approx(2.722865, abs=1e-9)
    # the later-position rate reproduces the cited 7-draft mean acceptance length of the original DeepSeek-V3-0324
    # MTP module, 3.20 (nebius/MTP-DeepSeek-V3-0324 model card): 0.63 is 0.6286 to two digits, 3.207
    seven = make_spec("mtp", catalog.model("deepseek-v3"), tokens=7)
    assert seven is not None and seven.mean_tokens_per_step == pytest.approx(3.20, abs=0.01)
    assert spec.draft is not None and spec.draft.num_layers == 1 and spec.draft.moe is not None
    assert spec.draft.moe.first_dense_layers == 0  # the MTP block is an MoE block
    assert catalog.model("deepseek-v3").num_nextn_predict_layers == 1


def test_spec_validation() -> None:
    with pytest.raises(InputError, match="spec-tokens"):
        SpecDecode(method="ngram", tokens=0, acceptance=())
    with pytest.raises(InputError, match="spec-acceptance"):
        SpecDecode(method="ngram", tokens=2, acceptance=(0.5, 1.2))


def _b200(catalog: Catalog, spec: SpecDecode | None, conc: int = 1) -> tuple[Cluster, ServeConfig]:
    cfg = ServeConfig(tp=8, ep=2, precision="fp4", attention_precision="bf16", input_len=1024, output_len=2048,
                      concurrency=conc, speculative=spec)  # fmt: skip
    return build_cluster(catalog, "dgx-b200", 1), cfg


def test_speculative_iteration_is_the_verify_plus_k_draft_passes(catalog: Catalog) -> None:
    m = catalog.model("deepseek-v3")
    spec = make_spec("mtp", m)
    cluster, cfg = _b200(catalog, spec)
    d = deployment(m, cluster, cfg)
    base = deployment(m, cluster, replace(cfg, speculative=None))
    assert d.draft_deploy is not None and spec is not None
    t = step_time(d, 1.0, 2048.0)
    # the verify: the target's parts with 4 tokens of one sequence (its KV read once), no draft part
    draft_one = float(step_time(d.draft_deploy, 1.0, 2048.0).total_s) - ITERATION_OVERHEAD_S
    assert float(t.draft_s) == pytest.approx(3 * draft_one, rel=1e-12)
    verify = float(t.total_s) - float(t.draft_s)
    plain = float(step_time(base, 1.0, 2048.0).total_s)
    # at batch 1 the verify reads more experts (4 tokens route to up to 32 of 256) but costs far less than 4 steps
    assert plain < verify < 1.5 * plain


def test_pays_at_batch_1_and_shrinks_when_compute_bound(catalog: Catalog) -> None:
    """A cheap draft (n-gram: no GPU work) speeds batch 1 up by nearly its tokens per step; a dense model at a
    large batch, compute-bound, gains less (the verify's GEMMs see k + 1 rows per sequence)."""
    m = catalog.model("llama3.1-8b")
    cluster = build_cluster(catalog, "p5.48xlarge", 1)
    spec = make_spec("ngram", m, tokens=3, acceptance=[0.6])
    gains = []
    for conc in (1, 256):
        cfg = ServeConfig(precision="fp8", input_len=512, output_len=256, concurrency=conc, speculative=spec)
        est = estimate_serve(m, cluster, cfg)
        assert est.speculative is not None
        gains.append(est.speculative["speedup_per_user"])
    assert gains[0] > 1.5
    assert gains[1] < gains[0]


def test_memory_counts_the_mtp_module(catalog: Catalog) -> None:
    m = catalog.model("deepseek-v3")
    cluster, cfg = _b200(catalog, make_spec("mtp", m))
    on = memory_of(deployment(m, cluster, cfg))
    off = memory_of(deployment(m, cluster, replace(cfg, speculative=None)))
    # one MoE block's weights (~11.5 B, mostly experts in fp4 over 8 GPUs: 0.5-1.5 GiB per GPU) and one more
    # layer's KV per token (61 -> 62 layers)
    assert 0.5 < on.weights_gib - off.weights_gib < 1.5
    assert on.kv_bytes_per_token_gpu == pytest.approx(off.kv_bytes_per_token_gpu * 62 / 61, rel=1e-9)


def test_draws_match_the_expectation() -> None:
    rng = np.random.default_rng(7)
    acc = (0.9, 0.8, 0.5)
    n = 200_000
    draws = draw_tokens(rng, acc, n)
    assert draws.min() >= 1 and draws.max() <= 4
    # mean within 5 standard errors of 2.98
    assert abs(draws.mean() - expected_tokens(acc)) < 5 * draws.std() / np.sqrt(n)


def test_simulation_mean_tokens_per_step_and_seed(catalog: Catalog) -> None:
    m = catalog.model("llama3.1-8b")
    cluster = build_cluster(catalog, "p5.48xlarge", 1)
    spec = make_spec("ngram", m, tokens=3, acceptance=[0.7])
    assert spec is not None
    cfg = ServeConfig(precision="fp8", input_len=256, output_len=512, concurrency=8, speculative=spec)
    d = deployment(m, cluster, cfg)
    sim = SimConfig(concurrency=8, num_requests=60, warmup_requests=8, seed=3)
    a, b = BatchingSim(d, cfg, sim), BatchingSim(d, cfg, sim)
    ra, rb = a.run(), b.run()
    assert ra == rb  # the same seed, the same result
    # tokens per step: a per-step mean capped at the tokens left, so slightly below the expectation (2.533)
    per_step = a.spec_tokens / a.spec_steps
    e = expected_tokens([0.7] * 3)
    assert e - 0.1 < per_step < e + 0.05


def test_simulation_agrees_with_the_analytic_curve(catalog: Catalog) -> None:
    runner = CliRunner()
    argv = ["estimate", "serve", "--model", "deepseek-v3", "--instance", "dgx-b200", "--tp", "8", "--ep", "2",
            "--precision", "fp4", "--attention-precision", "bf16", "--input-len", "1024", "--output-len", "2048",
            "--concurrency", "1", "--speculative", "mtp", "--json"]  # fmt: skip
    out = runner.invoke(cli, argv)
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    sp = data["speculative"]
    assert sp["method"] == "mtp" and sp["tokens"] == 3 and sp["acceptance"] == [0.85, 0.63, 0.63]
    assert sp["mean_tokens_per_step"] == pytest.approx(2.72, abs=0.01)
    assert sp["speedup_per_user"] > 1.5
    assert data["config"]["speculative"] == "mtp"
    assert data["latency_mean_s_sim"] == pytest.approx(data["latency_s"], rel=0.03)
