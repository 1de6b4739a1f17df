"""The rollout of one RL step: a fixed batch of responses per replica, and how long the batch takes to finish.

A rollout is not a steady serving load. veRL hands each replica its share of ``prompts x samples`` requests at once
(``generate_sequences``: one offline batch into vLLM / SGLang); the engine runs as many as its KV pool and
``max_num_seqs`` allow and admits the rest as sequences finish. The step waits for the *last* response, so what
counts is the batch's makespan, not the engine's throughput:

- **same lengths** (``length_spread = 0``): the sequences start, decode and finish in step, so the batch runs in
  waves: ``floor(n / c)`` full waves of ``c`` sequences and one last wave of ``n mod c``; each wave's time is the
  serving model's request latency at that many clients (:func:`fmstack.perfmodel.inference.estimate_serve`);
- **spread lengths** (lengths uniform in ``mean x [1 - s, 1 + s]``, as ``estimate serve --length-spread``): the
  discrete-event simulation (:mod:`fmstack.perfmodel.inference_sim`) runs the batch from an empty engine, which
  holds its start and its drain (the long tail: the longest responses finish alone, at low batch). Beyond four
  fills it runs the last ``(3c, 4c]`` requests and adds the waves before them at the engine's mixed steady rate,
  one wave per mean latency of the simulated requests between its start and its drain (Little's law; within 4 %
  of the whole batch simulated, on average over seeds; not for log-normal lengths, below).
  The long tail of RL rollouts is the phase's known bottleneck (Sheng et al. 2025, HybridFlow, sec. 2.3; veRL's
  and slime's partial / asynchronous rollouts exist to hide it).

``drain_s`` reports what the batch costs beyond ``n`` requests at the steady rate: the waves and the tail.

**Tail to the cap** (``response_cap``, off by default): the engine stops a response at its token limit (vLLM
``SamplingParams.max_tokens``; NeMo RL sets ``max_new_tokens`` to ``max_total_sequence_length`` and vLLM's
``max_model_len`` to the same, so a response ends at the cap minus its prompt), and a synchronous step waits for the
batch's longest response (NeMo RL docs/guides/async-grpo.md: "stalling training pipeline until longest generation
finishes"). With the cap set, one response per replica is taken to run to it after the others end: the batch pays
``(response_cap - response_len)`` more decode steps at one running sequence, each the serving model's ITL at
concurrency 1 over a cap-long response (``tail_s``). What fraction of responses reach the cap is not published for
the runs this was checked against, so this is a bound on the tail's shape, not a fitted distribution.

**Log-normal responses** (``lengths``, :mod:`fmstack.perfmodel.rl_lengths`): each response's length is drawn from
the run's seed and the simulation runs the batch with those lengths (a capped response stops at the cap inside the
simulation, so there is no separate ``tail_s``). veRL and NeMo RL split the step's responses over the replicas in
contiguous chunks and the step waits for the slowest replica, so lengths are drawn for every replica and the one
simulated is the replica holding the step's longest response (most tokens among ties, e.g. several at the cap).
The whole batch is simulated, however many fills: the last-fills shortcut above misses a long response admitted in
an early fill that outlasts every later one (9-18 % short at clip ratios 0.02-0.1, 6-12 fills).
``length_*`` report the step's drawn lengths: sigma, the share at the cap, median and 99th percentile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from fmstack.catalog.schema import ModelArch
from fmstack.catalog.topology import Cluster
from fmstack.errors import InputError
from fmstack.perfmodel.efficiency import Efficiency
from fmstack.perfmodel.inference import ServeConfig, ServeEstimate, deployment, estimate_serve
from fmstack.perfmodel.inference_sim import SimConfig, simulate
from fmstack.perfmodel.rl_lengths import LogNormalLengths


@dataclass(frozen=True, kw_only=True, slots=True)
class RolloutTime:
    """One replica's batch of responses: its makespan and where it comes from."""

    time_s: float
    """From the first prompt admitted to the last response's last token."""
    steady_s: float
    """The same requests at the engine's steady closed-loop rate (what a throughput figure would give)."""
    drain_s: float
    """``time_s - steady_s``: the cost of running a finite batch (its last wave, its longest responses)."""
    waves: float
    """Requests over the concurrency: how many times the engine is filled."""
    simulated_requests: int
    """Requests run through the simulation (0: the same-length waves, computed directly)."""
    tail_s: float = 0.0
    """With ``response_cap``: the longest response's decode steps beyond the mean, alone on the replica (in
    ``time_s``); 0 without a cap, and with log-normal lengths (the simulation runs the capped responses)."""
    length_sigma: float = 0.0
    """Log-normal: sigma of ln(length); 0 for uniform lengths."""
    length_clip_share: float = 0.0
    """Log-normal: share of the step's drawn responses at the cap; uniform with a cap: 1 / requests (the one
    response per replica the bound runs to it); else 0."""
    length_p50: float = 0.0
    """Median response length (log-normal: of the step's draws; uniform: the mean)."""
    length_p99: float = 0.0
    """99th percentile response length (log-normal: of the step's draws; uniform: mean x (1 + 0.98 spread), the
    cap bound's one response aside)."""


