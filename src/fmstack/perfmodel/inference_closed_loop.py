"""Closed-loop serving benchmarks in the batching simulation: how many clients and requests to simulate, the
warm-up and cool-down, and the wait of the clients beyond those simulated (``fmstack estimate serve``'s
percentiles; docs/inference.md, simulation)."""

from __future__ import annotations

import math

from fmstack.perfmodel.inference import ServeConfig, max_concurrency, running_limit
from fmstack.perfmodel.inference_sim import SimConfig, SimResult, simulate
from fmstack.perfmodel.inference_sim_io import check_length_spread
from fmstack.perfmodel.inference_step import Deployment

MEASURED_REQUESTS = 1000
"""Closed loop: measured requests (at least 3 per client up to this, and one per client beyond it)."""
ITERATION_BUDGET = 20_000
"""Closed loop: about this many engine iterations for the measured requests at most (each costs Python time)."""


def running_bound(d: Deployment, cfg: ServeConfig, length_spread: float = 0.0) -> int:
    """The most requests the simulated engine takes off its waiting queue at once: ``max_batch``, or the KV pool
    (``max_concurrency`` full-length sequences) over the shortest sequence the length spread draws; under attention
    DP, the ranks' share of the sequence limit (``_assign_ranks``)."""
    check_length_spread(length_spread)
    limit = max(1, max_concurrency(d, cfg))
    lo = 1.0 - length_spread
    shortest = max(1, round(cfg.input_len * lo)) + max(1, round(cfg.output_len * lo))
    n = limit * (cfg.input_len + cfg.output_len) // shortest
    if cfg.max_batch is not None:
        n = min(n, cfg.max_batch)
    if d.attention_dp:
        n = d.tp * max(1, (cfg.max_batch or limit) // d.tp)
    return max(1, n)


def closed_loop_config(
    d: Deployment, cfg: ServeConfig, clients: int, latency_s: float, *, length_spread: float = 0.0, seed: int = 0
) -> SimConfig:
    """The simulation of ``clients`` closed-loop clients whose mean request latency is about ``latency_s``.

    - Clients simulated: at most ``2 x running_bound``. Beyond the engine's limit the extra clients only wait in
      the FIFO queue; with ``2 x running_bound`` clients the queue never empties (even when every running request
      finishes in the same iteration, as many are waiting), so the engine runs exactly as under more clients, and
      :func:`simulate_closed_loop` adds the others' wait.
    - Warm-up: the first request of every simulated client (they start uniformly over one latency, which scales
      with the clients once the engine is full), so each measured request comes from a client that has completed
      one; and when the clients exceed the sequences the engine runs (``running_limit``: the memory's
      ``max_concurrency``, ``max_batch``, or fewer where the token budget admits prompts more slowly than that many
      finish), the ``clients - running`` requests sent before the last client has started too: those clients started on an engine with free slots and
      sent their next request while the queue was shorter than ``clients - running``; after the ramp every client is
      running or queued, so the queue holds that many from then on. Where the token budget binds (``running <
      engine``), the stationary start runs the ``engine`` sequences the pool admits, more than the budget
      sustains: the queue reaches its length over the next cycle, so one more request of every client is warm-up
      (without it the 70B 2048/256 ``max_num_tokens`` 4096 example at 606 clients measured 14.6 s TTFT and
      ``C / latency`` 3 % above the completion rate; with it 16.4 s and both agree, as more warm-up leaves them).
    - Measured: ``max(100, 3 x clients)`` requests, at most ``max(MEASURED_REQUESTS, clients)``, and at most
      ``ITERATION_BUDGET`` iterations' worth (``n x output_len / running``), never fewer than 10.
    - Cool-down: the last ``clients`` requests (they run while the clients stop).
    - Start: without attention DP every client starts mid-request at an independent phase (``stationary_start``);
      under attention DP the simulation ignores that flag and the clients ramp in over ``ramp_s`` (the ranks are
      assigned at arrival), so the extra warm-up above only lengthens the run there.
    """
    sim_clients = max(1, min(clients, 2 * running_bound(d, cfg, length_spread)))
    engine = min(sim_clients, max(1, max_concurrency(d, cfg)))  # what the KV pool and max_batch admit
    running = min(engine, max(1, math.floor(running_limit(d, cfg))))  # what the token budget sustains
    n = max(10, min(max(MEASURED_REQUESTS, sim_clients), max(100, 3 * sim_clients),
                    ITERATION_BUDGET * running // cfg.output_len))  # fmt: skip
    warmup = sim_clients + (sim_clients - running) + (sim_clients if running < engine else 0)
    return SimConfig(concurrency=sim_clients, ramp_s=latency_s * sim_clients / clients,
                     num_requests=warmup + n + sim_clients, warmup_requests=warmup,
                     cooldown_requests=sim_clients, length_spread=length_spread, stationary_start=True,
                     seed=seed)  # fmt: skip


def simulate_closed_loop(
    d: Deployment, cfg: ServeConfig, clients: int, latency_s: float, *, length_spread: float = 0.0, seed: int = 0
) -> SimResult:
    """``clients`` closed-loop clients (see :func:`closed_loop_config`): the clients beyond those simulated add
    ``extra / completion rate`` to every TTFT and latency (each request waits for ``extra`` more admissions)."""
    sim = closed_loop_config(d, cfg, clients, latency_s, length_spread=length_spread, seed=seed)
    result = simulate(d, cfg, sim)
    extra = clients - (sim.concurrency or clients)
    return result.queued(extra) if extra > 0 else result
