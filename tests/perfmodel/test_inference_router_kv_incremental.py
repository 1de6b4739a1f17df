"""The KV router's running sums (:meth:`fmstack.perfmodel.inference_router_kv.KvRouter.watch`, session 19) route every
request as rescanning the requests in flight did: the same worker and the same costs, to the bit, at every arrival of
seeded joint runs (shared prefixes with spread lengths, chunked prompts in stretches, attention DP, sessions,
temperature sampling), and the same results; in a split's prefill pool too (:meth:`KvRouter.watch_prompts`: prefix
groups and sessions on 2 to 4 prefill replicas)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fmstack.catalog import load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.perfmodel.inference import ServeConfig, deployment
from fmstack.perfmodel.inference_prefix import PrefixWorkload
from fmstack.perfmodel.inference_router_kv import KvRouter, KvRouterConfig, Routed
from fmstack.perfmodel.inference_session import SessionWorkload
from fmstack.perfmodel.inference_sim_disagg import DisaggSim
from fmstack.perfmodel.inference_sim_disagg_session import SessionDisaggSim
from fmstack.perfmodel.inference_sim_fleet import simulate_fleet
from fmstack.perfmodel.inference_sim_io import SimConfig, SimRequest
from fmstack.perfmodel.inference_sim_session import run_sessions


def _traced(monkeypatch: pytest.MonkeyPatch, run: Any, *, rescan: bool) -> tuple[list[tuple[int, list[float]]], Any]:
    """Every arrival's (worker, costs) and the run's outcome, by running sums or (``rescan``) the path before."""
    trace: list[tuple[int, list[float]]] = []
    pick, watch = KvRouter.pick, KvRouter.watch

    def spy(self: KvRouter, req: SimRequest, caches: Any, prefix_len: int) -> int:
        k = pick(self, req, caches, prefix_len)
        trace.append((k, list(self.last_costs)))
        assert (self.loads is None) == rescan
        return k

    with monkeypatch.context() as m:
        m.setattr(KvRouter, "pick", spy)
        m.setattr(KvRouter, "watch", (lambda self, workers: None) if rescan else watch)
        out = run()
    return trace, out


def _same(monkeypatch: pytest.MonkeyPatch, run: Any) -> list[tuple[int, list[float]]]:
    fast, a = _traced(monkeypatch, run, rescan=False)
    slow, b = _traced(monkeypatch, run, rescan=True)
    assert fast == slow
    assert a == b
    return fast


def _d(model: str, cfg: ServeConfig) -> Any:
    cat = load_catalog()
    return deployment(cat.model(model), build_cluster(cat, "p5.48xlarge", 1), cfg)


GROUPS = PrefixWorkload(groups=8, prefix_len=1024, zipf=0.8)


@pytest.mark.parametrize(
    ("cfg", "sim"),
    [
        # shared prefixes, lengths spread (so a group's requests share different block counts), near saturation
        (ServeConfig(precision="fp8", input_len=2048, output_len=128),
         SimConfig(request_rate_per_s=20.0, replicas=4, router="kv", num_requests=1500, warmup_requests=100,
                   length_spread=0.6, seed=3, prefix=GROUPS)),
        # prompts over the token budget (chunks in stretches), temperature sampling, overlap weight 4
        (ServeConfig(precision="fp8", input_len=12_000, output_len=64, max_num_tokens=2048),
         SimConfig(request_rate_per_s=2.0, replicas=3, router="kv", num_requests=400, warmup_requests=40,
                   length_spread=0.3, seed=1, prefix=GROUPS,
                   kv_router=KvRouterConfig(overlap_weight=4.0, temperature=0.5))),
        # no prefix workload, weight 0: active blocks alone
        (ServeConfig(precision="fp8", input_len=1024, output_len=256),
         SimConfig(request_rate_per_s=30.0, replicas=4, router="kv", num_requests=1200, warmup_requests=100,
                   length_spread=0.5, seed=7, kv_router=KvRouterConfig(overlap_weight=0.0))),
    ],
)  # fmt: skip
def test_same_routing_in_a_fleet(monkeypatch: pytest.MonkeyPatch, cfg: ServeConfig, sim: SimConfig) -> None:
    trace = _same(monkeypatch, lambda: simulate_fleet(_d("llama3.1-8b", cfg), cfg, sim).to_json())
    assert len(trace) == sim.num_requests
    assert len({k for k, _ in trace}) == sim.replicas  # every worker chosen
    assert len({tuple(c) for _, c in trace}) > sim.num_requests // 2  # the costs moved with the load


def test_same_routing_under_attention_dp(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = ServeConfig(tp=8, ep=8, precision="fp8", attention_dp=True, input_len=1024, output_len=200)
    sim = SimConfig(request_rate_per_s=10.0, replicas=2, router="kv", num_requests=200, length_spread=0.5, seed=2,
                    prefix=PrefixWorkload(groups=6, prefix_len=512))  # fmt: skip
    _same(monkeypatch, lambda: simulate_fleet(_d("qwen3-235b-a22b", cfg), cfg, sim).to_json())


def test_same_routing_of_sessions(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sessions: a later turn shares its history's blocks with its session's cached sequence (group = the session)."""
    cfg = ServeConfig(precision="fp8", input_len=512, output_len=128)
    sim = SimConfig(request_rate_per_s=24.0, replicas=3, router="kv", num_requests=600, warmup_requests=60,
                    length_spread=0.4, seed=4, prefix=PrefixWorkload(groups=4, prefix_len=256),
                    sessions=SessionWorkload(turns=4, think_time_s=1.0))  # fmt: skip

    def run() -> Any:
        out = run_sessions(_d("llama3.1-8b", cfg), cfg, sim)
        return [(q.arrival_s, q.input_len, q.first_token_s, q.last_token_s) for q in out.requests]

    assert len(_same(monkeypatch, run)) > 500


