"""The serving simulation's inputs and outputs: :class:`SimConfig` (load and scheduler options of one run),
:class:`SimRequest` (one request as it runs) and :class:`SimResult` (percentiles and means over the measured
requests, :func:`summarise`). The simulation itself is
:mod:`fmstack.perfmodel.inference_sim`, which re-exports both."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
from numpy.typing import NDArray

from fmstack.errors import InputError
from fmstack.perfmodel.inference_prefix import PrefixWorkload
from fmstack.perfmodel.inference_prefix_offload import KvOffload
from fmstack.perfmodel.inference_router_kv import KvRouterConfig
from fmstack.perfmodel.inference_session import SessionWorkload

PERCENTILES = (50, 90, 99)
ROUTERS = ("round-robin", "random", "least-loaded", "power-of-two", "cache-aware", "kv")
"""How a router spreads a deployment's requests over its colocated replicas (:attr:`SimConfig.router`).
``round-robin``: the default of NVIDIA Dynamo's frontend (``--router-mode``, docs.nvidia.com/dynamo, Router Guide)
and the vLLM production-stack router's RoundRobinRouter (docs.vllm.ai/projects/production-stack, Router Logic);
``random``: each request to a uniformly random replica, e.g. a Kubernetes Service via kube-proxy's iptables mode;
``least-loaded``, ``power-of-two`` and ``cache-aware`` (SGLang router's policies) and ``kv`` (NVIDIA Dynamo's KV router,
:mod:`fmstack.perfmodel.inference_router_kv`) choose from the replicas' state, so the replicas are simulated together
(:mod:`fmstack.perfmodel.inference_router`, :mod:`fmstack.perfmodel.inference_sim_fleet`)."""
ROUTERS_SESSION = (*ROUTERS, "session")
"""With a multi-turn workload (:attr:`SimConfig.sessions`) also ``session``: sticky session affinity
(:mod:`fmstack.perfmodel.inference_router`)."""


def check_length_spread(length_spread: float) -> None:
    """``--length-spread`` is a fraction in [0, 1) (NaN and infinity refused too); InputError names it."""
    if not 0 <= length_spread < 1:  # False for NaN as well
        raise InputError("length-spread", f"must be in [0, 1), got {length_spread}")


@dataclass(frozen=True, kw_only=True, slots=True)
class SimConfig:
    """Load and scheduler options of one simulation run."""

    request_rate_per_s: float | None = None
    """Arrivals per second at this replica (open loop); None = closed loop with ``concurrency`` clients."""
    replicas: int = 1
    """Open loop: the replica is one of this many behind ``router``, which spread a Poisson stream of ``replicas x
    request_rate_per_s`` requests/s over them. 1: the replica takes the whole stream (Poisson arrivals)."""
    router: str = "round-robin"
    """:data:`ROUTERS`. ``round-robin`` with ``replicas`` R > 1: the replica gets every R-th arrival of the
    deployment's Poisson stream at rate Q, so its gaps are Erlang(R), ``gamma(shape R, scale 1 / Q)`` (mean R / Q,
    squared coefficient of variation 1 / R); ``random`` (or R = 1): a random split of a Poisson stream is Poisson,
    exponential gaps of mean R / Q (the draws of a single replica, bit for bit)."""
    kv_router: KvRouterConfig = field(default_factory=KvRouterConfig)
    """``router="kv"``: the KV router's overlap weight, temperature and block size (Dynamo's defaults)."""
    concurrency: int | None = None
    ramp_s: float = 0.0
    """Closed loop: clients start uniformly over [0, ramp_s] (about one request latency gives the steady state;
    0 = a synchronised burst whose waves persist when every request has the same lengths)."""
    num_requests: int = 300
    warmup_requests: int = 30
    """Requests excluded from the statistics while the system fills."""
    cooldown_requests: int = 0
    """The last requests excluded from the statistics while the system drains. Closed loop: the last
    ``concurrency`` requests are exactly those still running when the last one is sent, so they alone see fewer
    than ``concurrency`` clients (shorter iterations, fewer prompts to wait behind)."""
    length_spread: float = 0.0
    """Input and output lengths uniform in [1 - spread, 1 + spread] x the mean (bench_serving --random-range-ratio)."""
    output_lengths: tuple[int, ...] | None = None
    """Each request's output length, in arrival order (one per request; drawn by the caller, e.g. an RL rollout's
    log-normal responses, :mod:`fmstack.perfmodel.rl_lengths`); None = the mean output length, spread by
    ``length_spread``. Input lengths still follow ``length_spread``."""
    chunked_prefill: bool = True
    stationary_start: bool = False
    """Closed loop without attention DP: at t = 0 every client's first request is already running (while the KV
    pool and the sequence limit allow; the rest wait in the queue) with a uniform share of its output generated,
    as if the loop had been running for long: the clients at independent phases of the request cycle, the closed
    loop's steady state (``ramp_s`` is not used). Without it, equal lengths keep whatever phases the start left
    forever: a ramp's clusters (a long iteration collects more starts, so the next one is longer too) or a burst's
    waves."""
    seed: int = 0
    prefix: PrefixWorkload | None = None
    """Requests share prefixes that each replica caches (:mod:`fmstack.perfmodel.inference_prefix`; simulated with
    the replicas together, :func:`fmstack.perfmodel.inference_sim_fleet.simulate_fleet`); None: the configuration's
    scalar ``prefix_hit_rate`` for every request."""
    sessions: SessionWorkload | None = None
    """Multi-turn sessions (:mod:`fmstack.perfmodel.inference_session`; simulated by
    :func:`fmstack.perfmodel.inference_sim_session.run_sessions`): ``request_rate_per_s`` still counts requests
    (turns), sessions start at ``replicas x request_rate_per_s / turns`` per second; closed loop: each of
    ``concurrency`` clients runs sessions back to back. None: independent requests."""

    kv_offload: KvOffload | None = None
    """A host-memory tier under each replica's prefix / session cache
    (:mod:`fmstack.perfmodel.inference_prefix_offload`); None: evicted entries are lost."""

    def __post_init__(self) -> None:
        if (self.request_rate_per_s is None) == (self.concurrency is None):
            raise InputError("load", "give exactly one of request_rate_per_s and concurrency")
        if self.request_rate_per_s is not None and self.request_rate_per_s <= 0:
            raise InputError("qps", f"must be > 0, got {self.request_rate_per_s}")
        if self.replicas < 1:
            raise InputError("replicas", f"must be >= 1, got {self.replicas}")
        if self.router not in ROUTERS and not (self.router == "session" and self.sessions is not None):
            allowed = ROUTERS if self.sessions is None else ROUTERS_SESSION
            raise InputError("router", f"must be one of {', '.join(allowed)}, got {self.router!r}"
                             + (" (session: with --turns > 1)" if self.router == "session" else ""))  # fmt: skip
        if self.sessions is not None and self.output_lengths is not None:
            raise InputError("turns", "a multi-turn workload draws its own lengths per turn: drop output_lengths")
        if self.prefix is not None and self.request_rate_per_s is None:
            raise InputError("prefix-groups", "a shared-prefix workload is simulated at an open-loop rate: give --qps")
        if self.concurrency is not None and self.concurrency < 1:
            raise InputError("concurrency", f"must be >= 1, got {self.concurrency}")
        if self.ramp_s < 0:
            raise InputError("ramp", f"must be >= 0, got {self.ramp_s}")
        check_length_spread(self.length_spread)
        if self.output_lengths is not None and (
            len(self.output_lengths) != self.num_requests or min(self.output_lengths, default=1) < 1
        ):
            raise InputError(
                "output-lengths", f"needs one length >= 1 per request ({self.num_requests}), got "
                f"{len(self.output_lengths)} with minimum {min(self.output_lengths, default=0)}",
            )  # fmt: skip
        if self.seed < 0:
            raise InputError("seed", f"must be >= 0, got {self.seed}")
        if self.cooldown_requests < 0:
            raise InputError("cooldown", f"must be >= 0, got {self.cooldown_requests}")
        if self.num_requests <= self.warmup_requests + self.cooldown_requests:
            raise InputError(
                "num-requests", f"must exceed warmup_requests({self.warmup_requests}) + "
                f"cooldown_requests({self.cooldown_requests})",
            )  # fmt: skip


def arrival_gaps_s(sim: SimConfig, rng: np.random.Generator) -> NDArray[np.float64]:
    """An open-loop run's ``num_requests`` gaps between arrivals at the replica (seconds): ``rng.gamma(R, 1 / Q)``
    behind a round-robin router with ``R = replicas > 1`` (every R-th arrival of a Poisson stream at ``Q = R x
    request_rate_per_s``: the sum of R exponential gaps, Erlang(R)), else ``rng.exponential(1 / request_rate_per_s)``
    (the draws of the simulation before routers were modelled, bit for bit)."""
    rate, r = sim.request_rate_per_s, sim.replicas
    if rate is None:
        raise InputError("qps", "arrival gaps need an open-loop rate (request_rate_per_s)")
    if sim.router not in ("round-robin", "random") and r > 1:
        raise InputError("router", f"{sim.router} chooses from the replicas' state: simulate the replicas together "
                         "(fmstack.perfmodel.inference_sim_fleet.simulate_fleet)")  # fmt: skip
    if sim.router == "round-robin" and r > 1:
        return rng.gamma(r, 1.0 / (r * rate), sim.num_requests)
    return rng.exponential(1.0 / rate, sim.num_requests)


@dataclass(frozen=True, kw_only=True, slots=True)
class SimResult:
    """Percentiles and means over the measured requests."""

    completed: int
    duration_s: float
    requests_per_s: float
    output_tokens_per_s: float
    ttft_s: dict[int, float]
    itl_s: dict[int, float]
    latency_s: dict[int, float]
    mean_ttft_s: float
    mean_itl_s: float
    mean_latency_s: float
    iterations: int
    completion_rate_per_s: float = math.nan
    """Completions per second while the measured requests finish (the gaps between their completion times)."""
    clients_simulated: int = 0
    """Closed loop: the clients simulated; the rest of the loop's clients were only queued (:func:`simulate_closed_loop`)."""
    queue_wait_s: float = 0.0
    """Closed loop: the wait added to every TTFT and latency for the clients queued but not simulated."""
    requests_simulated: int = 0
    makespan_s: float = math.nan
    """From time 0 to the last token of the last request simulated, measured or not (a finite batch's length)."""

    def percentiles(self) -> dict[str, float]:
        """Flat JSON keys: ttft_p50_s, itl_p99_s, latency_p90_s, ..."""
        out: dict[str, float] = {}
        for name, values in (("ttft", self.ttft_s), ("itl", self.itl_s), ("latency", self.latency_s)):
            for p, v in values.items():
                out[f"{name}_p{p}_s"] = v
        return out

    def means(self) -> dict[str, float]:
        """The simulation's own means, keyed apart from the analytic model's (``*_sim``)."""
        return {"ttft_mean_s_sim": self.mean_ttft_s, "itl_mean_s_sim": self.mean_itl_s,
                "latency_mean_s_sim": self.mean_latency_s, "requests_measured_sim": float(self.completed),
                "requests_simulated_sim": float(self.requests_simulated),
                "clients_simulated_sim": float(self.clients_simulated),
                "queue_wait_s_sim": self.queue_wait_s}  # fmt: skip

    def queued(self, clients: int) -> SimResult:
        """The same engine with ``clients`` more closed-loop clients that only queue: each request waits for
        ``clients`` more admissions, at the engine's completion rate, before its own (FIFO; see
        :func:`simulate_closed_loop`)."""
        wait = clients / self.completion_rate_per_s

        def shift(d: dict[int, float]) -> dict[int, float]:
            return {p: v + wait for p, v in d.items()}

        return replace(
            self, ttft_s=shift(self.ttft_s), latency_s=shift(self.latency_s), mean_ttft_s=self.mean_ttft_s + wait,
            mean_latency_s=self.mean_latency_s + wait, queue_wait_s=self.queue_wait_s + wait,
        )  # fmt: skip


