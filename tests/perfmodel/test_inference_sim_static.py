"""Static batching in the simulation (``--scheduler static``; session 13 review: the simulation batched continuously
whatever the flag said): a batch prefills together, decodes until its last request finishes, and nobody joins it."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner

from fmstack.catalog import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.cli.main import cli
from fmstack.errors import InputError
from fmstack.perfmodel.inference import ServeConfig, deployment, estimate_serve
from fmstack.perfmodel.inference_sim import BatchingSim, SimConfig, simulate
from fmstack.perfmodel.inference_step import Deployment, step_time

ISL, OSL, C = 512, 64, 8
STATIC = ServeConfig(tp=8, input_len=ISL, output_len=OSL, scheduler="static")


@pytest.fixture(scope="module")
def d(catalog: Catalog) -> Deployment:
    return deployment(catalog.model("llama3.1-70b"), build_cluster(catalog, "p5.48xlarge", 1), STATIC)


def test_closed_loop_batch_by_hand(d: Deployment) -> None:
    """C clients with equal lengths are one batch, again and again: TTFT is one iteration holding the C prompts
    (``step_time`` with ``C x 512`` tokens), each gap a decode step of the C at their context, the latency the
    prefill and 63 decode steps; the analytic static branch prices the same (decode at the mean context)."""
    r = simulate(d, STATIC, SimConfig(concurrency=C, num_requests=5 * C, warmup_requests=C, cooldown_requests=C,
                                      stationary_start=True))  # fmt: skip
    prefill = float(step_time(d, 0.0, 0.0, C * ISL, C * ISL * (ISL + 1) / 2, C).total_s)
    gaps = [float(step_time(d, float(C), ISL + g).total_s) for g in range(1, OSL)]
    for p in (50, 99):
        assert r.ttft_s[p] == pytest.approx(prefill, rel=1e-12)
        assert r.latency_s[p] == pytest.approx(prefill + sum(gaps), rel=1e-12)
    assert r.itl_s[50] == pytest.approx(float(np.percentile(gaps, 50)), rel=1e-12)
    est = estimate_serve(d.model, d.cluster, replace(STATIC, concurrency=C))
    assert est.ttft_s == pytest.approx(prefill, rel=1e-12)
    assert est.latency_s == pytest.approx(r.latency_s[50], rel=1e-3)
    # continuous batching admits each client's next prompt next to the others' decodes: another TTFT altogether
    cont = simulate(d, replace(STATIC, scheduler="continuous"),
                    SimConfig(concurrency=C, num_requests=5 * C, warmup_requests=C, stationary_start=True))  # fmt: skip
    assert cont.ttft_s[50] < 0.5 * prefill


class _Recording(BatchingSim):
    """Records each iteration's decodes and prompt chunks, and the requests running when it starts."""

    def __init__(self, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.steps: list[tuple[set[int], set[int], set[int]]] = []

    def _run_step(self, decode: list[int], chunks: dict[int, int]) -> None:
        self.steps.append((set(decode), set(chunks), set(self._running)))
        super()._run_step(decode, chunks)


def test_open_loop_nobody_joins_a_running_batch(d: Deployment) -> None:
    """Poisson arrivals: an iteration either prefills a new batch (every running request is in it, none decodes) or
    decodes the batch; requests that arrive meanwhile wait for the whole batch, so TTFT exceeds continuous
    batching's at the same rate."""
    sim = SimConfig(request_rate_per_s=2.0, num_requests=200, warmup_requests=20, length_spread=0.3, seed=3)
    run = _Recording(d, STATIC, sim, skip_ahead=False)
    result = run.run()
    prefills = [s for s in run.steps if s[1]]
    assert prefills and all(not dec and chunks == running for dec, chunks, running in prefills)
    batch: set[int] = set()
    for dec, chunks, _ in run.steps:
        if chunks:
            batch = set(chunks)
        else:
            assert dec <= batch  # decodes only the batch's own requests (a finished one leaves)
    assert max(len(s[1]) for s in prefills) > 1  # batches of several requests formed
    assert result.mean_ttft_s > simulate(d, replace(STATIC, scheduler="continuous"), sim).mean_ttft_s
    # the skip-ahead path gives the same run
    fast = simulate(d, STATIC, sim)
    assert fast.ttft_s == result.ttft_s and fast.latency_s[99] == pytest.approx(result.latency_s[99], rel=1e-9)


def test_static_parts_average_the_batch(d: Deployment) -> None:
    """``iteration_parts_s`` under static batching: the batch's prefill and its 63 decode iterations averaged, so
    ``output_len x`` their sum is the batch's latency (the continuous parts priced a mixed iteration instead)."""
    est = estimate_serve(d.model, d.cluster, replace(STATIC, concurrency=C))
    assert OSL * sum(est.iteration_parts_s.values()) == pytest.approx(est.latency_s, rel=1e-9)


def test_static_under_attention_dp_is_not_simulated(catalog: Catalog) -> None:
    cfg = ServeConfig(tp=8, ep=8, precision="fp8", input_len=ISL, output_len=OSL, attention_dp=True, scheduler="static")
    dd = deployment(catalog.model("deepseek-v3"), build_cluster(catalog, "p5en.48xlarge", 1), cfg)
    with pytest.raises(InputError, match=r"^scheduler: static batching is not simulated under attention DP"):
        BatchingSim(dd, cfg, SimConfig(concurrency=4))
    res = CliRunner().invoke(cli, ["estimate", "serve", "--model", "deepseek-v3", "--instance", "p5en.48xlarge",
                                   "--tp", "8", "--ep", "8", "--precision", "fp8", "--attention-dp", "--input-len",
                                   "512", "--output-len", "64", "--concurrency", "4", "--scheduler", "static",
                                   "--json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert "ttft_p99_s" not in data and data["simulation_note"].startswith("not simulated: static batching under")


def test_cli_static_percentiles_are_the_batch(catalog: Catalog) -> None:
    """`estimate serve --scheduler static --concurrency 8`: the simulated TTFT is the analytic one (the batch's
    prefill, 88.4 ms for Llama 3.1 8B 512/128 on one H100); main simulated continuous batching (20.4 ms)."""
    res = CliRunner().invoke(cli, ["estimate", "serve", "--model", "llama3.1-8b", "--instance", "p5.48xlarge",
                                   "--input-len", "512", "--output-len", "128", "--concurrency", "8", "--scheduler",
                                   "static", "--json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["ttft_p50_s"] == pytest.approx(data["ttft_s"], rel=1e-9)
    assert data["ttft_p99_s"] == pytest.approx(data["ttft_s"], rel=1e-9)
    assert data["latency_p50_s"] == pytest.approx(data["latency_s"], rel=1e-3)
    assert data["ttft_s"] == pytest.approx(0.0884, abs=5e-5)