def rollout_time(
    model: ModelArch, cluster: Cluster, serve: ServeConfig, requests: int, concurrency: int, *,
    length_spread: float = 0.0, seed: int = 0, at_concurrency: ServeEstimate | None = None,
    response_cap: int | None = None, lengths: LogNormalLengths | None = None, replicas: int = 1,
    efficiency: Efficiency | None = None,
) -> RolloutTime:  # fmt: skip
    """Makespan of ``requests`` responses on one replica that runs at most ``concurrency`` at once
    (``at_concurrency``: the serving estimate at that many clients, when the caller has it already;
    ``response_cap``: the engine's token limit per response, reached by one response per batch; ``lengths``:
    log-normal response lengths instead, drawn for ``replicas`` replicas: module docstring; ``efficiency``: the
    engine's, None for the GPU's default curves)."""
    c = max(1, min(concurrency, requests))
    full = at_concurrency
    if full is None or full.config.concurrency != c:
        full = estimate_serve(model, cluster, replace(serve, concurrency=c), efficiency=efficiency)
    steady_s = requests / full.requests_per_s
    outputs: np.ndarray[tuple[int], np.dtype[np.int64]] | None = None
    stats = _uniform_stats(serve.output_len, length_spread, response_cap, requests)
    if lengths is not None:
        # a stream of its own (not the simulation's seed stream, which draws the prompts' spread)
        drawn = lengths.sample(np.random.default_rng([seed, 1]), replicas * requests).reshape(replicas, requests)
        _check_drawn_mean(drawn, lengths)
        slowest = max(range(replicas), key=lambda i: (int(drawn[i].max()), int(drawn[i].sum())))
        outputs = drawn[slowest]
        p50, p99 = np.percentile(drawn, [50, 99])
        cap_share = float(np.mean(drawn >= lengths.cap)) if lengths.cap is not None else 0.0
        stats = {"length_sigma": lengths.sigma, "length_clip_share": cap_share, "length_p50": float(p50),
                 "length_p99": float(p99)}  # fmt: skip
    if length_spread == 0.0 and outputs is None:
        waves_full, last = divmod(requests, c)
        time_s = waves_full * full.latency_s
        if last:
            time_s += estimate_serve(model, cluster, replace(serve, concurrency=last), efficiency=efficiency).latency_s
        simulated = 0
    else:
        d, at_c = deployment(model, cluster, serve, efficiency), replace(serve, concurrency=c)
        # up to four fills (any number with log-normal lengths): simulate the whole batch; more: simulate the last n2 in (3c, 4c] requests and add the k
        # waves before them at the engine's mixed steady rate, from the requests between the simulation's first and
        # last c (its start and its drain): c in flight finish one wave per mean latency (Little's law). Not for
        # log-normal lengths: a long response admitted in an early wave can outlast every later one, so the last
        # requests alone miss it (9-18 % short at clip ratios 0.02-0.1, tests/perfmodel/test_rl_lengths.py)
        k = max(0, math.ceil((requests - 4 * c) / c)) if outputs is None else 0
        n2 = requests - k * c
        cfg = SimConfig(
            concurrency=min(c, n2), num_requests=n2, warmup_requests=c if k else 0, cooldown_requests=c if k else 0,
            length_spread=length_spread, seed=seed,
            output_lengths=None if outputs is None else tuple(int(x) for x in outputs[k * c :]),
        )  # fmt: skip
        try:
            res = simulate(d, at_c, cfg)
        except InputError as err:
            if err.field != "output-lengths":
                raise
            raise InputError(
                "response-cap", f"a drawn response does not fit the engine: {err.message}; set or lower --response-cap"
            ) from err
        time_s = res.makespan_s + k * res.mean_latency_s
        simulated = n2
    tail_s = 0.0
    if response_cap is not None and lengths is None:
        tail_s = cap_tail_s(model, cluster, serve, response_cap, efficiency)
    time_s += tail_s
    return RolloutTime(
        time_s=time_s,
        steady_s=steady_s,
        drain_s=time_s - steady_s,
        waves=requests / c,
        simulated_requests=simulated,
        tail_s=tail_s,
        **stats,
    )