@dataclass(slots=True)
class SimRequest:
    """One request as the simulation runs it (times in seconds since the start)."""

    rid: int
    arrival_s: float
    input_len: int
    output_len: int
    prefilled: int = 0
    admitted: bool = False
    """Attention DP: running on its rank (holds its KV reservation)."""
    admitted_s: float = math.nan
    """When it started running (took its KV reservation; :func:`mean_running`)."""
    generated: int = 0
    first_token_s: float = math.nan
    last_token_s: float = math.nan
    gaps_s: list[float] = field(default_factory=list)
    group: int = -1
    """Its shared prefix's group (:class:`fmstack.perfmodel.inference_prefix.PrefixWorkload`); -1: none."""
    prefix_hit: bool = False
    """The group's prefix was in its replica's cache at admission (its prefill skipped it)."""
    prefix_held: bool = False
    """It references its group's shared prefix (a hit from admission, a miss once its prefill completed)."""
    kv_shared: int = 0
    """Its prompt tokens held in the shared prefix rather than in its own KV reservation (on a hit: those its
    prefill skipped)."""
    session: int = -1
    """Multi-turn workload: its session (:mod:`fmstack.perfmodel.inference_session`); -1: none."""
    turn: int = 0
    """Its turn in the session (1 = the first; 0 without a session)."""
    history: int = 0
    """Its prompt's tokens from the session's earlier turns (their prompts and outputs)."""
    host_tokens: int = 0
    """Its hit's tokens copied back from the host-memory KV tier (:mod:`fmstack.perfmodel.inference_prefix_offload`);
    0: none (a GPU hit or a miss)."""
    copy_s: float = 0.0
    """Seconds that copy takes (it delays the request's first chunk)."""
    ready_s: float = 0.0
    """The earliest time its first chunk may run (admission + ``copy_s`` after a host hit)."""

    def emit_tokens(self, now_s: float, n: int) -> int:
        """``n`` more output tokens at ``now_s`` (1, or a speculative iteration's draw), capped at those left: the
        request's first sets its TTFT, and the time since its last token is split evenly over the others (so under
        speculation the mean gap is the TPOT, ``(latency - TTFT) / (output - 1)``); the tokens emitted."""
        n = min(n, self.output_len - self.generated)
        rest = n
        if self.generated == 0:
            self.first_token_s = self.last_token_s = now_s
            self.generated, rest = 1, n - 1
        if rest > 0:
            self.gaps_s.extend([(now_s - self.last_token_s) / rest] * rest)
            self.generated += rest
            self.last_token_s = now_s
        return n


