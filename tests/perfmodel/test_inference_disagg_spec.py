"""Speculative decoding in disaggregated serving (session 19, helper D): the decode pool's step is the colocated
speculative step, the prefill pool adds one draft pass over the prompt, the KV transfer the draft's layers; the
simulations (plain and attention-DP pools) emit ``k + 1`` tokens per iteration at acceptance 1 and agree with the
mean field at low load; the same seed gives the same result."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from fmstack.catalog import Catalog
from fmstack.catalog.schema import ModelArch
from fmstack.catalog.topology import build_cluster
from fmstack.perfmodel.inference import ServeConfig, deployment, serve_curve
from fmstack.perfmodel.inference_disagg import (
    SLO,
    compare_disaggregation,
    decode_itl,
    kv_move,
    kv_transfer_s,
    pool_rates,
    prefill_alone_s,
)
from fmstack.perfmodel.inference_disagg_spec import prefill_deployment, prefill_spec
from fmstack.perfmodel.inference_kv import KV_BYTES, kv_bytes_per_token
from fmstack.perfmodel.inference_sim import SimConfig
from fmstack.perfmodel.inference_sim_disagg import DisaggSim, simulate_disagg
from fmstack.perfmodel.inference_sim_disagg_adp import AdpDisaggSim
from fmstack.perfmodel.inference_speculative import make_spec
from fmstack.perfmodel.inference_step import ITERATION_OVERHEAD_S, Deployment, step_time

ISL, OSL, CHUNK, K = 2048, 256, 1024, 3


def _llama(
    catalog: Catalog, method: str = "ngram", acceptance: float = 1.0
) -> tuple[ServeConfig, ServeConfig, ModelArch]:
    model = catalog.model("llama3.1-70b")
    cfg = ServeConfig(tp=4, precision="fp8", input_len=ISL, output_len=OSL, max_num_tokens=CHUNK)
    spec = make_spec(method, model, tokens=K, acceptance=[acceptance])
    return cfg, replace(cfg, speculative=spec), model


def _sim(rate: float, n: int = 40, seed: int = 0) -> SimConfig:
    return SimConfig(request_rate_per_s=rate, num_requests=n, warmup_requests=5, seed=seed)


def test_ngram_at_acceptance_one_emits_k_plus_one_tokens_per_decode_iteration(catalog: Catalog) -> None:
    """n-gram drafts, K = 3, every draft accepted: a decode iteration emits 4 tokens, so a 256-token answer takes 64
    decode iterations (context 2048, 2052, ..., 2300), the first of them ends at the TTFT; n-gram has no draft
    model, so the prefill is the plain one. Requests alone (1e-4 req/s): TTFT and latency by hand; the decode-phase
    time per output token is 63 speculative iterations over 255 gaps, about a quarter of the plain one's."""
    cfg, on, model = _llama(catalog)
    cluster = build_cluster(catalog, "p5.48xlarge", 1)
    d0, d1 = deployment(model, cluster, cfg), deployment(model, cluster, on)
    _, kv = kv_transfer_s(model, cluster, on, same_domain=True)
    assert kv == kv_transfer_s(model, cluster, cfg, same_domain=True)[1]  # no draft: no draft KV
    prefill = prefill_alone_s(d0, cfg)
    assert prefill_alone_s(d1, on) == prefill
    steps = [float(step_time(d1, 1.0, float(ISL + 4 * j)).total_s) for j in range(OSL // 4)]
    s = DisaggSim(d1, on, _sim(1e-4), prefill_replicas=1, decode_replicas=1, kv_transfer_s=kv)
    r = s.run()
    assert len(s._decode_log) == 40 * OSL // (K + 1)  # every request: 64 decode iterations
    # times are differences of clock readings near 4e5 s (1e-4 req/s): float64 rounding of ~1e-10 s each
    assert r.ttft_s[50] == pytest.approx(prefill + kv + steps[0], abs=1e-8)
    assert r.latency_s[50] == pytest.approx(prefill + kv + sum(steps), abs=1e-8)
    plain = simulate_disagg(d0, cfg, _sim(1e-4), prefill_replicas=1, decode_replicas=1, kv_transfer_s=kv)
    per_token = (r.latency_s[50] - r.ttft_s[50]) / (OSL - 1)
    per_token_plain = (plain.latency_s[50] - plain.ttft_s[50]) / (OSL - 1)
    assert per_token == pytest.approx(sum(steps[1:]) / (OSL - 1), abs=1e-10)
    # verifying 4 tokens at batch 1 costs a little more than 1 (memory-bound): the ratio is just above 63 / 255
    assert 63 / 255 < per_token / per_token_plain < 0.3


def test_decode_pool_step_is_the_colocated_speculative_step(catalog: Catalog) -> None:
    """The decode pool's analytic ITL is the colocated model's speculative step over its mean tokens: the same as a
    colocated static-batching decode gap (``serve_curve``: ``step_time(C decode) / E``) on the same deployment; the
    first token waits the whole iteration."""
    _, on, model = _llama(catalog, "eagle", 0.7)
    cluster = build_cluster(catalog, "p5.48xlarge", 1)
    d = deployment(model, cluster, on)
    assert on.speculative is not None
    e = on.speculative.mean_tokens_per_step
    conc = np.arange(1.0, 33.0)
    static = serve_curve(d, replace(on, scheduler="static"), conc).itl_s
    assert np.array_equal(decode_itl(d, on, conc), static)
    pools = pool_rates(model, build_cluster(catalog, "p5.48xlarge", 1), on, SLO(ttft_s=2.0, itl_s=0.02), d, conc)
    c = float(pools.decode_concurrency)
    step = float(step_time(d, c, ISL + OSL / 2.0).total_s)
    assert pools.decode_iteration_s == pytest.approx(step, rel=1e-12)
    assert pools.decode_itl_s == pytest.approx(step / e, rel=1e-12)
    assert pools.per_decode_rps == pytest.approx(c * e / (OSL * step), rel=1e-12)


def test_prefill_pool_adds_one_draft_pass_and_the_transfer_the_draft_kv(catalog: Catalog) -> None:
    """EAGLE (one dense layer of the target's width): a prompt alone on a prefill replica is the plain chunks plus,
    per chunk, the draft's own step over the chunk less one scheduler overhead (the draft runs inside the target's
    iteration); the KV transfer carries 81 layers' KV instead of 80 (GQA: the draft layer has the target's heads)."""
    cfg, on, model = _llama(catalog, "eagle", 0.7)
    cluster = build_cluster(catalog, "p5.48xlarge", 1)
    d0, d1 = deployment(model, cluster, cfg), deployment(model, cluster, on)
    dp = prefill_deployment(d1)
    assert dp.spec is not None and dp.spec.tokens == 1 and dp.draft_deploy is not None
    draft = sum(
        float(step_time(dp.draft_deploy, 0.0, 0.0, float(CHUNK), CHUNK * CHUNK * k + CHUNK * (CHUNK + 1) / 2,
                        float(k == 1)).total_s) - ITERATION_OVERHEAD_S
        for k in range(ISL // CHUNK)
    )  # fmt: skip
    assert prefill_alone_s(d1, on) == pytest.approx(prefill_alone_s(d0, cfg) + draft, rel=1e-12)
    assert 0 < draft < prefill_alone_s(d0, cfg) / 20  # one layer of 80 and the LM head of each prompt's last token
    b0, _ = kv_transfer_s(model, cluster, cfg, same_domain=True)
    b1, _ = kv_transfer_s(model, cluster, on, same_domain=True)
    assert b0 == ISL * kv_bytes_per_token(model, KV_BYTES[cfg.kv])
    assert b1 == pytest.approx(b0 * 81 / 80, rel=1e-12)
    assert prefill_spec(make_spec("ngram", model, acceptance=[0.5])) is None


def test_comparison_prices_the_speculative_decode_pool(catalog: Catalog) -> None:
    """``compare_disaggregation`` with speculation: the decode ITL is the speculative TPOT (n-gram at acceptance 1:
    a quarter of the iteration), colocated serves more within the ITL target. The split need not: 4 replicas split
    3:1 are prefill-bound, and the decode iteration the first token waits for (4 verify tokens per sequence) eats
    into the prefill queue's TTFT slack (measured: 24.28 vs 24.35 req/s)."""
    cfg, on, model = _llama(catalog)
    cluster = build_cluster(catalog, "p5.48xlarge", 2)
    slo = SLO(ttft_s=1.5, itl_s=0.03)
    off = compare_disaggregation(model, cluster, cfg, slo)
    spec = compare_disaggregation(model, cluster, on, slo)
    assert spec.colocated_rps > off.colocated_rps
    assert spec.prefill_to_decode == off.prefill_to_decode == "3:1"
    d = deployment(model, cluster, on)
    step = float(step_time(d, float(spec.decode_concurrency), ISL + OSL / 2.0).total_s)
    assert spec.decode_itl_s == pytest.approx(step / 4.0, rel=1e-12)


def test_simulated_and_analytic_means_agree_at_low_load(catalog: Catalog) -> None:
    """MTP-like EAGLE draws at 0.7 (2.53 tokens per iteration), requests alone (0.01 req/s, 300 measured): the
    simulated mean TTFT is the prefill + KV + one speculative iteration at context 2048 (the analytic first token at
    the mean context 2176: 0.1 %), the mean latency within 3 % of the mean field's TTFT + (output - 1) x TPOT. 3 %:
    the mean field counts (output - 1) / E iterations after the first, the simulation the random iterations to emit
    output - E tokens and caps the last (each ~(E - 1) / output ~ 0.6 %), and 300 requests of ~100 iterations whose
    count has a coefficient of variation ~5 % each leave a sampling error ~0.3 %."""
    _, on, model = _llama(catalog, "eagle", 0.7)
    cluster = build_cluster(catalog, "p5.48xlarge", 1)
    d = deployment(model, cluster, on)
    _, kv = kv_transfer_s(model, cluster, on, same_domain=True)
    sim = SimConfig(request_rate_per_s=0.01, num_requests=320, warmup_requests=10, seed=1)
    r = simulate_disagg(d, on, sim, prefill_replicas=1, decode_replicas=1, kv_transfer_s=kv)
    means = r.means()
    itl = float(decode_itl(d, on, np.array([1.0]))[0])
    assert on.speculative is not None
    e = on.speculative.mean_tokens_per_step
    ttft = prefill_alone_s(d, on) + kv + itl * e
    assert means["ttft_mean_s_sim"] == pytest.approx(ttft, rel=0.003)
    assert means["latency_mean_s_sim"] == pytest.approx(ttft + (OSL - 1) * itl, rel=0.03)
    assert means["itl_mean_s_sim"] == pytest.approx(itl, rel=0.03)


def test_same_seed_same_result_and_draws_from_the_run_generator(catalog: Catalog) -> None:
    _, on, model = _llama(catalog, "eagle", 0.7)
    cluster = build_cluster(catalog, "p5.48xlarge", 1)
    d = deployment(model, cluster, on)
    kw = {"prefill_replicas": 2, "decode_replicas": 1, "kv_transfer_s": 0.002}
    a = simulate_disagg(d, on, _sim(4.0, n=80), **kw)
    b = simulate_disagg(d, on, _sim(4.0, n=80), **kw)
    c = simulate_disagg(d, on, _sim(4.0, n=80, seed=1), **kw)
    assert a == b and a != c


@pytest.fixture(scope="module")
def adp(catalog: Catalog) -> tuple[Deployment, ServeConfig, float]:
    model = catalog.model("deepseek-v3")
    cfg = ServeConfig(tp=8, ep=8, precision="fp8", input_len=ISL, output_len=OSL, max_num_tokens=CHUNK,
                      attention_dp=True, speculative=make_spec("ngram", model, tokens=K, acceptance=[1.0]))  # fmt: skip
    d = deployment(model, build_cluster(catalog, "p5en.48xlarge", 1), cfg)
    _, kv, _, _ = kv_move(model, build_cluster(catalog, "p5en.48xlarge", 2), cfg, d)
    return d, cfg, kv


def test_attention_dp_decode_pool_speculates(adp: tuple[Deployment, ServeConfig, float]) -> None:
    """Attention DP in both pools, n-gram at acceptance 1: 64 decode iterations per request alone (each 4 tokens),
    the same seed the same result."""
    d, cfg, kv = adp
    kw = {"prefill_replicas": 1, "decode_replicas": 1, "kv_transfer_s": kv}
    s = AdpDisaggSim(d, cfg, _sim(1e-4, n=20), **kw)
    r = s.run()
    assert len(s._decode_log) == 20 * OSL // (K + 1)
    again = AdpDisaggSim(d, cfg, _sim(1e-4, n=20), **kw)
    assert again.run() == r
    assert math.isfinite(r.itl_s[50]) and r.itl_s[99] > 0


def test_mtp_draws_in_an_attention_dp_decode_pool_are_seeded(catalog: Catalog) -> None:
    """DeepSeek-V3's MTP (acceptance 0.8) in an attention-DP decode pool under load: the same seed, the same result;
    the mean tokens per decode iteration near 1 + 0.8 + 0.64 + 0.512 = 2.95 (the last iteration's cap lowers it)."""
    model = catalog.model("deepseek-v3")
    cfg = ServeConfig(tp=8, ep=8, precision="fp8", input_len=ISL, output_len=OSL, max_num_tokens=CHUNK,
                      attention_dp=True, speculative=make_spec("mtp", model, tokens=K, acceptance=[0.8]))  # fmt: skip
    d = deployment(model, build_cluster(catalog, "p5en.48xlarge", 1), cfg)
    kw = {"prefill_replicas": 2, "decode_replicas": 1, "kv_transfer_s": 0.003}
    a = AdpDisaggSim(d, cfg, _sim(3.0, n=60), **kw)
    ra = a.run()
    assert ra == AdpDisaggSim(d, cfg, _sim(3.0, n=60), **kw).run()
    steps = sum(n for _, _, n, _ in a._decode_log)  # sequence-iterations
    per_step = 60 * OSL / steps
    assert 2.95 - 0.15 < per_step < 2.95 + 0.05