MAX_DRAWN_MEAN_ERROR = 0.5
"""Without a cap, the step's drawn responses may average at most this far (relative) from the mean they stand for."""


def _check_drawn_mean(drawn: np.ndarray[tuple[int, int], np.dtype[np.int64]], lengths: LogNormalLengths) -> None:
    """An uncapped log-normal with a large CV puts its mean in draws too rare for one step's batch (cv 1e9: sigma
    6.4, median ~1 token): the step's responses then average far from ``response_len``, which the training passes and
    ``rollout_tokens_per_s`` still assume, and the rollout comes out faster than its own steady rate. InputError
    ``length-cv`` rather than a rollout of other lengths than the step's."""
    if lengths.cap is not None:
        return  # capped lengths have a bounded variance: the step's mean converges
    target, got = lengths.mean(), float(drawn.mean())
    if abs(got / target - 1.0) > MAX_DRAWN_MEAN_ERROR:
        raise InputError(
            "length-cv", f"the step's {drawn.size} drawn responses average {got:.0f} tokens, not the mean "
            f"response-len({target:.0f}): a log-normal with sigma {lengths.sigma:.2f} and no cap keeps its mean in "
            "draws too rare for one step; give --response-cap (the engine's limit) or a smaller --length-cv",
        )  # fmt: skip


def _uniform_stats(mean: int, spread: float, cap: int | None, requests: int) -> dict[str, float]:
    """``length_*`` of uniform lengths in ``mean x [1 - spread, 1 + spread]`` (with a cap: its one response)."""
    at_cap = cap is not None and cap > mean
    return {"length_sigma": 0.0, "length_clip_share": 1.0 / requests if at_cap else 0.0, "length_p50": float(mean),
            "length_p99": mean * (1.0 + 0.98 * spread)}  # fmt: skip


def cap_tail_s(
    model: ModelArch, cluster: Cluster, serve: ServeConfig, response_cap: int, efficiency: Efficiency | None = None
) -> float:
    """The steps a response running to ``response_cap`` takes beyond the mean ``serve.output_len``, alone on the
    replica: ``(response_cap - output_len) x`` the ITL at concurrency 1 of a ``response_cap``-token response."""
    extra = response_cap - serve.output_len
    if extra <= 0:
        return 0.0
    alone = estimate_serve(
        model, cluster, replace(serve, concurrency=1, output_len=response_cap), efficiency=efficiency
    )
    return extra * alone.itl_s
