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
generator, so the lengths stay those of the run without it) and each replica an LRU prefix cache in the part of its KV
pool no running sequence holds. Percentiles are over every replica's measured requests (the warm-up and cool-down
are the first and last in arrival order, as in one replica's run).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from fmstack.errors import InputError
from fmstack.perfmodel.inference import ServeConfig
from fmstack.perfmodel.inference_prefix import PrefixCache
from fmstack.perfmodel.inference_router import Router
from fmstack.perfmodel.inference_sim import BatchingSim, new_request
from fmstack.perfmodel.inference_sim_io import SimConfig, SimResult, summarise
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

    def to_json(self) -> dict[str, object]:
        """The keys ``estimate serve --json`` adds (``replica_request_share``, ``replica_utilization``,
        ``prefix_hit_rate_simulated``, ``prefix_token_hit_rate_simulated``, ``router_imbalanced_share``)."""
        out: dict[str, object] = {
            "replica_request_share": list(self.request_share),
            "replica_utilization": list(self.utilization),
            "router_imbalanced_share": self.imbalanced_share,
        }
        if not math.isnan(self.prefix_hit_rate):
            out["prefix_hit_rate_simulated"] = self.prefix_hit_rate
            out["prefix_token_hit_rate_simulated"] = self.prefix_token_hit_rate
        return out


def simulate_fleet(d: Deployment, cfg: ServeConfig, sim: SimConfig) -> FleetResult:
    """``sim.replicas`` replicas behind ``sim.router`` under one Poisson stream of ``replicas x request_rate_per_s``
    requests/s; ``sim.num_requests`` (and the warm-up, cool-down) count the whole deployment's requests."""
    rate, n = sim.request_rate_per_s, sim.replicas
    if rate is None:
        raise InputError("qps", "the replicas are simulated together at an open-loop rate (request_rate_per_s)")
    if sim.prefix is not None and sim.prefix.prefix_len >= cfg.input_len:
        raise InputError("prefix-len", f"must be below --input-len ({cfg.input_len}), got {sim.prefix.prefix_len}")
    if sim.prefix is not None and cfg.prefix_hit_rate > 0:
        raise InputError("prefix-hit-rate", "give either a scalar --prefix-hit-rate or a --prefix-groups workload")
    one = replace(sim, replicas=1, router="round-robin", prefix=None)
    reps = [BatchingSim(d, cfg, one) for _ in range(n)]
    if reps[0].ranks > 1 and sim.prefix is not None:
        raise InputError("prefix-groups", "a shared-prefix workload is not simulated under attention DP (each rank "
                         "would hold its own cache); drop --attention-dp or --prefix-groups")  # fmt: skip
    for r in reps:
        if sim.prefix is not None:
            r.prefix_cache, r.prefix_len = PrefixCache(), sim.prefix.prefix_len
    rng = np.random.default_rng(sim.seed)
    times = np.cumsum(rng.exponential(1.0 / (rate * n), sim.num_requests))
    groups = (
        sim.prefix.draw(np.random.default_rng([sim.seed, GROUP_STREAM]), sim.num_requests)
        if sim.prefix is not None
        else None
    )
    router = Router(name=sim.router, replicas=n, rng=np.random.default_rng([sim.seed, ROUTER_STREAM]))
    prefix_len = 0 if sim.prefix is None else sim.prefix.prefix_len
    requests = []
    counts = [0] * n
    for i, t in enumerate(times.tolist()):
        req = new_request(rng, cfg, sim, i, t)
        if groups is not None:
            req.group = int(groups[i])
        for r in reps:
            r.horizon_s = t
            r.run_until(t)
        k = router.pick([r.outstanding for r in reps], req.group, prefix_len, req.input_len)
        counts[k] += 1
        requests.append(req)
        reps[k].accept(req)
    for r in reps:
        r.horizon_s = math.inf
        r.run_until(math.inf)
    result = summarise(requests, sim, sum(r.iterations for r in reps))
    end_s = max(result.makespan_s, 1e-12)
    measured = requests[sim.warmup_requests : sim.num_requests - sim.cooldown_requests]
    hit, token_hit = math.nan, math.nan
    if sim.prefix is not None and measured:
        hit = sum(q.prefix_hit for q in measured) / len(measured)
        token_hit = sum(min(prefix_len, q.input_len - 1) for q in measured if q.prefix_hit) / sum(
            q.input_len for q in measured
        )
    return FleetResult(
        result=result, replicas=n, router=sim.router, request_share=tuple(c / len(requests) for c in counts),
        utilization=tuple(r.busy_s / end_s for r in reps), prefix_hit_rate=hit, prefix_token_hit_rate=token_hit,
        imbalanced_share=router.imbalanced / len(requests),
    )  # fmt: skip
