"""`plan serve`'s verification: the cheapest candidates are simulated at p99, best-ranked first; a miss retries with
more replicas (first the ones its paid nodes hold, then multiples of its analytic count) while it could still rank
first (:func:`verify_cheapest`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from fmstack.catalog.schema import ModelArch
from fmstack.errors import InputError
from fmstack.perfmodel.efficiency import EfficiencyFor
from fmstack.perfmodel.inference import deployment_for
from fmstack.perfmodel.inference_disagg import SLO
from fmstack.perfmodel.inference_open_loop import needs_fleet, simulate_open_loop, simulate_open_loop_fleet
from fmstack.perfmodel.inference_plan_candidate import Candidate, ClusterOf, config_of, with_replicas
from fmstack.perfmodel.inference_plan_disagg import grow_split, simulate_split
from fmstack.perfmodel.inference_prefix import PrefixWorkload
from fmstack.perfmodel.inference_router_kv import KvRouterConfig
from fmstack.perfmodel.inference_session import SessionWorkload
from fmstack.perfmodel.inference_sim import SimResult

VERIFY_TOP = 3
"""Candidates checked by simulation at least (best-ranked first); more while an unchecked one could still rank
first (the analytic cost is a lower bound), up to ``VERIFY_MAX`` new candidates."""
VERIFY_MAX = 8
REPLICA_FACTORS = (1.0, 1.5, 2.0, 3.0)
"""Replica counts tried, as multiples of the analytic count, for a candidate whose simulated p99 misses the SLO
before it is dropped (means understate p99: queueing behind another prompt's prefill)."""


def verify_cheapest(
    cluster_of: ClusterOf, model: ModelArch, found: list[Candidate], qps: float, isl: int, osl: int, slo: SLO, seed: int,
    on_simulate: Callable[[Candidate], None] | None = None, *, efficiency_for: EfficiencyFor | None = None,
    router: str = "round-robin", prefix: PrefixWorkload | None = None, kv_router: KvRouterConfig | None = None,
    sessions: SessionWorkload | None = None,
) -> list[Candidate]:  # fmt: skip
    """Simulate the cheapest options first. An option is a candidate at a multiple of its analytic replicas
    (``REPLICA_FACTORS``); one that misses the SLO goes back into the queue at the next multiple, priced at its
    larger replica count, so a cheaper candidate is simulated before a miss is retried with more replicas (an
    attention-DP candidate missing p99 ITL by a hair costs its retries only while they could still be cheapest).
    A colocated option is simulated as one of its replicas behind ``router`` at ``qps`` in all; a split's prefill
    pool is one shared queue its idle replicas pull from (:func:`simulate_split`), whatever the router. A router
    that chooses from the replicas' state, or a shared-prefix workload ``prefix``, simulates a colocated option's
    replicas together (:func:`fmstack.perfmodel.inference_open_loop.simulate_open_loop_fleet`; ``kv_router``: the
    ``kv`` router's settings). ``sessions``: a multi-turn workload, its turns of ``isl`` new tokens simulated with the
    replicas together (:mod:`fmstack.perfmodel.inference_sim_session`)."""

    def key(c: Candidate) -> tuple[float, int, float]:
        return (c.cost_per_hour_usd, c.busy_gpus, -c.rate_per_replica_rps)  # then fewest GPUs busy

    # (option, its factor's index, the candidate as the analytic search found it, the last one simulated with its
    # percentiles: a miss is reported as the largest deployment simulated, with that simulation's p99)
    pending: list[tuple[Candidate, int, Candidate, Candidate | None]] = [
        (c, 0, c, None) for c in sorted(found, key=key)
    ]
    checked: list[Candidate] = []
    tried = 0  # candidates simulated at their analytic replicas
    while pending:
        j = 0
        if tried >= VERIFY_MAX:  # no new candidate; a miss's retries go on while they could still be the cheapest
            j = next((n for n, p in enumerate(pending) if p[1] > 0), -1)
            if j < 0:
                break
        option, i, first, _ = pending[j]
        # stop once a deployment that meets the SLO ranks at or before this one on cost, then GPUs busy (the queue is
        # in that order: nothing after it can rank first); an equal-cost option with fewer GPUs busy is simulated
        passing = [key(c)[:2] for c in checked if c.meets_slo]
        if tried >= VERIFY_TOP and passing and min(passing) <= key(option)[:2]:
            break
        pending.pop(j)
        tried += i == 0
        split = option.mode == "disaggregated"
        if on_simulate is not None:
            on_simulate(option)
        result, note = _check(cluster_of, model, option, qps, isl, osl, seed, efficiency_for, router, prefix, kv_router,
                              sessions)  # fmt: skip
        sim = None if result is None else result.percentiles()
        if result is not None and result.ttft_s[99] <= slo.ttft_s and result.itl_s[99] <= slo.itl_s:
            checked.append(replace(option, sim=sim, meets_slo=True))
        elif i + 1 == len(REPLICA_FACTORS) or (split and result is None):
            checked.append(replace(option, sim=sim, meets_slo=False, sim_note=note))
        else:
            factor = REPLICA_FACTORS[i + 1]
            fill = option.nodes // option.nodes_per_replica * _replicas_per_node_group(cluster_of, option)
            if split and result is not None:
                more = grow_split(cluster_of, model, option, first, factor, result, slo, qps, isl, osl,
                                  efficiency_for, sessions, router, prefix)  # fmt: skip
            else:  # the replicas the paid nodes hold come first (free); then the next multiple
                more = with_replicas(
                    cluster_of, first, fill if fill > option.replicas else math.ceil(first.replicas * factor)
                )
            pending.append((more, i + 1, first, replace(option, sim=sim, meets_slo=False, sim_note=note)))
            pending.sort(key=lambda p: key(p[0]))
    # a miss whose retry with more replicas was left unsimulated: it costs at least the cheapest that meets the SLO
    checked += [missed for _, i, _, missed in pending if i > 0 and missed is not None]
    rest = [first for _, i, first, _ in pending if i == 0]
    return sorted(checked, key=lambda c: (not c.meets_slo, *key(c))) + rest


def _replicas_per_node_group(cluster_of: ClusterOf, c: Candidate) -> int:
    """Replicas of ``c`` that one group of ``c.nodes_per_replica`` nodes holds (8 tp-2 replicas on an 8-GPU node)."""
    gpus = c.nodes_per_replica * cluster_of(c.instance, 1).instance.num_gpus
    return max(1, gpus // (c.tp * c.pp))


def _check(
    cluster_of: ClusterOf, model: ModelArch, c: Candidate, qps: float, isl: int, osl: int, seed: int,
    efficiency_for: EfficiencyFor | None = None, router: str = "round-robin", prefix: PrefixWorkload | None = None,
    kv_router: KvRouterConfig | None = None, sessions: SessionWorkload | None = None,
) -> tuple[SimResult | None, str]:  # fmt: skip
    """The simulation of ``c`` at ``qps``, or None and why there is none: a colocated replica too near its capacity
    to reach a steady state (:func:`_simulate`), a split whose prefill or decode pool cannot take ``qps``
    (:func:`fmstack.perfmodel.inference_plan_disagg.run_split`'s InputError); ``sessions``: a split's run simulates
    them too (:mod:`fmstack.perfmodel.inference_sim_disagg_session`)."""
    if c.mode != "disaggregated":
        return _simulate(cluster_of, model, c, qps, isl, osl, seed, efficiency_for, router, prefix, kv_router,
                         sessions)  # fmt: skip
    try:
        return simulate_split(
            cluster_of, model, c, qps, isl, osl, seed, efficiency_for, prefix, router, kv_router, sessions
        ), ""
    except InputError as exc:  # a pool below qps; a conversation a replica's KV pool cannot hold (sessions)
        if exc.field not in ("qps", "turns"):
            raise
        return None, exc.message


def _simulate(
    cluster_of: ClusterOf, model: ModelArch, c: Candidate, qps: float, isl: int, osl: int, seed: int,
    efficiency_for: EfficiencyFor | None = None, router: str = "round-robin", prefix: PrefixWorkload | None = None,
    kv_router: KvRouterConfig | None = None, sessions: SessionWorkload | None = None,
) -> tuple[SimResult | None, str]:  # fmt: skip
    """One replica of ``c``, one of its ``replicas`` behind ``router`` at ``qps`` in all (``qps / replicas`` at the
    replica: Erlang gaps behind round-robin, Poisson behind a random router), the run ``estimate serve --qps qps
    --replicas R --router ...`` makes (:func:`fmstack.perfmodel.inference_open_loop.simulate_open_loop`: a warm-up by Little's law and the
    queue's relaxation time, the same seed, the same percentiles); None and the reason where the rate is too near
    the replica's capacity for a steady state. ``sessions``: a multi-turn run of the replicas together (``estimate
    serve --turns N``); a conversation a replica's KV pool cannot hold is a miss with its reason."""
    cfg = config_of(c, isl, osl)
    d = deployment_for(model, cluster_of(c.instance, c.nodes_per_replica), cfg, efficiency_for)
    try:
        if needs_fleet(router, prefix, sessions):  # the replicas together: percentiles over all of them
            run, fleet = simulate_open_loop_fleet(d, cfg, qps / c.replicas, seed=seed, replicas=c.replicas,
                                                  router=router, prefix=prefix, kv_router=kv_router,
                                                  sessions=sessions)  # fmt: skip
            result = None if fleet is None else fleet.result
        else:
            run, result = simulate_open_loop(d, cfg, qps / c.replicas, seed=seed, replicas=c.replicas, router=router)
    except InputError as exc:  # above the analytic capacity (a candidate is priced below it: a safeguard)
        if exc.field != "qps" and not (sessions is not None and exc.field == "turns"):
            raise
        return None, exc.message
    return result, "" if result is not None else run.near_capacity_reason()
