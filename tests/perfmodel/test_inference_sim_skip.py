"""Decode-stretch skip-ahead: the same results, float for float, as one iteration at a time (one replica, and
attention DP, where every rank's stretch is priced together)."""

from __future__ import annotations

import pytest

from fmstack.catalog import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.perfmodel.inference import ServeConfig, deployment
from fmstack.perfmodel.inference_sim import BatchingSim, SimConfig
from fmstack.perfmodel.inference_step import Deployment
from tests.perfmodel.test_inference_sim_chunk_skip import _pushes

CASES = {
    "open loop": ("llama3.1-8b", ServeConfig(tp=1, input_len=512, output_len=128),
                  SimConfig(request_rate_per_s=5.0, num_requests=120, warmup_requests=12)),
    "closed loop, length spread": ("llama3.1-70b", ServeConfig(tp=8, input_len=1024, output_len=256),
                                   SimConfig(concurrency=48, num_requests=160, length_spread=0.5, seed=3)),
    "closed loop, whole prompts": ("llama3.1-70b", ServeConfig(tp=8, input_len=512, output_len=128),
                                   SimConfig(concurrency=32, num_requests=120, chunked_prefill=False, ramp_s=1.0)),
    "open loop, prefix hits": ("llama3.1-8b", ServeConfig(tp=1, input_len=2048, output_len=128, prefix_hit_rate=0.5),
                               SimConfig(request_rate_per_s=20.0, num_requests=150, length_spread=0.3)),
    "stationary start, cool-down": ("llama3.1-8b", ServeConfig(tp=1, input_len=512, output_len=128),
                                    SimConfig(concurrency=40, num_requests=200, stationary_start=True,
                                              cooldown_requests=40)),
    "sequence limit queues": ("llama3.1-8b", ServeConfig(tp=1, input_len=512, output_len=128, max_batch=8),
                              SimConfig(request_rate_per_s=30.0, num_requests=100)),
}  # fmt: skip


@pytest.mark.parametrize("name", list(CASES))
def test_skip_ahead_gives_the_same_floats(catalog: Catalog, name: str) -> None:
    model, cfg, sim = CASES[name]
    _same_floats(deployment(catalog.model(model), build_cluster(catalog, "p5.48xlarge", 1), cfg), cfg, sim)


def _adp_cfg(**kw: object) -> ServeConfig:
    return ServeConfig(tp=8, ep=8, precision="fp8", attention_dp=True, **kw)  # type: ignore[arg-type]


ADP_CASES = {
    "qwen3 p5 open loop": ("qwen3-235b-a22b", "p5.48xlarge", _adp_cfg(input_len=2048, output_len=256),
                           SimConfig(request_rate_per_s=8.0, num_requests=160, warmup_requests=16)),
    "qwen3 p5 open loop, whole prompts, spread": (
        "qwen3-235b-a22b", "p5.48xlarge", _adp_cfg(input_len=1024, output_len=256),
        SimConfig(request_rate_per_s=20.0, num_requests=200, chunked_prefill=False, length_spread=0.5, seed=7)),
    "qwen3 p5 closed loop, spread": ("qwen3-235b-a22b", "p5.48xlarge", _adp_cfg(input_len=2048, output_len=512),
                                     SimConfig(concurrency=64, num_requests=200, length_spread=0.4, seed=11)),
    "deepseek-v3 b200 closed loop, whole prompts, small budget": (
        "deepseek-v3", "dgx-b200", _adp_cfg(input_len=1024, output_len=256, max_num_tokens=1536),
        SimConfig(concurrency=384, num_requests=768, chunked_prefill=False, ramp_s=3.0, seed=2)),
    "deepseek-v3 b200 open loop, prefix hits": (
        "deepseek-v3", "dgx-b200", _adp_cfg(input_len=4096, output_len=128, prefix_hit_rate=0.3),
        SimConfig(request_rate_per_s=30.0, num_requests=240, length_spread=0.3, seed=5)),
    "deepseek-v3 b200 few clients (idle ranks)": ("deepseek-v3", "dgx-b200", _adp_cfg(input_len=512, output_len=300),
                                                  SimConfig(concurrency=3, num_requests=12, warmup_requests=2, seed=4)),
    "deepseek-v3 b200 sequence limit queues": (
        "deepseek-v3", "dgx-b200", _adp_cfg(input_len=1024, output_len=128, max_batch=16),
        SimConfig(request_rate_per_s=60.0, num_requests=200, seed=9)),
}  # fmt: skip


@pytest.mark.parametrize("name", list(ADP_CASES))
def test_attention_dp_skip_ahead_gives_the_same_floats(catalog: Catalog, name: str) -> None:
    model, system, cfg, sim = ADP_CASES[name]
    slow, fast = _same_floats(deployment(catalog.model(model), build_cluster(catalog, system, 1), cfg), cfg, sim)
    assert fast.prompt_ranks == slow.prompt_ranks
    assert 0 in fast.prompt_ranks  # the case has decode-only stretches (not only prompt iterations)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("chunked", [True, False])
def test_attention_dp_skip_ahead_seeds(catalog: Catalog, seed: int, chunked: bool) -> None:
    cfg = _adp_cfg(input_len=1024, output_len=200)
    d = deployment(catalog.model("qwen3-235b-a22b"), build_cluster(catalog, "p5.48xlarge", 1), cfg)
    sim = SimConfig(request_rate_per_s=12.0, num_requests=120, length_spread=0.5, chunked_prefill=chunked, seed=seed)
    _same_floats(d, cfg, sim)


def _same_floats(d: Deployment, cfg: ServeConfig, sim: SimConfig) -> tuple[BatchingSim, BatchingSim]:
    slow = BatchingSim(d, cfg, sim, skip_ahead=False)
    fast = BatchingSim(d, cfg, sim)
    a, b = slow.run(), fast.run()
    assert a == b  # every percentile, mean, rate and the iteration count, exactly
    # the per-request record too: every token's gap and time
    for p, q in zip(slow._requests, fast._requests, strict=True):
        assert (p.gaps_s, p.first_token_s, p.last_token_s, p.generated) == (
            q.gaps_s, q.first_token_s, q.last_token_s, q.generated,
        )  # fmt: skip
    assert fast.clock_s == slow.clock_s
    return slow, fast


def test_skip_ahead_prices_stretches_together(catalog: Catalog) -> None:
    """One client: after its prompt, every iteration is a decode-only stretch to its completion, so the fast
    path calls the event loop about twice per request, not once per token."""
    cfg = ServeConfig(tp=1, input_len=512, output_len=128)
    d = deployment(catalog.model("llama3.1-8b"), build_cluster(catalog, "p5.48xlarge", 1), cfg)
    fast = BatchingSim(d, cfg, SimConfig(concurrency=1, num_requests=4, warmup_requests=1))
    pushes = _pushes(fast)
    assert fast.iterations == 4 * 128  # the prompt's iteration plus 127 decode iterations per request
    # per request: its arrival, the prompt's iteration and one event for the 127 decode iterations (one at a
    # time: 1 + 128 events per request)
    assert pushes == ["arrive", "done", "done"] * 4