def test_running_sums_by_hand() -> None:
    """Worker 0 gets a group-0 request of 4 shared + 6 own blocks, then a longer one of 5 + 6: 17 active blocks (the
    group's 5 once); the longer finishing leaves 4 + 6; the shorter's first token takes its 160 prefill tokens off."""
    router = KvRouter(KvRouterConfig(block_size=16), 2, np.random.default_rng(0))

    class Replica:
        on_first_token: Any = None
        on_done: Any = None

    reps = [Replica(), Replica()]
    router.watch(reps)
    short, long = SimRequest(0, 0.0, 160, 8, group=0), SimRequest(1, 0.0, 176, 8, group=0)
    router._track(0, Routed(short, 160, 4, 6))
    router._track(0, Routed(long, 176, 5, 6))
    load = router.loads[0]  # type: ignore[index]
    assert (load.requests, load.prefill_tokens, load.own_blocks + load.shared_blocks) == (2, 336, 17)
    reps[0].on_done(long)
    assert (load.requests, load.prefill_tokens, load.own_blocks + load.shared_blocks) == (1, 160, 10)
    reps[0].on_first_token(short)
    assert (load.prefill_tokens, router.in_flight(0), router.in_flight(1)) == (0, 1, 0)
    reps[0].on_done(short)
    assert (load.requests, load.own_blocks, load.shared_blocks, load.shared, load.largest) == (0, 0, 0, {}, {})


def _traced_split(monkeypatch: pytest.MonkeyPatch, run: Any, *, rescan: bool) -> tuple[list[Any], Any]:
    """As :func:`_traced` for a split's prefill pool: rescanning (the path before) sets ``prefill_pool`` alone, so
    ``loads`` stays None and :meth:`KvRouter.prompt_done` does nothing."""
    trace: list[tuple[int, list[float]]] = []
    pick = KvRouter.pick

    def spy(self: KvRouter, req: SimRequest, caches: Any, prefix_len: int) -> int:
        k = pick(self, req, caches, prefix_len)
        assert self.prefill_pool and (self.loads is None) == rescan
        trace.append((k, list(self.last_costs)))
        return k

    with monkeypatch.context() as m:
        m.setattr(KvRouter, "pick", spy)
        if rescan:
            m.setattr(KvRouter, "watch_prompts", lambda self: setattr(self, "prefill_pool", True))
        out = run()
    return trace, out


def _same_split(monkeypatch: pytest.MonkeyPatch, run: Any) -> list[tuple[int, list[float]]]:
    fast, a = _traced_split(monkeypatch, run, rescan=False)
    slow, b = _traced_split(monkeypatch, run, rescan=True)
    assert fast == slow
    assert a == b
    return fast


def _outcome(s: Any) -> list[tuple[float, int, float, float, int]]:
    return [(q.arrival_s, q.input_len, q.first_token_s, q.last_token_s, q.kv_shared) for q in s._requests]


