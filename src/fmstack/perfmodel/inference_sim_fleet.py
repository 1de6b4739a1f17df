"""N colocated replicas simulated together behind one router (:func:`simulate_fleet`).

One Poisson stream at the deployment's rate (``replicas x request_rate_per_s``) is drawn as a lone replica's is
(the same generator, gaps then each request's lengths in arrival order: with one replica the run is
:func:`fmstack.perfmodel.inference_sim.simulate`'s, bit for bit, tested). Each arrival is routed at its arrival
time: every replica first takes its events before that instant (:meth:`BatchingSim.run_until`; a stretch of
iterations stops at the next arrival, :attr:`BatchingSim.horizon_s`), then the router
(:mod:`fmstack.perfmodel.inference_router`) picks one from their state (requests in flight, its own tree of what it
sent where) and the request joins that replica's queue. Each replica runs the one scheduler and step pricing of
:class:`~fmstack.perfmodel.inference_sim.BatchingSim`. With a shared-prefix workload
(:class:`~fmstack.perfmodel.inference_prefix.PrefixWorkload`) each request carries a group (drawn from its own
generator, so the lengths stay those of the run without it) and each replica (each attention-DP rank) a
reference-counted prefix cache in its KV pool (:mod:`fmstack.perfmodel.inference_sim_prefix`). Percentiles are over every replica's measured requests (the warm-up and cool-down
are the first and last in arrival order, as in one replica's run).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from fmstack.errors import InputError
from fmstack.perfmodel.inference import ServeConfig, max_concurrency
from fmstack.perfmodel.inference_prefix_offload import offload_stats
from fmstack.perfmodel.inference_router import Router
from fmstack.perfmodel.inference_sim import BatchingSim, new_request
from fmstack.perfmodel.inference_sim_io import SimConfig, SimRequest, SimResult, summarise
from fmstack.perfmodel.inference_step import Deployment

GROUP_STREAM = 1
"""Seed offset of the prefix groups' generator (``default_rng([seed, GROUP_STREAM])``)."""
ROUTER_STREAM = 2
"""Seed offset of the random router's generator."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FleetResult:
    """A joint run: the percentiles over all replicas, and how the router spread the requests."""

    result: SimResult
    replicas: int
    router: str
    request_share: tuple[float, ...]
    """Each replica's share of the requests routed."""
    utilization: tuple[float, ...]
    """Each replica's seconds with an iteration in progress over the run (0 to the last token)."""
    prefix_hit_rate: float = math.nan
    """Measured requests whose prefix was cached at admission (nan without a prefix workload)."""
    prefix_token_hit_rate: float = math.nan
    """Prompt tokens served from the cache over all prompt tokens of the measured requests (SGLang's "cache hit
    rate"; nan without a prefix workload)."""
    imbalanced_share: float = 0.0
    """cache-aware: requests routed by the shortest-queue rule (the load was imbalanced)."""
    mean_running_seqs: tuple[float, ...] = ()
    """Each replica's sequences running (admitted: KV reserved, not finished), averaged over the run (0 to the last
    token, :func:`mean_running`): how loaded it is, where :attr:`utilization` reads near 1 whenever any decode is
    in flight."""
    max_running_seqs: float = math.inf
    """The most sequences a replica runs at the configured lengths: ``max_batch`` or what its KV pool holds
    (:func:`fmstack.perfmodel.inference.max_concurrency`), whichever is fewer."""
    kv_offload: dict[str, float] | None = None
    """The host-memory KV tier's statistics (:func:`fmstack.perfmodel.inference_prefix_offload.offload_stats`; None
    without one)."""
    sessions: dict[str, object] | None = None
    """A multi-turn workload's per-turn statistics (:func:`fmstack.perfmodel.inference_sim_session.session_stats`;
    None without one)."""

    def to_json(self) -> dict[str, object]:
        """The keys ``estimate serve --json`` adds (``replica_request_share``, ``replica_utilization``,
        ``replica_mean_running_seqs``, ``replica_max_running_seqs``, ``replica_batch_occupancy`` (the mean over the
        most), ``prefix_hit_rate_simulated``, ``prefix_token_hit_rate_simulated``, ``router_imbalanced_share``)."""
        out: dict[str, object] = {
            "replica_request_share": list(self.request_share),
            "replica_utilization": list(self.utilization),
            "replica_mean_running_seqs": list(self.mean_running_seqs),
            "replica_max_running_seqs": self.max_running_seqs,
            "replica_batch_occupancy": [x / self.max_running_seqs for x in self.mean_running_seqs],
            "router_imbalanced_share": self.imbalanced_share,
        }
        if not math.isnan(self.prefix_hit_rate):
            out["prefix_hit_rate_simulated"] = self.prefix_hit_rate
            out["prefix_token_hit_rate_simulated"] = self.prefix_token_hit_rate
        if self.sessions is not None:
            out["sessions"] = self.sessions
        if self.kv_offload is not None:
            out["kv_offload"] = self.kv_offload
        return out


