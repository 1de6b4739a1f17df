"""Open-loop (Poisson) serving runs of the batching simulation: how many requests to leave out while the replica
fills, how many to measure, and when a rate is too near the replica's capacity for a run to reach the steady state
(``fmstack estimate serve --qps`` and `plan serve`'s check of a colocated replica; docs/inference.md, simulation).

The simulation starts empty, and two things take time to settle:

- The engine. A request that arrives at ``t`` shares the engine with those that arrived in ``(t - latency, t)``, so
  the requests of the first latency see a half-empty engine: shorter iterations, fewer prompt chunks, lower TTFT
  and ITL. Little's law (Little 1961): ``N = rate x latency`` requests are in flight in the steady state.
- The queue. Near capacity the waiting line forgets its empty start only slowly: the relaxation time of an M/M/1
  queue is ``tau = 1 / (mu (1 - sqrt(rho))^2)`` (Morse 1955; Cohen, *The Single Server Queue*, II.2.2), ``mu``
  the service rate and ``rho = rate / mu``. With ``mu`` the replica's capacity (requests/s at its running limit,
  :func:`fmstack.perfmodel.inference.concurrency_for_rate`), ``rate x tau = rho / (1 - sqrt(rho))^2`` requests
  arrive per relaxation time: 72 at rho 0.8, 342 at 0.9, 1,482 at 0.95, 39,400 at 0.99. An engine at its limit
  serves more regularly than M/M/1's exponential server, which only shortens the true relaxation (heavy traffic:
  ``tau ~ (c_a^2 + c_s^2) / (mu (1 - rho)^2)``, Kingman 1961), so the rule errs long. The same holds for the
  more regular arrivals of a replica behind a round-robin router (Erlang(R) gaps, ``c_a^2 = 1 / R`` against the
  Poisson stream's 1; :attr:`fmstack.perfmodel.inference_sim.SimConfig.router`): Morse's M/M/1 time stays an upper
  bound, and the run is sized as for Poisson arrivals at the same rate.

Warm-up: ``max(WARMUP_MIN, N, RELAX_WARMUP x rate x tau)`` requests; measured: ``MEASURED`` (1,000; fewer where
their prompts take more than ``ITERATION_BUDGET`` chunk iterations) or ``RELAX_MEASURED x rate x tau`` if more, so a p99 spans
several excursions of the queue. Where ``(RELAX_WARMUP + RELAX_MEASURED) x rate x tau > REQUESTS_MAX`` the rate is
too near capacity: :func:`open_loop_run` says so (``sim`` None) and its callers report no steady state (a `plan
serve` miss; ``estimate serve`` prints the means only). Before these rules `plan serve` left out 15 of 150 requests
and ``estimate serve --qps`` a fifth of its run: Llama 3.1 70B TP 2 fp8, 512/512, 10 req/s (rho 0.99) measured ITL
p99 0.098-0.099 s in 150 requests (seeds 0-2; a plan "met" 0.1 s) against 0.173-0.178 s in the 2,000-request blocks
of 20,000-request runs, whose TTFT p99 went from 0.36 s to 12.3 s as the queue wandered.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from fmstack.errors import InputError
from fmstack.perfmodel.inference import (
    ServeConfig,
    concurrency_for_rate,
    max_concurrency,
    running_limit,
    serve_curve,
)
from fmstack.perfmodel.inference_prefix import PrefixWorkload, screen_hit_rates, token_share
from fmstack.perfmodel.inference_prefix_offload import KvOffload
from fmstack.perfmodel.inference_router import ROUTERS_JOINT
from fmstack.perfmodel.inference_router_kv import KvRouterConfig
from fmstack.perfmodel.inference_session import SessionWorkload
from fmstack.perfmodel.inference_sim import SimConfig, SimResult, simulate
from fmstack.perfmodel.inference_sim_fleet import FleetResult, simulate_fleet
from fmstack.perfmodel.inference_step import Deployment

WARMUP_MIN = 15
"""Warm-up requests at least (``run_split``'s floor too)."""
MEASURED = 1000
"""Requests measured (unless the iteration budget or the relaxation says otherwise): a p99 of TTFT is a queue's
tail, whose excursions last longer than the queue's relaxation time; Llama 3.1 70B TP 2 fp8 on a B200 node,
2048/256 tokens at 6.7 req/s (79 % busy), gave TTFT p99 0.50-1.30 s (median 0.68) over 311 measured requests at
seeds 0-7, 0.73-1.65 s (median 0.76) over 1,000, where 20,000-request runs give 0.92-0.98 s."""
ITERATION_BUDGET = 20_000
"""About this many prompt-chunk iterations of measured requests (``n x ceil(new prompt / max_num_tokens)``), unless
the queue's relaxation asks for more: the iterations that cost Python time (about 0.1 ms each), as the simulation
skips decode-only stretches between arrivals and completions in one step. Until session 14 the budget counted
``n x output_len / in flight`` decode iterations, and a replica at a low rate measured few requests: Llama 3.1 70B
TP 8 bf16, 2048/256 at 0.5 req/s measured 78 (TTFT p99 0.113-0.188 s over seeds 0-7, 0.148-0.186 s over 500,
0.154-0.186 s over 1,000, 0.18 s over 5,000), at 1 req/s 234 (ITL p99 0.012 s at seed 3 against 0.095 s at the
eleven others), 2048/4096 at 0.1 req/s 24; 1,000 cost 0.26-1.4 s there. Since session 15 the simulation also jumps
over a long prompt's full-budget chunks (:mod:`fmstack.perfmodel.inference_sim_stretch`), so a chunk iteration costs
far less than 0.1 ms; the budget is kept as it is, as it decides how many requests a run measures (and so the
plans' p99s)."""
RELAX_WARMUP = 3.0
"""Relaxation times of warm-up: the empty start's deficit decays as ``exp(-t / tau)``, 5 % of it is left."""
RELAX_MEASURED = 5.0
"""Relaxation times measured at least: a p99 over about five independent stretches of the queue."""
REQUESTS_MAX = 12_000
"""Requests the queue's relaxation may ask of one run (``(RELAX_WARMUP + RELAX_MEASURED) x rate x tau``; a few
seconds of Python); a rate that needs more is near capacity: ``rho`` above 0.950 (``rate x tau`` 1,500 requests)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class OpenLoopRun:
    """How an open-loop run at one rate is sized, and whether it can reach the steady state."""

    rate_per_s: float
    capacity_rps: float
    """The replica's capacity: requests/s at its running limit on the analytic curve (the rate ``estimate serve
    --qps`` refuses above)."""
    inflight: float
    """Requests in flight at ``rate_per_s`` (Little's law on the analytic curve)."""
    relaxation_requests: float
    """``rate x tau``: arrivals per relaxation time of the queue (Morse's M/M/1 ``tau``; inf at capacity)."""
    sim: SimConfig | None
    """The run (None: near capacity, ``warm-up + measured`` would exceed ``REQUESTS_MAX``)."""

    @property
    def utilization(self) -> float:
        return self.rate_per_s / self.capacity_rps

    def near_capacity_reason(self) -> str:
        """Why no run is made (``sim`` None), in one sentence with the numbers."""
        return (
            f"{self.rate_per_s:.4g} requests/s is {100 * self.utilization:.1f} % of the replica's capacity "
            f"({self.capacity_rps:.4g} requests/s): its queue settles over about {self.relaxation_requests:,.0f} "
            f"requests (Morse's M/M/1 relaxation time) and a run needs {RELAX_WARMUP:g} + {RELAX_MEASURED:g} of "
            f"those, more than the {REQUESTS_MAX:,} requests it simulates: no run shows the steady state (whose queue "
            "wait grows as 1 / (1 - utilization)), so near capacity counts as missing a p99 target"
        )


def capacity_rps(d: Deployment, cfg: ServeConfig) -> float:
    """Requests/s one replica completes at its running limit (memory, ``max_batch``, the token budget): the
    highest rate :func:`fmstack.perfmodel.inference.concurrency_for_rate` accepts, priced as an open loop."""
    at = replace(cfg, request_rate_per_s=1.0, concurrency=None)
    return float(serve_curve(d, at, [max(running_limit(d, at), 1.0)]).requests_per_s[0])


def relaxation_requests(utilization: float) -> float:
    """Arrivals per relaxation time of an M/M/1 queue at ``utilization`` (Morse 1955): ``rho / (1 - sqrt(rho))^2``;
    inf at or above 1."""
    if utilization >= 1.0:
        return math.inf
    return utilization / (1.0 - math.sqrt(utilization)) ** 2


def open_loop_run(
    d: Deployment, cfg: ServeConfig, rate_per_s: float, *, length_spread: float = 0.0, seed: int = 0,
    replicas: int = 1, router: str = "round-robin",
) -> OpenLoopRun:  # fmt: skip
    """Arrivals at ``rate_per_s`` on one replica (Poisson; or one of ``replicas`` behind ``router``, whose arrivals
    :attr:`fmstack.perfmodel.inference_sim.SimConfig.router` describes; sized the same way): warm-up ``max(WARMUP_MIN, N, RELAX_WARMUP x R)`` requests
    (``N`` in flight, ``R`` per relaxation time), then ``max(min(MEASURED, ITERATION_BUDGET / chunks), RELAX_MEASURED
    x R)`` measured (never fewer than 10; ``chunks``: a prompt's ``ceil(new / max_num_tokens)`` iterations); ``sim``
    None when ``(RELAX_WARMUP + RELAX_MEASURED) x R`` exceeds ``REQUESTS_MAX``.
    InputError ``qps`` above the replica's capacity (:func:`fmstack.perfmodel.inference.concurrency_for_rate`)."""
    at = replace(cfg, request_rate_per_s=rate_per_s, concurrency=None)
    conc = concurrency_for_rate(d, at, rate_per_s)
    n_inflight = rate_per_s * float(serve_curve(d, at, np.array([conc])).latency_s[0])
    cap = max(capacity_rps(d, cfg), rate_per_s)
    relax = relaxation_requests(rate_per_s / cap)
    new = cfg.input_len - math.floor(cfg.prefix_hit_rate * cfg.input_len)
    measured = max(10, min(MEASURED, ITERATION_BUDGET // max(1, math.ceil(new / cfg.max_num_tokens))))
    if not (RELAX_WARMUP + RELAX_MEASURED) * relax <= REQUESTS_MAX:  # inf at capacity
        sim = None
    else:
        warmup = max(WARMUP_MIN, math.ceil(n_inflight), math.ceil(RELAX_WARMUP * relax))
        measured = max(measured, math.ceil(RELAX_MEASURED * relax))
        sim = SimConfig(request_rate_per_s=rate_per_s, num_requests=warmup + measured, warmup_requests=warmup,
                        length_spread=length_spread, seed=seed, replicas=replicas, router=router)  # fmt: skip
    return OpenLoopRun(rate_per_s=rate_per_s, capacity_rps=cap, inflight=n_inflight, relaxation_requests=relax,
                       sim=sim)  # fmt: skip


def simulate_open_loop(
    d: Deployment, cfg: ServeConfig, rate_per_s: float, *, length_spread: float = 0.0, seed: int = 0,
    replicas: int = 1, router: str = "round-robin",
) -> tuple[OpenLoopRun, SimResult | None]:  # fmt: skip
    """One replica under arrivals at ``rate_per_s``, one of ``replicas`` behind ``router`` (:func:`open_loop_run`):
    the sizing and the result (None near capacity: no steady state to measure)."""
    run = open_loop_run(d, cfg, rate_per_s, length_spread=length_spread, seed=seed, replicas=replicas, router=router)
    return run, None if run.sim is None else simulate(d, cfg, run.sim)


def needs_fleet(router: str, prefix: PrefixWorkload | None, sessions: SessionWorkload | None = None) -> bool:
    """Whether a run must simulate the replicas together: a router that chooses from their state, or a shared-prefix
    or multi-turn workload (whose hits depend on where the router sent each group or turn before)."""
    return router in ROUTERS_JOINT or prefix is not None or sessions is not None


def simulate_open_loop_fleet(
    d: Deployment, cfg: ServeConfig, rate_per_s: float, *, length_spread: float = 0.0, seed: int = 0,
    replicas: int = 1, router: str = "round-robin", prefix: PrefixWorkload | None = None,
    kv_router: KvRouterConfig | None = None, sessions: SessionWorkload | None = None,
    kv_offload: KvOffload | None = None,
) -> tuple[OpenLoopRun, FleetResult | None]:  # fmt: skip
    """``replicas`` replicas behind ``router`` at ``rate_per_s`` each, simulated together
    (:func:`fmstack.perfmodel.inference_sim_fleet.simulate_fleet`), each sized as one replica's run
    (:func:`open_loop_run`): ``replicas`` times its warm-up and measured requests in all. None near capacity.
    With a shared-prefix workload a run sized with every prompt priced in full comes first (the longer, safer one);
    where there is none (the rate above that capacity, or too near it) the run is sized at :func:`sizing_hit_rate`
    instead, so a deployment that serves ``qps`` only because of its cache hits is simulated, not refused.
    ``kv_router``: the KV router's settings (None: Dynamo's defaults). ``sessions``: a multi-turn workload, sized as
    the run of its turns as independent requests of ``input_len`` new tokens (the simulation then adds the sessions
    that fill and drain the ones in flight, :func:`fmstack.perfmodel.inference_sim_session.session_count`).
    ``kv_offload``: a host-memory tier under each replica's cache (:mod:`fmstack.perfmodel.inference_prefix_offload`)."""
    sizing_router = "round-robin" if router == "session" else router  # sized as the same load's independent requests
    kw: dict[str, Any] = {"length_spread": length_spread, "seed": seed, "replicas": replicas, "router": sizing_router}
    try:
        run: OpenLoopRun | None = open_loop_run(d, cfg, rate_per_s, **kw)
    except InputError as exc:
        if exc.field != "qps" or prefix is None:
            raise
        run = None
    if prefix is not None and (run is None or run.sim is None):  # the cache may take what full prompts cannot
        run = open_loop_run(d, replace(cfg, prefix_hit_rate=sizing_hit_rate(d, cfg, prefix, replicas, router)),
                            rate_per_s, **kw)  # fmt: skip
    assert run is not None
    if run.sim is None:
        return run, None
    sim = replace(run.sim, num_requests=run.sim.num_requests * replicas,
                  warmup_requests=run.sim.warmup_requests * replicas, prefix=prefix,
                  kv_router=kv_router or KvRouterConfig(), sessions=sessions, router=router,
                  kv_offload=kv_offload)  # fmt: skip
    return replace(run, sim=sim), simulate_fleet(d, cfg, sim)


def sizing_hit_rate(d: Deployment, cfg: ServeConfig, prefix: PrefixWorkload, replicas: int, router: str) -> float:
    """The prompt-token share a replica's prefix cache could serve at most under ``router``: the screened request
    hit rate (:func:`fmstack.perfmodel.inference_prefix.screen_hit_rates`) with one sequence running (holding one
    prefix) and the rest of the KV pool free for prefixes. Sizes the open-loop run (its capacity and relaxation) where full prompts leave
    none; the simulation decides the hits."""
    seq = cfg.input_len + cfg.output_len
    room = (max_concurrency(d, replace(cfg, max_batch=None)) - 1) * seq / prefix.prefix_len + 1  # + its own prefix
    room /= d.tp if d.attention_dp else 1  # attention DP: one rank's cache
    hit = float(screen_hit_rates(prefix, np.array([room]), replicas=replicas, router=router)[0])
    return token_share(prefix, cfg.input_len, hit)
