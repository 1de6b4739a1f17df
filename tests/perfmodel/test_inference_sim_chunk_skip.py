"""Prompt-chunk skip-ahead (session 15): a long prompt's chunks that fill the token budget are priced together and
the clock jumps over them, colocated (``BatchingSim``) and on a split's prefill replicas (``DisaggSim``); the
results stay those of one iteration at a time, float for float. Randomized small cases (Hypothesis, derandomized)
and the long-prompt cases that were slow."""

from __future__ import annotations

from functools import cache

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from fmstack.catalog import Catalog, load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel.inference import ServeConfig, deployment, max_concurrency
from fmstack.perfmodel.inference_sim import BatchingSim, SimConfig
from fmstack.perfmodel.inference_sim_disagg import DisaggSim, pool_stats
from fmstack.perfmodel.inference_step import Deployment


@cache
def _catalog() -> Catalog:  # Hypothesis runs the test many times: one catalog for them (read-only data)
    return load_catalog()


@cache
def _deployment(model: str, cfg: ServeConfig) -> Deployment:
    return deployment(_catalog().model(model), build_cluster(_catalog(), "p5.48xlarge", 1), cfg)


def _same_floats(d: Deployment, cfg: ServeConfig, sim: SimConfig) -> BatchingSim:
    """Run one iteration at a time, decode stretches only (session 14) and every stretch; all three agree in every
    result, every request's every token time, the clock and the iteration count. Returns the fast one."""
    runs = [BatchingSim(d, cfg, sim, skip_ahead=False), BatchingSim(d, cfg, sim, chunk_stretches=False),
            BatchingSim(d, cfg, sim)]  # fmt: skip
    results = [s.run() for s in runs]
    assert results[0] == results[1] == results[2]
    for other in runs[1:]:
        for p, q in zip(runs[0]._requests, other._requests, strict=True):
            assert (p.gaps_s, p.first_token_s, p.last_token_s, p.generated, p.prefilled) == (
                q.gaps_s, q.first_token_s, q.last_token_s, q.generated, q.prefilled,
            )  # fmt: skip
        assert (other.clock_s, other.iterations, other._counter) == (runs[0].clock_s, runs[0].iterations,
                                                                     runs[0]._counter)  # fmt: skip
    return runs[2]


