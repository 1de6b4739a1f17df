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
from collections.abc import Callable, Sequence
from dataclasses import replace

from fmstack.catalog.schema import ModelArch
from fmstack.catalog.topology import Cluster
from fmstack.perfmodel.inference import ServeConfig
from fmstack.perfmodel.inference_disagg_place import kv_pair_times
from fmstack.perfmodel.inference_session import SessionWorkload
from fmstack.perfmodel.inference_session_mean import cache_units, cached_tokens, mean_prompt_tokens
from fmstack.perfmodel.inference_step import Deployment


def cached_prompt_tokens(turn: int, input_len: int, output_len: int, units: int | None) -> float:
    """Expected tokens turn ``turn`` finds cached on its prefill replica: the previous prompt it finds there,
    ``sum_{j < turn} (1 / u) (1 - 1 / u)^(turn - 1 - j) x ((j - 1) x (input + output) + input)``."""
    if units is None:
        return 0.0
    hit = 1 - (1 - 1 / units) ** (turn - 1)
    return cached_tokens(turn, input_len, output_len, units) - output_len * hit


def split_session_configs(
    cfg: ServeConfig, decode_cfg: ServeConfig, spec: SessionWorkload, router: str, prefill_replicas: int
) -> tuple[ServeConfig, ServeConfig]:
    """(the prefill pool's config at the mean turn: its prompt and cached share, the decode pool's at the mean
    turn's prompt) for the load check and the warm-up (module docstring)."""
    isl = math.ceil(mean_prompt_tokens(spec, cfg.input_len, cfg.output_len))
    units = cache_units(router, prefill_replicas, 1)
    cached = sum(cached_prompt_tokens(t, cfg.input_len, cfg.output_len, units) for t in range(1, spec.turns + 1))
    return replace(cfg, input_len=isl, prefix_hit_rate=cached / spec.turns / isl), replace(decode_cfg, input_len=isl)


def session_kv(
    model: ModelArch, two: Cluster, cfg: ServeConfig, d: Deployment, decode: Deployment | None, prefill_replicas: int,
    decode_replicas: int, gpus_per_node: int, nodes_per_domain: int,
) -> tuple[Callable[[int], Sequence[Sequence[float]]], Callable[[int], float]]:  # fmt: skip
    """(prompt tokens -> each pair's KV transfer seconds, prompt tokens -> KV bytes moved): the split's
    :func:`~fmstack.perfmodel.inference_disagg_place.kv_pair_times` of a prompt of that length (the whole
    conversation's KV moves each turn), each length priced once."""
    priced: dict[int, tuple[Sequence[Sequence[float]], float]] = {}

    def at(tokens: int) -> tuple[Sequence[Sequence[float]], float]:
        if tokens not in priced:
            kv = kv_pair_times(model, two, replace(cfg, input_len=tokens), d, decode, prefill_replicas,
                               decode_replicas, gpus_per_node, nodes_per_domain)  # fmt: skip
            priced[tokens] = kv.pair_s, kv.kv_bytes
        return priced[tokens]

    return (lambda tokens: at(tokens)[0]), (lambda tokens: at(tokens)[1])
