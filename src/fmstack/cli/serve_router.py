"""The shared-prefix workload flags of `estimate serve` and `plan serve` (``--prefix-groups``, ``--prefix-len``,
``--prefix-zipf``), checked into a :class:`~fmstack.perfmodel.inference_prefix.PrefixWorkload`, and the KV router's
(``--kv-overlap-weight``, ``--router-temperature``, ``--kv-block-size``), checked into a
:class:`~fmstack.perfmodel.inference_router_kv.KvRouterConfig` (docs/inference.md, Routers)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

import click

from fmstack.errors import InputError
from fmstack.perfmodel.efficiency import Efficiency
from fmstack.perfmodel.inference import ServeConfig, ServeEstimate, deployment, estimate_serve
from fmstack.perfmodel.inference_kv import DEFAULT_BLOCK_TOKENS
from fmstack.perfmodel.inference_prefix import PrefixWorkload
from fmstack.perfmodel.inference_router_kv import OVERLAP_WEIGHT, TEMPERATURE, KvRouterConfig

F = TypeVar("F", bound=Callable[..., Any])

ROUTER_HELP = (
    "round-robin (Dynamo's frontend and vLLM production-stack's default: every R-th request), random (e.g. a "
    "Kubernetes Service via kube-proxy's iptables mode), least-loaded (fewest requests in flight: SGLang router's "
    "shortest queue), power-of-two (SGLang router's power_of_two: of two replicas drawn at random, the one with fewer "
    "requests in flight), cache-aware (SGLang router's cache_aware policy) or kv (NVIDIA Dynamo's KV router: the "
    "lowest --kv-overlap-weight x prefill blocks + active blocks); the last four, and any --prefix-groups workload, "
    "simulate the replicas together."
)


def prefix_options(f: F) -> F:
    """The three flags (``--prefix-groups``, ``--prefix-len``, ``--prefix-zipf``)."""
    f = click.option("--prefix-zipf", type=float, default=0.0, show_default=True,
                     help="With --prefix-groups: popularity skew, group g drawn ~ 1 / (g + 1)^s (0 = uniform).")(f)  # fmt: skip
    f = click.option("--prefix-len", type=int, default=None,
                     help="With --prefix-groups: shared tokens at the start of every prompt (< --input-len).")(f)  # fmt: skip
    f = click.option("--prefix-groups", type=int, default=None,
                     help="Simulate prefix caching: every prompt starts with one of this many shared prefixes, each "
                     "replica caches them (LRU, in its free KV), the hit rate comes out (excludes --prefix-hit-rate).")(f)  # fmt: skip
    return f


def kv_router_options(f: F) -> F:
    """The KV router's flags (``--kv-overlap-weight``, ``--router-temperature``, ``--kv-block-size``)."""
    f = click.option("--kv-block-size", type=int, default=None,
                     help=f"With --router kv: tokens per KV block as the router hashes them (Dynamo "
                     f"--kv-cache-block-size; the engine's) [{DEFAULT_BLOCK_TOKENS}].")(f)  # fmt: skip
    f = click.option("--router-temperature", type=float, default=None,
                     help=f"With --router kv: 0 picks the lowest cost, > 0 samples a softmax of the normalised costs "
                     f"(Dynamo --router-temperature) [{TEMPERATURE:g}].")(f)  # fmt: skip
    f = click.option("--kv-overlap-weight", type=float, default=None,
                     help=f"With --router kv: weight of the prefill blocks against the active blocks (Dynamo "
                     f"--kv-overlap-score-weight; 0: balance active blocks alone) [{OVERLAP_WEIGHT:g}].")(f)  # fmt: skip
    return f