@settings(max_examples=120, deadline=None, derandomize=True)
@given(
    tp=st.sampled_from([1, 2]),
    input_len=st.integers(1, 6000),
    output_len=st.integers(1, 300),
    budget=st.sampled_from([16, 64, 256, 512, 2048]),
    chunked=st.booleans(),
    hit=st.sampled_from([0.0, 0.3]),
    max_batch=st.sampled_from([None, 2, 5, 16]),
    spread=st.sampled_from([0.0, 0.5]),
    load=st.one_of(st.floats(0.05, 40.0).map(lambda r: ("rate", r)), st.integers(1, 24).map(lambda c: ("clients", c))),
    stationary=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_chunk_stretches_give_the_same_floats(
    tp: int, input_len: int, output_len: int, budget: int, chunked: bool, hit: float, max_batch: int | None,
    spread: float, load: tuple[str, float], stationary: bool, seed: int,
) -> None:  # fmt: skip
    cfg = ServeConfig(tp=tp, input_len=input_len, output_len=output_len, max_num_tokens=budget, prefix_hit_rate=hit,
                      max_batch=max_batch)  # fmt: skip
    d = _deployment("llama3.1-8b", cfg)
    kind, x = load
    try:
        sim = SimConfig(request_rate_per_s=x if kind == "rate" else None,
                        concurrency=int(x) if kind == "clients" else None, num_requests=40, warmup_requests=5,
                        length_spread=spread, chunked_prefill=chunked, stationary_start=stationary and kind == "clients",
                        seed=seed)  # fmt: skip
        _same_floats(d, cfg, sim)
    except InputError:
        assume(False)  # a load the replica cannot run (no request completes): nothing to compare


def test_long_prompt_in_small_chunks_jumps_over_its_chunks(catalog: Catalog) -> None:
    """Llama 3.1 8B TP 2 fp8, 32,000-token prompts in 512-token chunks (63 iterations each) next to decodes, open
    loop with spread lengths: the same floats, and the event loop sees a few iterations per request, not 63."""
    cfg = ServeConfig(tp=2, precision="fp8", input_len=32000, output_len=64, max_num_tokens=512)
    d = deployment(catalog.model("llama3.1-8b"), build_cluster(catalog, "p5.48xlarge", 1), cfg)
    sim = SimConfig(request_rate_per_s=0.5, num_requests=40, warmup_requests=5, length_spread=0.3, seed=1)
    fast = _same_floats(d, cfg, sim)
    pushes = _pushes(BatchingSim(d, cfg, sim))
    chunks = sum(-(-r.input_len // 512) for r in fast._requests)
    assert fast.iterations > chunks  # every chunk and every decode iteration counted
    assert pushes.count("done") < chunks / 10


def test_one_prompt_alone_is_one_stretch_and_its_last_chunk(catalog: Catalog) -> None:
    """One client, 10,000 prompt tokens in 2,048-token chunks and one output token (a prefill-only request): each
    request is its arrival, one stretch of 4 full chunks (one event) and the last chunk of 1,808 tokens (one
    event); the TTFT is the five iterations' sum, as one at a time."""
    cfg = ServeConfig(tp=1, input_len=10_000, output_len=1, max_num_tokens=2048)
    d = deployment(catalog.model("llama3.1-8b"), build_cluster(catalog, "p5.48xlarge", 1), cfg)
    sim = SimConfig(concurrency=1, num_requests=3, warmup_requests=1)
    fast = _same_floats(d, cfg, sim)
    assert fast.iterations == 3 * 5
    assert _pushes(BatchingSim(d, cfg, sim)) == ["arrive", "done", "done"] * 3


def _pushes(s: BatchingSim) -> list[str]:
    """The kinds of the events ``s`` pushes as it runs."""
    pushes: list[str] = []
    push = s._push

    def counted(time_s: float, kind: str, rid: int = -1) -> None:
        pushes.append(kind)
        push(time_s, kind, rid)

    s._push = counted  # type: ignore[method-assign]
    s.run()
    return pushes


def _split_sims(d: Deployment, cfg: ServeConfig, sim: SimConfig, **kw: object) -> tuple[DisaggSim, DisaggSim]:
    slow = DisaggSim(d, cfg, sim, skip_ahead=False, **kw)  # type: ignore[arg-type]
    fast = DisaggSim(d, cfg, sim, **kw)  # type: ignore[arg-type]
    assert slow.run() == fast.run()
    assert pool_stats(slow) == pool_stats(fast)
    assert (slow._prefill_log, slow._decode_log, slow.iterations) == (fast._prefill_log, fast._decode_log,
                                                                       fast.iterations)  # fmt: skip
    for p, q in zip(slow._requests, fast._requests, strict=True):
        assert (p.gaps_s, p.first_token_s, p.last_token_s) == (q.gaps_s, q.first_token_s, q.last_token_s)
    return slow, fast


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    input_len=st.integers(1, 20_000),
    output_len=st.integers(1, 200),
    budget=st.sampled_from([64, 512, 2048]),
    pools=st.sampled_from([(1, 1), (2, 1), (3, 2)]),
    rate=st.floats(0.05, 4.0),
    spread=st.sampled_from([0.0, 0.5]),
    hit=st.sampled_from([0.0, 0.3]),
    kv_s=st.sampled_from([0.0, 0.01]),
    seed=st.integers(0, 2**16),
)
def test_split_prefill_chunks_give_the_same_floats(
    input_len: int, output_len: int, budget: int, pools: tuple[int, int], rate: float, spread: float, hit: float,
    kv_s: float, seed: int,
) -> None:  # fmt: skip
    cfg = ServeConfig(tp=1, input_len=input_len, output_len=output_len, max_num_tokens=budget, prefix_hit_rate=hit)
    d = _deployment("llama3.1-8b", cfg)
    assume(max_concurrency(d, cfg) >= 1)
    sim = SimConfig(request_rate_per_s=rate, num_requests=40, warmup_requests=5, length_spread=spread, seed=seed)
    try:
        _split_sims(d, cfg, sim, prefill_replicas=pools[0], decode_replicas=pools[1], kv_transfer_s=kv_s)
    except InputError:
        assume(False)


def test_split_prefill_replica_prices_a_prompt_once(catalog: Catalog) -> None:
    """100,000-token prompts in 2,048-token chunks on two prefill replicas: 48 full chunks and the last per prompt,
    the full ones from one vectorised call (two per prompt: the first, and the rest from the cache)."""
    cfg = ServeConfig(tp=1, precision="fp8", input_len=100_000, output_len=32, max_num_tokens=2048)
    d = deployment(catalog.model("llama3.1-8b"), build_cluster(catalog, "p5.48xlarge", 1), cfg)
    sim = SimConfig(request_rate_per_s=0.3, num_requests=12, warmup_requests=2)
    _, fast = _split_sims(d, cfg, sim, prefill_replicas=2, decode_replicas=1, kv_transfer_s=0.05)
    assert len(fast._prefill_log) == 12 * 49