@pytest.mark.parametrize(
    ("prefill", "cfg", "sim"),
    [
        # prompts of one to two chunks, spread lengths, near the prefill pool's saturation
        (2, ServeConfig(precision="fp8", input_len=2048, output_len=64, max_num_tokens=2048),
         SimConfig(request_rate_per_s=14.0, router="kv", num_requests=800, warmup_requests=50, length_spread=0.6,
                   seed=5, prefix=GROUPS)),
        # several prompts a prefill iteration, overlap weight 2, temperature sampling
        (3, ServeConfig(precision="fp8", input_len=1536, output_len=64, max_num_tokens=8192),
         SimConfig(request_rate_per_s=30.0, router="kv", num_requests=900, warmup_requests=50, length_spread=0.5,
                   seed=8, prefix=PrefixWorkload(groups=12, prefix_len=768, zipf=1.0),
                   kv_router=KvRouterConfig(overlap_weight=2.0, temperature=0.3))),
        # long prompts in many chunks
        (4, ServeConfig(precision="fp8", input_len=8192, output_len=32, max_num_tokens=2048),
         SimConfig(request_rate_per_s=5.0, router="kv", num_requests=400, warmup_requests=20, length_spread=0.3,
                   seed=2, prefix=PrefixWorkload(groups=6, prefix_len=4096))),
    ],
)  # fmt: skip
def test_same_routing_in_a_split_prefill_pool(
    monkeypatch: pytest.MonkeyPatch, prefill: int, cfg: ServeConfig, sim: SimConfig
) -> None:
    """Prefix groups in a split behind ``--router kv``: the prefill router (prefill blocks alone, counted until the
    prompt is computed) picks the same prefill replica at the same costs as rescanning, at every arrival."""

    def run() -> Any:
        s = DisaggSim(_d("llama3.1-8b", cfg), cfg, sim, prefill_replicas=prefill, decode_replicas=2,
                      kv_transfer_s=0.002)  # fmt: skip
        s.run()
        assert s.prefix is not None and s.prefix.router.kv is not None
        kv = s.prefix.router.kv
        assert kv.loads is None or all(x.requests == 0 and x.prefill_tokens == 0 for x in kv.loads)  # all computed
        return _outcome(s)

    trace = _same_split(monkeypatch, run)
    assert len(trace) == sim.num_requests
    assert len({k for k, _ in trace}) == prefill
    assert len({tuple(c) for _, c in trace}) > sim.num_requests // 4  # the pending prompts moved the costs


@pytest.mark.parametrize("prefill", [2, 3, 4])
def test_same_routing_of_sessions_in_a_split(monkeypatch: pytest.MonkeyPatch, prefill: int) -> None:
    """Sessions in a split behind ``--router kv``: a later turn overlaps its history's blocks on the prefill replica
    holding them; the same replica at the same costs as rescanning, at every turn's arrival."""
    cfg = ServeConfig(precision="fp8", input_len=512, output_len=128)
    sim = SimConfig(request_rate_per_s=12.0 * prefill, router="kv", num_requests=200 * prefill, warmup_requests=0,
                    length_spread=0.4, seed=prefill, sessions=SessionWorkload(turns=4, think_time_s=1.0))  # fmt: skip

    def run() -> Any:
        s = SessionDisaggSim(_d("llama3.1-8b", cfg), cfg, sim, prefill_replicas=prefill, decode_replicas=2,
                             kv_time=lambda tokens: [[tokens * 1e-6] * 2 for _ in range(prefill)])  # fmt: skip
        s.run()
        return _outcome(s)

    trace = _same_split(monkeypatch, run)
    assert len(trace) >= sim.num_requests
    assert len({k for k, _ in trace}) == prefill


def test_prompt_done_by_hand() -> None:
    """A prefill pool's router: two prompts on worker 0 count 160 + 96 prefill tokens and no blocks; the first's
    prompt computed takes its 160 off and its request out; a prompt done again, or one never routed, changes
    nothing."""
    router = KvRouter(KvRouterConfig(block_size=16), 2, np.random.default_rng(0))
    router.watch_prompts()
    a, b = SimRequest(0, 0.0, 160, 8, group=0), SimRequest(1, 0.0, 160, 8, group=0)
    router._track(0, Routed(a, 160, 4, 6))
    router._track(0, Routed(b, 96, 4, 6))
    load = router.loads[0]  # type: ignore[index]
    assert (load.requests, load.prefill_tokens) == (2, 256)
    router.prompt_done(a)
    router.prompt_done(a)
    router.prompt_done(SimRequest(2, 0.0, 160, 8))
    assert (load.requests, load.prefill_tokens, router.in_flight(0), router.in_flight(1)) == (1, 96, 1, 0)
    # the cost: (96 pending + 160 - 0 overlap) / 16 = 16 on worker 0, 160 / 16 = 10 on worker 1; blocks not counted
    assert router.pick(SimRequest(3, 0.0, 160, 8, group=1), [None, None], 64) == 1
    assert router.last_costs == [16.0, 10.0]
