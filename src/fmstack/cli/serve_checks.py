"""`fmstack estimate serve`'s checks of flags that go together: a split's replicas and decode layout, the flags a
lone colocated replica refuses rather than ignores, and ``--replicas`` (serve_cmd.py runs the command)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import click

from fmstack.errors import InputError
from fmstack.perfmodel.inference import ServeConfig, check_rate, deployment, validate_serve


def decode_layout(
    cfg: ServeConfig, arch: Any, cluster: Any, layout: tuple[int | None, int | None, int | None, bool | None],
    prefill: int | None,
) -> ServeConfig | None:  # fmt: skip
    """The decode pool's configuration when --decode-tp / --decode-pp / --decode-ep / --[no-]decode-attention-dp
    (``layout``) give another layout than the prefill pool's (None: the same), checked as a replica's (heads
    divisible, the stages, the experts, attention DP on an MoE model with ep = tp)."""
    tp, pp, ep, adp = layout
    if tp is None and pp is None and ep is None and adp is None:
        return None
    if prefill is None:
        raise InputError("decode-tp", "--decode-tp / --decode-pp / --decode-ep set a split's decode pool (as "
                         "--[no-]decode-attention-dp does): give --prefill-replicas and --decode-replicas")  # fmt: skip
    dc = replace(cfg, tp=cfg.tp if tp is None else tp, pp=cfg.pp if pp is None else pp,
                 ep=cfg.ep if ep is None else ep, attention_dp=cfg.attention_dp if adp is None else adp)  # fmt: skip
    try:
        validate_serve(dc, arch, cluster)
        deployment(arch, cluster, dc)
    except InputError as exc:
        field = {"tp": "decode-tp", "pp": "decode-pp", "ep": "decode-ep", "attention-dp": "decode-attention-dp"}.get(
            exc.field, exc.field)  # fmt: skip
        raise InputError(field, f"decode pool: {exc.message}") from None
    same = (dc.tp, dc.pp, dc.ep, dc.attention_dp) == (cfg.tp, cfg.pp, cfg.ep, cfg.attention_dp)
    return None if same else dc


def check_colocated_flags(cfg: ServeConfig, arch: Any, cluster: Any, nodes: int, disagg: bool) -> None:
    """One colocated replica is estimated: nodes beyond the replica's, or SLO targets, only serve ``--disagg`` (or a
    split); refuse them rather than ignore them."""
    validate_serve(cfg, arch, cluster)  # the layout's own errors first
    if disagg:
        return
    need = -(-cfg.tp * cfg.pp // cluster.instance.num_gpus)
    if nodes > need:
        raise InputError(
            "nodes", f"--nodes {nodes}: estimate serve predicts one replica, and tp {cfg.tp} x pp {cfg.pp} uses {need} "
            f"node(s); more nodes serve --disagg or a --prefill-replicas / --decode-replicas split (several colocated "
            "replicas: fmstack plan serve)",
        )  # fmt: skip
    ctx = click.get_current_context()
    for name in ("ttft_slo", "itl_slo"):
        if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE:
            flag = name.replace("_", "-")
            raise InputError(flag, f"--{flag} is the target of --disagg's comparison; add --disagg (fmstack plan "
                             "serve takes --ttft-p99 / --itl-p99)")  # fmt: skip


def check_split(
    prefill: int | None, decode: int | None, cfg: ServeConfig, cluster: Any, nodes: int,
    decode_cfg: ServeConfig | None = None,
) -> tuple[int, int] | None:  # fmt: skip
    """(P, D) when a split is asked for, after checking it fits ``--nodes`` (``P x tp x pp + D x decode tp x
    decode pp`` GPUs); None otherwise."""
    if prefill is None and decode is None:
        return None
    if prefill is None or decode is None:
        raise InputError("prefill-replicas", "give both --prefill-replicas and --decode-replicas")
    if prefill < 1 or decode < 1:
        raise InputError(
            "prefill-replicas", f"need at least one prefill and one decode replica, got {prefill}:{decode}"
        )
    if cfg.request_rate_per_s is None:
        raise InputError("qps", "a split is simulated at an open-loop rate: give --qps (the whole deployment's)")
    check_rate(cfg.request_rate_per_s)
    if cfg.concurrency is not None:
        raise InputError(
            "concurrency", "a split is simulated at --qps (the whole deployment's rate); drop --concurrency"
        )
    per = cfg.tp * cfg.pp
    dc = cfg if decode_cfg is None else decode_cfg
    need = prefill * per + decode * dc.tp * dc.pp
    if need > cluster.num_gpus:
        layout = (f"tp {cfg.tp} x pp {cfg.pp}" if decode_cfg is None else
                  f"tp {cfg.tp} x pp {cfg.pp} (prefill) and tp {dc.tp} x pp {dc.pp} (decode)")  # fmt: skip
        raise InputError(
            "nodes", f"{prefill} prefill + {decode} decode replicas of {layout} need "
            f"{need} GPUs; {nodes} x {cluster.instance.name} has {cluster.num_gpus}",
        )  # fmt: skip
    return prefill, decode


def check_replicas(replicas: int, cfg: ServeConfig, split: tuple[int, int] | None, disagg: bool) -> None:
    """``--replicas N``: at least 1; above 1 only with ``--qps`` (the deployment's rate, spread over N replicas) and
    without a split (whose colocated rows are one of its P + D) or ``--disagg`` (the nodes' own comparison)."""
    if replicas < 1:
        raise InputError("replicas", f"must be >= 1, got {replicas}")
    if replicas == 1:
        return
    if cfg.request_rate_per_s is None:
        raise InputError("replicas", "--replicas N spreads an open-loop rate over N replicas: give --qps (the "
                         "deployment's total rate), not --concurrency")  # fmt: skip
    if split is not None or disagg:
        raise InputError("replicas", "--replicas is for colocated replicas; a --prefill-replicas / "
                         "--decode-replicas split compares with P + D of them, --disagg with the nodes': drop it")  # fmt: skip
