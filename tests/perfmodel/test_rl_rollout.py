"""The rollout of an RL step as a finite batch: same-length waves, the simulated long tail, and the step using it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fmstack.catalog import Catalog
from fmstack.catalog.schema import ModelArch
from fmstack.catalog.topology import Cluster, build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel.inference import ServeConfig, deployment, estimate_serve
from fmstack.perfmodel.inference_sim import SimConfig, simulate
from fmstack.perfmodel.rl import RLConfig, estimate_rl
from fmstack.perfmodel.rl_rollout import rollout_time

# a GRPO rollout replica: Llama 3.1 8B on one H100, 8 samples per prompt share the prompt's KV (7/8 hits)
SERVE = ServeConfig(tp=1, input_len=1024, output_len=256, prefix_hit_rate=7 / 8, kv_memory_fraction=0.1)


def _setup(catalog: Catalog) -> tuple[ModelArch, Cluster, int]:
    m, cl = catalog.model("llama3.1-8b"), build_cluster(catalog, "p5.48xlarge", 1)
    return m, cl, estimate_serve(m, cl, SERVE).max_concurrency


def _sim(catalog: Catalog, n: int, c: int, spread: float, seed: int = 0) -> float:
    m, cl, _ = _setup(catalog)
    cfg = SimConfig(concurrency=min(c, n), num_requests=n, warmup_requests=0, length_spread=spread, seed=seed)
    return simulate(deployment(m, cl, SERVE), replace(SERVE, concurrency=c), cfg).makespan_s


def test_same_lengths_run_in_waves(catalog: Catalog) -> None:
    m, cl, c = _setup(catalog)
    assert 10 < c < 200  # the pool is the limit, as in a colocated rollout
    full = estimate_serve(m, cl, replace(SERVE, concurrency=c))
    # exactly two fills: two request latencies at c clients, while the steady rate would give the same 2c / rate
    two = rollout_time(m, cl, SERVE, 2 * c, c)
    assert two.time_s == pytest.approx(2 * full.latency_s)
    assert two.waves == 2 and two.simulated_requests == 0
    # one request more: a third wave of one sequence, a whole response latency for 1/(2c) more work
    one_more = rollout_time(m, cl, SERVE, 2 * c + 1, c)
    single = estimate_serve(m, cl, replace(SERVE, concurrency=1)).latency_s
    assert one_more.time_s == pytest.approx(2 * full.latency_s + single)
    assert one_more.drain_s > 0.8 * single
    # and the simulation of the same batch (every client starts at once) agrees
    for n in (c, 2 * c + 1, 5 * c // 2):
        # within the 6 % the analytic closed loop and the simulation agree to (docs/inference.md): the analytic
        # latency mixes the prompts into the decode iterations, the simulated wave prefills them all at once
        assert rollout_time(m, cl, SERVE, n, c).time_s == pytest.approx(_sim(catalog, n, c, 0.0), rel=0.06)


def test_spread_lengths_simulate_the_tail(catalog: Catalog) -> None:
    m, cl, c = _setup(catalog)
    n = 6 * c + 7
    spread = rollout_time(m, cl, SERVE, n, c, length_spread=0.5)
    same = rollout_time(m, cl, SERVE, n, c)
    assert spread.simulated_requests == 3 * c + 7  # the last (3c, 4c] requests
    # the three waves before them at the simulation's own steady rate (Little's law: c in flight over the middle
    # requests' mean latency): within 5 % of the whole batch simulated, on average over seeds (one run's tail
    # varies with its draws by a few per cent)
    model = [rollout_time(m, cl, SERVE, n, c, length_spread=0.5, seed=s).time_s for s in range(3)]
    whole = [_sim(catalog, n, c, 0.5, seed=s) for s in range(3)]
    assert sum(model) == pytest.approx(sum(whole), rel=0.05)
    assert spread.drain_s > 0 and spread.time_s > same.steady_s
    assert rollout_time(m, cl, SERVE, n, c, length_spread=0.5) == spread  # same seed, same answer
    # one fill: the step waits for the longest response, ~1.5x the mean, so the batch takes >= 1.3x as long
    one = rollout_time(m, cl, SERVE, c, c, length_spread=0.5)
    assert one.time_s > 1.3 * rollout_time(m, cl, SERVE, c, c).time_s


def test_rl_step_reports_the_batch(catalog: Catalog) -> None:
    cluster = build_cluster(catalog, "p5.48xlarge", 2)
    cfg = RLConfig(rollout_tp=1, train_tp=1, prompts_per_step=128, prompt_len=512, response_len=512)
    est = estimate_rl(catalog.model("llama3.1-8b"), cluster, cfg)
    assert est.parts_s["rollout"] == est.rollout["time_s"]
    assert est.rollout["time_s"] >= est.rollout["steady_s"] * 0.98
    tail = estimate_rl(catalog.model("llama3.1-8b"), cluster, replace(cfg, length_spread=0.8))
    assert tail.parts_s["rollout"] > est.parts_s["rollout"]
    with pytest.raises(InputError, match=r"^length-spread: must be in \[0, 1\), got 1.0"):
        estimate_rl(catalog.model("llama3.1-8b"), cluster, replace(cfg, length_spread=1.0))


def test_deeper_trajectory_age_streams_the_rollout(catalog: Catalog) -> None:
    """NeMo RL's async GRPO with max_trajectory_age_steps k: servers holding weights v generate for steps v+1..v+k,
    so a step's rollout is its share at the engine's steady rate with up to k shares in flight (KV-bounded), not a
    finite batch with a tail; k = 1 keeps the batch."""
    m = catalog.model("llama3.1-8b")
    cluster = build_cluster(catalog, "p5.48xlarge", 4)
    cfg = RLConfig(rollout_tp=1, train_tp=1, prompts_per_step=64, prompt_len=512, response_len=512,
                   placement="split", async_split=True, rollout_nodes=2, length_spread=0.5)  # fmt: skip
    one = estimate_rl(m, cluster, cfg)
    assert one.rollout["streamed_s"] == 0.0 and one.parts_s["rollout"] == one.rollout["time_s"]
    deep = estimate_rl(m, cluster, replace(cfg, max_trajectory_age=8))
    per_replica = 64 * 8 // 16  # 512 samples over 16 single-GPU replicas
    # by hand: the serving estimate at min(8 x 32, KV capacity) clients, 32 requests at its rate
    serve = ServeConfig(tp=1, input_len=512, output_len=512, prefix_hit_rate=7 / 8, kv_memory_fraction=0.9)
    cap = estimate_serve(m, build_cluster(catalog, "p5.48xlarge", 2), serve).max_concurrency
    at = estimate_serve(
        m, build_cluster(catalog, "p5.48xlarge", 2), replace(serve, concurrency=min(8 * per_replica, cap))
    )
    assert deep.rollout_concurrency == min(8 * per_replica, cap)
    assert deep.rollout["streamed_s"] == pytest.approx(per_replica / at.requests_per_s, rel=1e-12)
    # ... but the longest response, 512 x 1.5 tokens at the stream's ITL, must finish within 8 steps: here it sets
    # the step (13.9 s over 8 steps against 1.16 s for a step's share)
    assert deep.rollout["streamed_longest_s"] == pytest.approx(768 * at.itl_s, rel=1e-12)
    assert deep.parts_s["rollout"] == pytest.approx(768 * at.itl_s / 8, rel=1e-12)
    assert deep.parts_s["rollout"] > deep.rollout["streamed_s"]
    assert deep.parts_s["rollout"] < one.parts_s["rollout"]  # no tail, larger decode batches
    for bad, message in (({"max_trajectory_age": 0}, "max-trajectory-age: must be >= 1, got 0"),
                         ({"max_trajectory_age": 2, "async_split": False}, "max-trajectory-age: 2 steps of lag needs "
                          "--async")):  # fmt: skip
        with pytest.raises(InputError, match=f"^{message}"):
            estimate_rl(m, cluster, replace(cfg, **bad))  # type: ignore[arg-type]