def kv_router_config(
    router: str, weight: float | None, temperature: float | None, block_size: int | None
) -> KvRouterConfig | None:
    """The KV router's settings (Dynamo's defaults for those not given) with ``--router kv``, else None; one line, exit
    2, for a flag given with another router or a value out of range."""
    given = {"kv-overlap-weight": weight, "router-temperature": temperature, "kv-block-size": block_size}
    if router != "kv":
        for flag, value in given.items():
            if value is not None:
                raise InputError(flag, f"--{flag} sets the KV router: give --router kv (got --router {router})")
        return None
    return KvRouterConfig(
        overlap_weight=OVERLAP_WEIGHT if weight is None else weight,
        temperature=TEMPERATURE if temperature is None else temperature,
        block_size=DEFAULT_BLOCK_TOKENS if block_size is None else block_size,
    )


def kv_router_argv(kv: KvRouterConfig | None) -> list[str]:
    """The flags that give ``kv`` back (after ``--router kv``)."""
    if kv is None:
        return []
    return ["--kv-overlap-weight", repr(kv.overlap_weight), "--router-temperature", repr(kv.temperature),
            "--kv-block-size", str(kv.block_size)]  # fmt: skip


def kv_router_json(kv: KvRouterConfig | None) -> dict[str, float | int]:
    """The JSON keys of ``kv`` (``kv_overlap_weight``, ``router_temperature``, ``kv_block_size``; none without)."""
    if kv is None:
        return {}
    return {"kv_overlap_weight": kv.overlap_weight, "router_temperature": kv.temperature,
            "kv_block_size": kv.block_size}  # fmt: skip


def prefix_workload(
    groups: int | None, prefix_len: int | None, zipf: float, *, input_len: int, hit_rate: float, open_loop: bool
) -> PrefixWorkload | None:
    """The workload the flags give (None without ``--prefix-groups``); one line, exit 2, where they do not fit."""
    if groups is None:
        if prefix_len is not None or zipf != 0.0:
            flag = "prefix-len" if prefix_len is not None else "prefix-zipf"
            raise InputError(flag, f"--{flag} describes a --prefix-groups workload: give --prefix-groups")
        return None
    if hit_rate > 0:
        raise InputError("prefix-groups", "--prefix-groups simulates the hit rate that --prefix-hit-rate gives as a "
                         "number: give one of them")  # fmt: skip
    if prefix_len is None:
        raise InputError("prefix-len", "--prefix-groups needs --prefix-len (shared tokens per prompt)")
    if not open_loop:
        raise InputError("prefix-groups", "a shared-prefix workload is simulated at an open-loop rate: give --qps")
    workload = PrefixWorkload(groups=groups, prefix_len=prefix_len, zipf=zipf)
    if prefix_len >= input_len:
        raise InputError("prefix-len", f"must be below --input-len ({input_len}), got {prefix_len}")
    return workload


def prefix_argv(prefix: PrefixWorkload | None) -> list[str]:
    """The flags that give ``prefix`` back (an `estimate serve` line's tail)."""
    if prefix is None:
        return []
    argv = ["--prefix-groups", str(prefix.groups), "--prefix-len", str(prefix.prefix_len)]
    return argv + (["--prefix-zipf", repr(prefix.zipf)] if prefix.zipf else [])


def cached_estimate(
    arch: Any, cluster: Any, cfg: ServeConfig, prefix: PrefixWorkload, replicas: int, router: str,
    efficiency: Efficiency | None,
) -> tuple[ServeEstimate, str]:  # fmt: skip
    """The analytic means at the prompt share the prefix cache could serve at most
    (:func:`fmstack.perfmodel.inference_open_loop.sizing_hit_rate`), for a rate that full prompts cannot take
    (``cfg``'s rate above one replica's capacity priced without the cache), and a note saying so; the simulation,
    sized the same way, gives the hits."""
    from fmstack.perfmodel.inference_open_loop import sizing_hit_rate

    hit = sizing_hit_rate(deployment(arch, cluster, cfg, efficiency), cfg, prefix, replicas, router)
    est = estimate_serve(arch, cluster, replace(cfg, prefix_hit_rate=hit), efficiency=efficiency)
    return est, (
        f"analytic means at {hit:.1%} of prompt tokens from the prefix cache (Che's approximation with all the KV "
        f"pool but one sequence free: the most it could serve); every prompt priced in full exceeds the replica's "
        f"capacity at {cfg.request_rate_per_s:g} req/s"
    )