def draw_length(rng: np.random.Generator, mean: int, spread: float) -> int:
    """A request's input or output length: ``mean``, or uniform in ``mean x [1 - spread, 1 + spread]`` rounded (at
    least 1; one draw from ``rng`` when ``spread`` > 0)."""
    if spread == 0:
        return mean
    return max(1, round(mean * rng.uniform(1 - spread, 1 + spread)))


def summarise(requests: list[SimRequest], sim: SimConfig, iterations: int) -> SimResult:
    """Percentiles and rates over the measured requests (warm-up and cool-down requests left out)."""
    measured = requests[sim.warmup_requests : sim.num_requests - sim.cooldown_requests]
    done = [r for r in measured if r.generated >= r.output_len]
    if not done:
        raise InputError("load", "no request completed in the simulation")
    ttft = np.array([r.first_token_s - r.arrival_s for r in done])
    lat = np.array([r.last_token_s - r.arrival_s for r in done])
    gaps = np.array([g for r in done for g in r.gaps_s]) if any(r.gaps_s for r in done) else np.zeros(1)
    start = min(r.arrival_s for r in done)
    end = max(r.last_token_s for r in done)
    duration = max(end - start, 1e-12)
    # the engine's completion rate while the measured requests finish: every request completed in that span
    # counts (warm-up and cool-down requests finish between the measured ones)
    first, last = min(r.last_token_s for r in done), end
    inside = sum(1 for r in requests if r.generated >= r.output_len and first <= r.last_token_s <= last)
    rate = (inside - 1) / (last - first) if inside > 1 and last > first else len(done) / duration

    def pct(x: np.ndarray[tuple[int], np.dtype[np.float64]]) -> dict[int, float]:
        return {p: float(np.percentile(x, p)) for p in PERCENTILES}

    return SimResult(
        completed=len(done), duration_s=duration, requests_per_s=len(done) / duration,
        output_tokens_per_s=sum(r.output_len for r in done) / duration, ttft_s=pct(ttft), itl_s=pct(gaps),
        latency_s=pct(lat), mean_ttft_s=float(ttft.mean()), mean_itl_s=float(gaps.mean()),
        mean_latency_s=float(lat.mean()), iterations=iterations, completion_rate_per_s=rate,
        clients_simulated=sim.concurrency or 0, requests_simulated=len(requests),
        makespan_s=max(r.last_token_s for r in requests if r.generated >= r.output_len),
    )  # fmt: skip
