"""Multi-turn sessions (:mod:`fmstack.perfmodel.inference_session`) in a disaggregated split: how
:func:`fmstack.perfmodel.inference_plan_disagg.run_split` sizes one (:func:`split_session_configs`) and prices each
turn's KV transfer by its prompt (:func:`session_kv`); the simulation is
:mod:`fmstack.perfmodel.inference_sim_disagg_session`.

Screening at the mean turn, as :mod:`fmstack.perfmodel.inference_plan_session` screens colocated replicas: the
prompt is the turns' mean, ``input + (turns - 1) / 2 x (input + output)`` (rounded up), and the share of it the
prefill pool does not compute is the turns' expected cached history over it. A prefill replica holds the prompt of
the turn it computed (never the answer, generated on a decode replica), so turn ``t`` that lands where turn ``j``
ran finds ``(j - 1) x (input + output) + input`` tokens: the colocated
:func:`~fmstack.perfmodel.inference_plan_session.cached_tokens` less ``output`` for each hit. The caches a turn may
land on: 1 behind a router that follows the session (``session``, ``cache-aware``, ``kv``), the ``P`` prefill
replicas behind a blind one (:func:`~fmstack.perfmodel.inference_plan_session.cache_units`). Eviction is not priced
(optimistic; the simulation decides). The decode pool is sized at the mean turn's context.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from fmstack.catalog.schema import ModelArch
from fmstack.catalog.topology import Cluster
from fmstack.perfmodel.efficiency import EfficiencyFor
from fmstack.perfmodel.inference import ServeConfig, deployment_for
from fmstack.perfmodel.inference_disagg import SLO
from fmstack.perfmodel.inference_disagg_place import kv_pair_times
from fmstack.perfmodel.inference_kv_pairs import PairTimes
from fmstack.perfmodel.inference_plan_candidate import Candidate, ClusterOf, deployment_nodes
from fmstack.perfmodel.inference_plan_session import holds_conversation
from fmstack.perfmodel.inference_prefix import PrefixWorkload
from fmstack.perfmodel.inference_session import SessionWorkload
from fmstack.perfmodel.inference_session_mean import (
    HISTORY_ROUTERS,
    cache_units,
    cached_tokens,
    first_turn_prefix,
    hit_turns,
    mean_prompt_tokens,
)
from fmstack.perfmodel.inference_step import Deployment

if TYPE_CHECKING:
    from fmstack.perfmodel.inference_plan_disagg import DecodePools


def cached_prompt_tokens(turn: int, input_len: int, output_len: int, units: int | None) -> float:
    """Expected tokens turn ``turn`` finds cached on its prefill replica: the previous prompt it finds there,
    ``sum_{j < turn} (1 / u) (1 - 1 / u)^(turn - 1 - j) x ((j - 1) x (input + output) + input)``."""
    if units is None:
        return 0.0
    hit = 1 - (1 - 1 / units) ** (turn - 1)
    return cached_tokens(turn, input_len, output_len, units) - output_len * hit


def split_session_configs(
    cfg: ServeConfig, decode_cfg: ServeConfig, spec: SessionWorkload, router: str, prefill_replicas: int,
    prefix: PrefixWorkload | None = None, d: Deployment | None = None,
) -> tuple[ServeConfig, ServeConfig]:  # fmt: skip
    """(the prefill pool's config at the mean turn: its prompt and cached share, the decode pool's at the mean
    turn's prompt) for the load check and the warm-up (module docstring). With a shared system prefix ``prefix``
    (and the prefill replica ``d``): the first turns' hits on it too (:func:`split_first_turn`)."""
    isl = math.ceil(mean_prompt_tokens(spec, cfg.input_len, cfg.output_len))
    units = cache_units(router, prefill_replicas, 1)
    cached = sum(cached_prompt_tokens(t, cfg.input_len, cfg.output_len, units) for t in range(1, spec.turns + 1))
    pre = replace(cfg, input_len=isl, prefix_hit_rate=cached / spec.turns / isl)
    first = split_first_turn(prefix, d, pre, cfg.input_len, prefill_replicas, router)[1]
    return replace(pre, prefix_hit_rate=(cached + first) / spec.turns / isl), replace(decode_cfg, input_len=isl)


def split_first_turn(
    prefix: PrefixWorkload | None, d: Deployment | None, pre: ServeConfig, input_len: int, prefill_replicas: int,
    router: str,
) -> tuple[float, float]:  # fmt: skip
    """A first turn's hit on its system prefix in the prefill pool's caches (``d``, the mean turn ``pre``):
    :func:`~fmstack.perfmodel.inference_session_mean.first_turn_prefix` over the ``prefill_replicas``; (0, 0)
    without a prefix."""
    if prefix is None or d is None:
        return 0.0, 0.0
    return first_turn_prefix(prefix, d, pre, input_len, prefill_replicas, router)


def session_kv(
    model: ModelArch, two: Cluster, cfg: ServeConfig, d: Deployment, decode: Deployment | None, prefill_replicas: int,
    decode_replicas: int, gpus_per_node: int, nodes_per_domain: int,
) -> tuple[Callable[[int], PairTimes], Callable[[int], float]]:  # fmt: skip
    """(prompt tokens -> each pair's KV transfer seconds, prompt tokens -> KV bytes moved): the split's
    :func:`~fmstack.perfmodel.inference_disagg_place.kv_pair_times` of a prompt of that length (the whole
    conversation's KV moves each turn), each length priced once."""
    priced: dict[int, tuple[PairTimes, float]] = {}

    def at(tokens: int) -> tuple[PairTimes, float]:
        if tokens not in priced:
            kv = kv_pair_times(model, two, replace(cfg, input_len=tokens), d, decode, prefill_replicas,
                               decode_replicas, gpus_per_node, nodes_per_domain)  # fmt: skip
            priced[tokens] = kv.pair_s, kv.kv_bytes
        return priced[tokens]

    return (lambda tokens: at(tokens)[0]), (lambda tokens: at(tokens)[1])


MAX_SCREENS = 64
"""A bound on :func:`session_split_analytic`'s iteration over the prefill caches behind a blind router (a safeguard:
each step adds prefill replicas, up to the count without hits)."""


def session_split_analytic(
    cfg: ServeConfig, cluster_of: ClusterOf, model: ModelArch, qps: float, slo: SLO, name: str, nodes_per_replica: int,
    spec: SessionWorkload, decode_cfg: ServeConfig | None = None, efficiency_for: EfficiencyFor | None = None,
    decode_pools: DecodePools | None = None, router: str = "round-robin", prefix: PrefixWorkload | None = None,
) -> Candidate | None:  # fmt: skip
    """`plan serve --turns N`'s screening of a split of ``cfg`` (prefill) and ``decode_cfg`` (decode; None: the same
    layout), ``cfg.input_len`` a turn's new tokens: :func:`~fmstack.perfmodel.inference_plan_disagg.disagg_analytic`
    at the mean turn (:func:`split_session_configs`: the prefill pool computes the uncached part of the mean prompt,
    the decode pool's slots hold the mean prompt's context, the KV transfer moves the mean prompt). Behind a router
    that follows the session the prefill caches are one (every later turn hits its previous prompt); behind a blind
    one the hits are those of ``P`` caches, ``P`` the prefill replicas the screening gives at them: from ``P = 1``,
    ``P <- the split's prefill replicas at P caches`` until it stops rising (it only rises: fewer hits, more
    prefill work), the fixed point of :func:`~fmstack.perfmodel.inference_plan_session.fewest_replicas`. The row
    carries the mean turn's cached share (``prefix_hit_rate``) and the share of turns that hit
    (``prefix_request_hit_rate``); a shared system prefix ``prefix`` adds its first turns' hits
    (:func:`split_first_turn`). None: attention DP in either pool (not simulated with sessions), a whole
    conversation that a prefill or a decode replica's KV pool cannot hold (the simulation refuses it), or no split
    within the SLO."""
    from fmstack.perfmodel.inference_plan_disagg import disagg_analytic

    dc = cfg if decode_cfg is None else decode_cfg
    if cfg.attention_dp or dc.attention_dp:
        return None
    gpn = cluster_of(name, 1).instance.num_gpus
    d = deployment_for(model, cluster_of(name, nodes_per_replica), cfg, efficiency_for)
    dd = deployment_for(model, cluster_of(name, max(1, deployment_nodes(1, dc, gpn))), dc, efficiency_for)
    if not (holds_conversation(d, cfg, spec) and holds_conversation(dd, dc, spec)):
        return None
    caches = 1
    for _ in range(MAX_SCREENS):
        pre, dec = split_session_configs(cfg, dc, spec, router, caches, prefix, d)
        c = disagg_analytic(pre, cluster_of, model, qps, slo, name, nodes_per_replica, decode_cfg=dec,
                            efficiency_for=efficiency_for, decode_pools=decode_pools)  # fmt: skip
        if c is None:
            return None
        if router in HISTORY_ROUTERS or c.prefill_replicas <= caches:
            first = split_first_turn(prefix, d, pre, cfg.input_len, caches, router)[0]
            return replace(c, prefix_hit_rate=pre.prefix_hit_rate,
                           prefix_request_hit_rate=hit_turns(spec, cache_units(router, caches, 1), first))  # fmt: skip
        caches = c.prefill_replicas
    return None


def screen_split(
    cfg: ServeConfig, cluster_of: ClusterOf, model: ModelArch, qps: float, slo: SLO, name: str, nodes_per_replica: int,
    *, decode_cfg: ServeConfig | None = None, efficiency_for: EfficiencyFor | None = None,
    decode_pools: DecodePools | None = None, prefix: PrefixWorkload | None = None, router: str = "round-robin",
    sessions: SessionWorkload | None = None,
) -> Candidate | None:  # fmt: skip
    """`plan serve`'s screening of one split: :func:`session_split_analytic` with a multi-turn workload, else
    :func:`~fmstack.perfmodel.inference_plan_disagg.disagg_analytic` (independent requests, ``prefix``)."""
    from fmstack.perfmodel.inference_plan_disagg import disagg_analytic

    if sessions is not None:
        return session_split_analytic(cfg, cluster_of, model, qps, slo, name, nodes_per_replica, sessions,
                                      decode_cfg, efficiency_for, decode_pools, router, prefix)  # fmt: skip
    return disagg_analytic(cfg, cluster_of, model, qps, slo, name, nodes_per_replica, decode_cfg, efficiency_for,
                           decode_pools, prefix, router)  # fmt: skip


def session_splits_note(sessions: SessionWorkload | None, searched: bool) -> str:
    """What the plan's note adds on splits under a multi-turn workload (empty without one or without splits)."""
    if sessions is None or not searched:
        return ""
    return (f" (splits searched for sessions of {sessions.turns} turns: screened at the mean turn, the prefill pool "
            "computing what its caches of each session's previous prompt leave, every turn moving its whole prompt's "
            "KV; checked by simulating the sessions in the split; attention-DP pools not searched, a split's sessions "
            "are simulated without them)")  # fmt: skip