def simulate_fleet(d: Deployment, cfg: ServeConfig, sim: SimConfig, *, lazy: bool = True) -> FleetResult:
    """``sim.replicas`` replicas behind ``sim.router`` under one Poisson stream of ``replicas x request_rate_per_s``
    requests/s; ``sim.num_requests`` (and the warm-up, cool-down) count the whole deployment's requests.

    ``lazy``: a replica's stretch of iterations runs on past the arrivals sent elsewhere, and only the replica a
    request is sent to is cut back to that instant (:meth:`BatchingSim.cut_at`); False: every stretch stops at every
    arrival (``horizon_s``; the same results, slower; the reference for tests and benchmarks)."""
    if sim.sessions is not None:
        return _simulate_sessions(d, cfg, sim)
    run = run_fleet(d, cfg, sim, lazy=lazy)
    requests, reps, n = run.requests, run.replicas, len(run.replicas)
    result = summarise(requests, sim, sum(r.iterations for r in reps))
    end_s = max(result.makespan_s, 1e-12)
    measured = requests[sim.warmup_requests : sim.num_requests - sim.cooldown_requests]
    hit, token_hit = math.nan, math.nan
    prefix_len = 0 if sim.prefix is None else sim.prefix.prefix_len
    if sim.prefix is not None and measured:
        hit = sum(q.prefix_hit for q in measured) / len(measured)
        token_hit = sum(min(prefix_len, q.input_len - 1) for q in measured if q.prefix_hit) / sum(
            q.input_len for q in measured
        )
    running = tuple(mean_running(r.requests, end_s) for r in reps)
    return FleetResult(
        result=result, replicas=n, router=sim.router,
        request_share=tuple(len(r.requests) / len(requests) for r in reps),
        utilization=tuple(r.busy_s / end_s for r in reps), prefix_hit_rate=hit, prefix_token_hit_rate=token_hit,
        imbalanced_share=run.router.imbalanced / len(requests), mean_running_seqs=running,
        max_running_seqs=float(min(cfg.max_batch or math.inf, max_concurrency(d, replace(cfg, max_batch=None)))),
        kv_offload=None if sim.kv_offload is None else offload_stats(measured, sim.kv_offload),
    )  # fmt: skip


def _simulate_sessions(d: Deployment, cfg: ServeConfig, sim: SimConfig) -> FleetResult:
    """:func:`simulate_fleet` of a multi-turn workload (:func:`fmstack.perfmodel.inference_sim_session.run_sessions`,
    always lazy): a hit is a turn whose history (or, on a first turn, system prefix) was cached where it ran."""
    from fmstack.perfmodel.inference_sim_session import run_sessions, session_stats

    run = run_sessions(d, cfg, sim)
    requests, reps, window = run.requests, run.replicas, run.sim
    result = summarise(requests, window, sum(r.iterations for r in reps))
    end_s = max(result.makespan_s, 1e-12)
    measured = requests[window.warmup_requests : window.num_requests - window.cooldown_requests]
    hit = sum(q.prefix_hit for q in measured) / len(measured)
    token_hit = sum(q.kv_shared for q in measured if q.prefix_hit) / sum(q.input_len for q in measured)
    assert sim.sessions is not None
    stats = session_stats(measured, sim.sessions) | {"requests_simulated": len(requests),
                                                      "requests_measured": len(measured)}  # fmt: skip
    return FleetResult(
        result=result, replicas=len(reps), router=sim.router,
        request_share=tuple(len(r.requests) / len(requests) for r in reps),
        utilization=tuple(r.busy_s / end_s for r in reps), prefix_hit_rate=hit, prefix_token_hit_rate=token_hit,
        imbalanced_share=run.router.imbalanced / len(requests),
        mean_running_seqs=tuple(mean_running(r.requests, end_s) for r in reps),
        max_running_seqs=float(min(cfg.max_batch or math.inf, max_concurrency(d, replace(cfg, max_batch=None)))),
        sessions=stats, kv_offload=None if sim.kv_offload is None else offload_stats(measured, sim.kv_offload),
    )  # fmt: skip


