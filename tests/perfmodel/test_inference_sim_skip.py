"""Decode-stretch skip-ahead: the same results, float for float, as one iteration at a time."""

from __future__ import annotations

import pytest

from fmstack.catalog import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.perfmodel.inference import ServeConfig, deployment
from fmstack.perfmodel.inference_sim import BatchingSim, SimConfig

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
    d = deployment(catalog.model(model), build_cluster(catalog, "p5.48xlarge", 1), cfg)
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


def test_skip_ahead_prices_stretches_together(catalog: Catalog) -> None:
    """One client: after its prompt, every iteration is a decode-only stretch to its completion, so the fast
    path calls the event loop about twice per request, not once per token."""
    cfg = ServeConfig(tp=1, input_len=512, output_len=128)
    d = deployment(catalog.model("llama3.1-8b"), build_cluster(catalog, "p5.48xlarge", 1), cfg)
    fast = BatchingSim(d, cfg, SimConfig(concurrency=1, num_requests=4, warmup_requests=1))
    pushes: list[str] = []
    push = fast._push

    def counted(time_s: float, kind: str, rid: int = -1) -> None:
        pushes.append(kind)
        push(time_s, kind, rid)

    fast._push = counted  # type: ignore[method-assign]
    fast.run()
    assert fast.iterations == 4 * 128  # the prompt's iteration plus 127 decode iterations per request
    # per request: its arrival, the prompt's iteration and one event for the 127 decode iterations (one at a
    # time: 1 + 128 events per request)
    assert pushes == ["arrive", "done", "done"] * 4
