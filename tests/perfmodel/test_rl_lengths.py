"""Log-normal response lengths of an RL rollout: the solved distribution, its draws, and the simulated makespan."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from fmstack.catalog import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel.inference import ServeConfig, deployment, estimate_serve
from fmstack.perfmodel.inference_sim import SimConfig, simulate
from fmstack.perfmodel.rl import RLConfig, estimate_rl
from fmstack.perfmodel.rl_lengths import LogNormalLengths, from_clip_ratio, from_cv
from fmstack.perfmodel.rl_rollout import rollout_time

# NeMo RL v0.3's Llama 3.1 8B GRPO on 8 H100 (stages.csv v03-h100-llama8b-8): 64 x 32, 795 generated tokens on
# average, max_total_sequence_length 4096 - 130 prompt tokens = a 3966-token cap
V03 = RLConfig(prompts_per_step=64, samples_per_prompt=32, prompt_len=130, response_len=795, rollout_tp=1,
               train_tp=1, train_pp=2, minibatches=4, rollout_memory_fraction=0.6, offload=True)  # fmt: skip
# the test_rl_rollout replica: Llama 3.1 8B on one H100, a small KV pool (38 sequences of 1024 + 256)
SERVE = ServeConfig(tp=1, input_len=1024, output_len=256, prefix_hit_rate=7 / 8, kv_memory_fraction=0.1)


def test_clip_ratio_solution_by_hand() -> None:
    # r = 1/2 puts the median at the cap (z = 0, mu = ln C); with sigma = 1 the capped mean is
    # C (exp(1/2) Phi(-1) + 1/2) = C (1.648721 x 0.158655 + 0.5) = 0.761581 C
    cap = 4000
    d = from_clip_ratio(0.761581 * cap, cap, 0.5)
    assert d.sigma == pytest.approx(1.0, abs=2e-5)
    assert d.mu == pytest.approx(math.log(cap), abs=2e-5)
    # the v0.3 row at clip ratio 0.02: the capped mean and P(L >= C), each by a numerical integral over z
    d = from_clip_ratio(795, 3966, 0.02)
    z = np.linspace(-12.0, 12.0, 400_001)
    pdf = np.exp(-z * z / 2) / math.sqrt(2 * math.pi)
    lengths = np.minimum(np.exp(d.mu + d.sigma * z), 3966.0)
    dz = z[1] - z[0]
    assert float(np.sum(lengths * pdf) * dz) == pytest.approx(795, rel=1e-6)
    assert float(np.sum(pdf[d.mu + d.sigma * z >= math.log(3966)]) * dz) == pytest.approx(0.02, abs=1e-5)
    # a heavier clip ratio at the same mean needs a wider log-normal
    assert from_clip_ratio(795, 3966, 0.05).sigma > d.sigma > from_clip_ratio(795, 3966, 0.01).sigma


def test_cv_solution_by_hand() -> None:
    # cv 1: sigma^2 = ln 2, median = mean / sqrt(2) (mean = exp(mu + sigma^2 / 2))
    d = from_cv(1000, 1.0)
    assert d.sigma == pytest.approx(math.sqrt(math.log(2)))
    assert math.exp(d.mu) == pytest.approx(1000 / math.sqrt(2))
    assert from_cv(1000, 0.0) == LogNormalLengths(mu=math.log(1000), sigma=0.0)
    # with a cap the same shape moves up until the capped mean is the mean again
    capped = from_cv(1000, 1.0, 3000)
    assert capped.sigma == d.sigma and capped.mu > d.mu
    assert capped.mean() == pytest.approx(1000, rel=1e-9)


def test_draws_reproduce_mean_and_clip_ratio() -> None:
    n = 200_000
    for r in (0.01, 0.05):
        d = from_clip_ratio(795, 3966, r)
        x = d.sample(np.random.default_rng(3), n)
        share = float(np.mean(x >= 3966))
        assert abs(share - r) < 4 * math.sqrt(r * (1 - r) / n)  # 4 standard errors of a binomial share
        assert abs(float(x.mean()) - 795) < 4 * float(x.std()) / math.sqrt(n) + 0.5  # + rounding to whole tokens
        assert x.max() == 3966 and x.min() >= 1
    x = from_cv(795, 1.0).sample(np.random.default_rng(3), n)
    assert float(x.std() / x.mean()) == pytest.approx(1.0, abs=0.05)


def test_impossible_combinations_say_why() -> None:
    with pytest.raises(InputError, match=r"^clip-ratio: no log-normal has both: the capped responses alone give a "
                       r"mean of clip-ratio\(0.25\) x response-cap\(3966\) = 992 >= response-len\(795\)"):  # fmt: skip
        from_clip_ratio(795, 3966, 0.25)
    with pytest.raises(InputError, match=r"^response-cap: a mean of response-len\(3966\) at response-cap\(3966\) "
                       r"needs every response at the cap, so no share below it; give a --response-cap above"):  # fmt: skip
        from_clip_ratio(3966, 3966, 0.02)  # the cap is what to change (it said "allowed: clip-ratio < 1")
    with pytest.raises(InputError, match="needs a log-normal sigma above 8"):
        from_clip_ratio(80, 3966, 0.02)  # 0.02 x 3966 = 79.3 of the 80 tokens: the rest are ~0 tokens long
    with pytest.raises(InputError, match=r"^length-cv: a mean of response-len\(3966\) = response-cap\(3966\)"):
        from_cv(3966, 0.5, 3966)


def test_equal_given_lengths_are_the_uniform_simulation(catalog: Catalog) -> None:
    # output_lengths all at the mean run exactly as the simulation without them (the uniform path is untouched)
    m, cl = catalog.model("llama3.1-8b"), build_cluster(catalog, "p5.48xlarge", 1)
    c = estimate_serve(m, cl, SERVE).max_concurrency
    d, at_c = deployment(m, cl, SERVE), replace(SERVE, concurrency=c)
    n = 2 * c + 5
    plain = simulate(d, at_c, SimConfig(concurrency=c, num_requests=n, warmup_requests=0))
    given = simulate(d, at_c, SimConfig(concurrency=c, num_requests=n, warmup_requests=0, output_lengths=(256,) * n))
    assert given == plain
    with pytest.raises(InputError, match=r"^output-lengths: needs one length >= 1 per request \(3\), got 2"):
        SimConfig(concurrency=1, num_requests=3, warmup_requests=0, output_lengths=(5, 6))


def test_heavy_tail_needs_the_whole_batch(catalog: Catalog) -> None:
    """The uniform rollout simulates only the last (3c, 4c] requests beyond four fills and adds the waves before
    them at the steady rate; with log-normal lengths a long response admitted in an early wave outlasts the later
    ones, and the shortcut runs short. So log-normal batches are simulated whole: check both against the whole
    batch with the same draws."""
    m, cl = catalog.model("llama3.1-8b"), build_cluster(catalog, "p5.48xlarge", 1)
    c = estimate_serve(m, cl, SERVE).max_concurrency
    d, at_c = deployment(m, cl, SERVE), replace(SERVE, concurrency=c)
    n = 6 * c + 7
    k = math.ceil((n - 4 * c) / c)
    dist = from_clip_ratio(256, 1024, 0.05)
    model, whole, shortcut = [], [], []
    for seed in range(3):
        outs = tuple(int(x) for x in dist.sample(np.random.default_rng([seed, 1]), n))
        got = rollout_time(m, cl, SERVE, n, c, lengths=dist, seed=seed)
        assert got.simulated_requests == n and got.tail_s == 0.0
        model.append(got.time_s)
        whole.append(simulate(d, at_c, SimConfig(concurrency=c, num_requests=n, warmup_requests=0, seed=seed,
                                                 output_lengths=outs)).makespan_s)  # fmt: skip
        last = simulate(d, at_c, SimConfig(concurrency=c, num_requests=n - k * c, warmup_requests=c,
                                           cooldown_requests=c, seed=seed, output_lengths=outs[k * c :]))  # fmt: skip
        shortcut.append(last.makespan_s + k * last.mean_latency_s)
    assert model == pytest.approx(whole, rel=1e-12)
    assert sum(shortcut) < 0.95 * sum(whole)  # measured 0.82-0.91 of the whole batch at clip ratios 0.02-0.1


def test_makespan_grows_with_the_clip_ratio(catalog: Catalog) -> None:
    m, cl = catalog.model("llama3.1-8b"), build_cluster(catalog, "dgx-h100", 1)
    uniform = estimate_rl(m, cl, V03)
    bound = estimate_rl(m, cl, replace(V03, response_cap=3966))
    times = []
    for r in (0.005, 0.02, 0.05, 0.1):
        est = estimate_rl(m, cl, replace(V03, length_dist="lognormal", clip_ratio=r, response_cap=3966))
        b = est.rollout
        assert b["tail_s"] == 0.0 and b["length_p99"] <= 3966
        assert abs(b["length_clip_share"] - r) < 4 * math.sqrt(r * (1 - r) / 2048) + 1 / 2048
        times.append(est.parts_s["rollout"])
    assert times == sorted(times) and times[0] < times[-1]
    # every draw-to-the-cap run is slower than the same mean for every response, and than one response to the cap
    # after the others (the drawn tail has many long responses, not one)
    assert uniform.parts_s["rollout"] < bound.parts_s["rollout"] < times[0]
    # the other phases do not move
    est = estimate_rl(m, cl, replace(V03, length_dist="lognormal", clip_ratio=0.02, response_cap=3966))
    assert est.parts_s["actor_train"] == uniform.parts_s["actor_train"]


def test_same_seed_same_answer_and_uniform_unchanged(catalog: Catalog) -> None:
    m, cl = catalog.model("llama3.1-8b"), build_cluster(catalog, "dgx-h100", 1)
    cfg = replace(V03, length_dist="lognormal", length_cv=1.5, response_cap=3966)
    a, b = estimate_rl(m, cl, cfg), estimate_rl(m, cl, cfg)
    assert a.rollout == b.rollout
    other = estimate_rl(m, cl, replace(cfg, seed=1))
    assert other.rollout["time_s"] != a.rollout["time_s"]
    assert a.rollout["length_sigma"] == pytest.approx(math.sqrt(math.log(1 + 1.5**2)))
    # uniform by default: the same-length waves, with the length_* keys of a distribution at its mean
    u = estimate_rl(m, cl, V03)
    assert u.config.length_dist == "uniform" and u.rollout["simulated_requests"] == 0
    assert (u.rollout["length_sigma"], u.rollout["length_clip_share"]) == (0.0, 0.0)
    assert u.rollout["length_p50"] == u.rollout["length_p99"] == 795


def test_slowest_replica_and_kv_pool(catalog: Catalog) -> None:
    m, cl = catalog.model("llama3.1-8b"), build_cluster(catalog, "p5.48xlarge", 1)
    c = estimate_serve(m, cl, SERVE).max_concurrency
    dist = from_cv(256, 1.0, 1024)
    # the simulated replica is the one holding the step's longest response: here slower than the first replica
    one = [rollout_time(m, cl, SERVE, c, c, lengths=dist, seed=s).time_s for s in range(3)]
    many = [rollout_time(m, cl, SERVE, c, c, lengths=dist, seed=s, replicas=8).time_s for s in range(3)]
    assert all(b >= a for a, b in zip(one, many, strict=True)) and sum(many) > sum(one)
    # no cap: a draw longer than the replica's whole KV pool (38 x 1280 tokens) is refused, naming the cap flag
    with pytest.raises(InputError, match=r"^response-cap: a drawn response does not fit the engine"):
        rollout_time(m, cl, SERVE, c, c, lengths=LogNormalLengths(mu=math.log(100_000), sigma=0.1))


def test_cli_json_and_table() -> None:
    import json
    import subprocess
    import sys

    args = ["estimate", "rl", "--model", "llama3.1-8b", "--instance", "dgx-h100", "--prompts", "64", "--samples", "32",
            "--prompt-len", "130", "--response-len", "795", "--rollout-tp", "1", "--train-tp", "1", "--train-pp", "2",
            "--minibatches", "4", "--rollout-memory-fraction", "0.6", "--offload", "--length-dist", "lognormal",
            "--clip-ratio", "0.02", "--response-cap", "3966"]  # fmt: skip
    proc = subprocess.run([sys.executable, "-m", "fmstack", *args, "--json"], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["config"]["length_dist"] == "lognormal" and data["config"]["clip_ratio"] == 0.02
    assert data["rollout"]["length_sigma"] == pytest.approx(from_clip_ratio(795, 3966, 0.02).sigma)
    assert {"length_clip_share", "length_p50", "length_p99"} <= set(data["rollout"])
    table = subprocess.run([sys.executable, "-m", "fmstack", *args], capture_output=True, text=True, timeout=300)
    assert "response lengths: log-normal (clip ratio 0.02, mean 795)" in " ".join(table.stdout.split())