def mean_running(requests: list[SimRequest], end_s: float) -> float:
    """Sequences running (admitted, holding their KV reservation, not finished), averaged over ``[0, end_s]``: each
    request's time from its admission to its last token, summed, over ``end_s`` (Little's law over the batch)."""
    return sum(q.last_token_s - q.admitted_s for q in requests) / end_s


@dataclass(frozen=True, slots=True)
class FleetRun:
    """A joint run's requests (in arrival order) and the replicas and router as the run left them."""

    requests: list[SimRequest]
    replicas: list[BatchingSim]
    router: Router


def run_fleet(d: Deployment, cfg: ServeConfig, sim: SimConfig, *, lazy: bool = True) -> FleetRun:
    """The joint run of :func:`simulate_fleet` (its ``lazy`` switch), unsummarised."""
    rate, n = sim.request_rate_per_s, sim.replicas
    if rate is None:
        raise InputError("qps", "the replicas are simulated together at an open-loop rate (request_rate_per_s)")
    if sim.prefix is not None and sim.prefix.prefix_len >= cfg.input_len:
        raise InputError("prefix-len", f"must be below --input-len ({cfg.input_len}), got {sim.prefix.prefix_len}")
    if sim.prefix is not None and cfg.prefix_hit_rate > 0:
        raise InputError("prefix-hit-rate", "give either a scalar --prefix-hit-rate or a --prefix-groups workload")
    one = replace(sim, replicas=1, router="round-robin", prefix=None)
    reps = [BatchingSim(d, cfg, one) for _ in range(n)]
    for r in reps:
        if sim.prefix is not None:
            r.use_prefix_cache(sim.prefix.prefix_len)
        r.routed = lazy
    rng = np.random.default_rng(sim.seed)
    times = np.cumsum(rng.exponential(1.0 / (rate * n), sim.num_requests))
    groups = (
        sim.prefix.draw(np.random.default_rng([sim.seed, GROUP_STREAM]), sim.num_requests)
        if sim.prefix is not None
        else None
    )
    router = Router(name=sim.router, replicas=n, rng=np.random.default_rng([sim.seed, ROUTER_STREAM]),
                    kv_config=sim.kv_router)  # fmt: skip
    if router.kv is not None:  # its counts kept as the replicas report first tokens and completions
        router.kv.watch(reps)
    prefix_len = 0 if sim.prefix is None else sim.prefix.prefix_len
    requests = []
    for i, t in enumerate(times.tolist()):
        req = new_request(rng, cfg, sim, i, t)
        if groups is not None:
            req.group = int(groups[i])
        # the router reads the requests in flight, which change only as a request completes: at an event, never
        # inside a stretch (it stops at its first completion), so a lazy replica's count before t is exact; the same
        # for the KV router's first tokens (a chunk's stretch stops before a prompt's last chunk) and prefix caches
        for r in reps:
            if not lazy:
                r.horizon_s = t
            r.run_until(t)
        if router.kv is not None:
            k = router.kv.pick(req, [r.prefix_cache for r in reps], prefix_len)
        else:
            k = router.pick([r.outstanding for r in reps], req.group, prefix_len, req.input_len)
        requests.append(req)
        reps[k].cut_at(t)
        reps[k].accept(req)
    for r in reps:  # every replica as the last arrival left it, then on to the end (a stretch past its own arrivals)
        if requests:
            r.cut_at(requests[-1].arrival_s)
        r.routed = False
        r.horizon_s = math.inf
        r.run_until(math.inf)
    return FleetRun(requests, reps, router)
