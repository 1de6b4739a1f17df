"""`fmstack plan serve` output: the ranked table, the JSON, each row's `estimate serve` command and the
colocated-vs-disaggregated comparison of the best row."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from fmstack.cli.common import console, no_wrap
from fmstack.cli.serve_router import kv_router_argv, kv_router_json, prefix_argv
from fmstack.cli.serve_session import session_argv
from fmstack.cli.serve_spec import spec_argv
from fmstack.perfmodel.inference_disagg import SLO
from fmstack.perfmodel.inference_plan import Candidate, ServePlan
from fmstack.perfmodel.inference_plan_candidate import split_label
from fmstack.perfmodel.inference_plan_session import screened_input_len, session_plan_text
from fmstack.perfmodel.inference_prefix import PrefixWorkload
from fmstack.perfmodel.inference_router import ROUTERS_JOINT
from fmstack.perfmodel.inference_router_kv import KvRouterConfig
from fmstack.perfmodel.inference_session import SessionWorkload


def estimate_argv(
    model: str, c: Candidate, input_len: int, output_len: int, catalog_dir: Path | None, slo: SLO | None = None,
    *, qps: float | None = None, seed: int = 0, extra: Sequence[str] = (),
) -> list[str]:  # fmt: skip
    """The `estimate serve` command line that prices ``c``'s replica at its analytic point: its rate, mean TTFT and
    ITL come out as ``requests_per_s``, ``ttft_s``, ``itl_s`` (the same model, tested). A disaggregated row (with
    ``slo``): ``--disagg`` on the split's nodes, whose ``disaggregation`` prints the pools' mean-field figures
    (``decode_concurrency``, ``decode_itl_s``, ``prefill_s``, ``kv_transfer_s``; tested), and with ``qps``
    ``--qps R --prefill-replicas P --decode-replicas D --seed S``, whose ``disaggregated_simulation`` is the row's
    simulation: the same p50/p90/p99 (tested). A row screened with a shared-prefix workload carries its screened
    ``--prefix-hit-rate``, a speculative row its ``--speculative`` flags (:func:`spec_argv`). ``extra``: arguments
    appended as they are (the plan's ``--calibration``)."""
    argv = ["fmstack", "estimate", "serve", "--model", model, "--instance", c.instance]
    split = c.mode == "disaggregated" and slo is not None
    if split or c.nodes_per_replica > 1:
        argv += ["--nodes", str(c.nodes if split else c.nodes_per_replica)]
    argv += ["--tp", str(c.tp)]
    if c.pp > 1:
        argv += ["--pp", str(c.pp)]
    if c.ep > 1:
        argv += ["--ep", str(c.ep)]
    if c.attention_dp:
        argv.append("--attention-dp")
    argv += ["--precision", c.precision, "--input-len", str(input_len), "--output-len", str(output_len),
             "--concurrency", str(c.concurrency), "--max-num-tokens", str(c.max_num_tokens), *spec_argv(c.speculative),
             "--no-simulate"]  # fmt: skip
    if c.prefix_hit_rate > 0:  # the share of prompt tokens the screening took from the prefix cache
        argv[argv.index("--max-num-tokens") : argv.index("--max-num-tokens")] = [
            "--prefix-hit-rate", repr(c.prefix_hit_rate)]  # fmt: skip
    if split and slo is not None:
        at = argv.index("--concurrency")
        argv[at : at + 2] = [] if qps is None else ["--qps", repr(float(qps))]
        argv += ["--disagg", "--ttft-slo", f"{slo.ttft_s:g}", "--itl-slo", f"{slo.itl_s:g}"]
        if qps is not None:
            argv += ["--prefill-replicas", str(c.prefill_replicas), "--decode-replicas", str(c.decode_replicas),
                     "--seed", str(seed)]  # fmt: skip
            if c.heterogeneous:  # the decode pool's layout (tp / pp / ep above are the prefill pool's)
                argv += [
                    "--decode-tp",
                    str(c.decode_tp),
                    "--decode-pp",
                    str(c.decode_pp),
                    "--decode-ep",
                    str(c.decode_ep),
                ]
                if c.decode_attention_dp != c.attention_dp:  # --decode-attention-dp defaults to --attention-dp
                    argv.append("--decode-attention-dp" if c.decode_attention_dp else "--no-decode-attention-dp")
    if catalog_dir is not None:
        argv += ["--catalog", str(catalog_dir)]
    return argv + list(extra)


def p99_argv(
    model: str, c: Candidate, input_len: int, output_len: int, catalog_dir: Path | None, slo: SLO, qps: float,
    *, seed: int = 0, extra: Sequence[str] = (), router: str = "round-robin", prefix: PrefixWorkload | None = None,
    kv_router: KvRouterConfig | None = None, sessions: SessionWorkload | None = None,
) -> list[str]:  # fmt: skip
    """The `estimate serve` command line whose simulation is ``c``'s p99 check: a split's is its
    :func:`estimate_argv` (``--qps R --prefill-replicas P --decode-replicas D --seed S``); a colocated row's is one
    of its replicas behind ``router`` at ``qps`` requests/s in all (``--qps qps --replicas N --router R``; one
    replica: ``--qps qps``), with the same seed and token budget and the shared-prefix workload ``prefix``
    (``--prefix-groups G --prefix-len L [--prefix-zipf S]``) and the KV router's settings ``kv_router``: the run
    `plan serve` simulated, the same p50/p90/p99; a multi-turn workload ``sessions`` adds ``--turns N
    --think-time-s S`` (``input_len``: a turn's new tokens), a split's with ``--router R`` (its prefill router) in
    place of ``--disagg`` and the screened ``--prefix-hit-rate``."""
    argv = estimate_argv(model, c, input_len, output_len, catalog_dir, slo, qps=qps, seed=seed, extra=extra)
    if c.mode == "disaggregated" and prefix is None and sessions is None:
        return argv
    if c.mode == "disaggregated":  # the prefill caches simulated; --disagg's mean field prices whole prompts
        if "--prefix-hit-rate" in argv:
            at = argv.index("--prefix-hit-rate")
            del argv[at : at + 2]
        at = argv.index("--disagg")
        del argv[at : at + 5]  # --disagg --ttft-slo T --itl-slo I
        at = argv.index("--max-num-tokens")
        argv[at:at] = [*([] if prefix is None else prefix_argv(prefix)),
                       *([] if sessions is None else session_argv(sessions)), "--router", router,
                       *kv_router_argv(kv_router)]  # fmt: skip
        argv.remove("--no-simulate")
        return argv
    at = argv.index("--concurrency")
    argv[at : at + 2] = ["--qps", repr(float(qps))]
    if c.replicas > 1:
        argv[at + 2 : at + 2] = ["--replicas", str(c.replicas), "--router", router, *kv_router_argv(kv_router)]
    if "--prefix-hit-rate" in argv:  # the analytic point's scalar; the simulation draws the hits itself
        at = argv.index("--prefix-hit-rate")
        del argv[at : at + 2]
    if prefix is not None:
        at = argv.index("--max-num-tokens")
        argv[at:at] = prefix_argv(prefix)
    if sessions is not None:
        at = argv.index("--max-num-tokens")
        argv[at:at] = session_argv(sessions)
    argv.remove("--no-simulate")
    tail = argv.index("--catalog") if "--catalog" in argv else len(argv) - len(extra)
    argv[tail:tail] = ["--seed", str(seed)]
    return argv


def plan_serve_json(
    plan: ServePlan, model: str, top: int, catalog_dir: Path | None, seed: int = 0, extra: Sequence[str] = ()
) -> dict[str, Any]:
    """``best`` and ``candidates`` (each with ``attention_dp``, its ``estimate_command`` and ``p99_command``: the
    `estimate serve` line whose simulation is the row's p99 check, :func:`p99_argv`), ``slo``, ``qps``, ``router``
    (how the colocated rows' replicas were fed in their check),
    ``estimate_command`` (the best's), ``disaggregation`` (the comparison's fields or null) and
    ``disaggregation_note``. Each row has ``mode`` ("colocated" | "disaggregated"), ``prefill_replicas``,
    ``decode_replicas`` (0 when colocated; ``replicas`` is their sum), ``kv_transfer_s`` and the decode pool's
    layout ``decode_tp``, ``decode_pp``, ``decode_ep`` (0 when colocated; ``tp`` / ``pp`` / ``ep`` /
    ``nodes_per_replica`` are a split's prefill pool's, the decode pool's differ in a heterogeneous split),
    ``speculative`` (the row's method, null when none), ``spec_tokens``, ``spec_acceptance``; top level
    ``speculative`` (the method asked, "auto", or null) and ``speculative_note``; the multi-turn workload's
    ``turns`` (1: independent requests) and ``think_time_s``, and ``screened_input_len``, the prompt the rows were
    screened at (a session's mean turn: each row's ``estimate_command`` prices it, its ``prefix_hit_rate`` the
    history's share; ``input_len`` with one turn)."""

    screened = screened_input_len(plan.sessions, plan.input_len, plan.output_len)  # a session row's mean turn

    def row(c: Candidate) -> dict[str, Any]:
        argv = estimate_argv(model, c, screened, plan.output_len, catalog_dir, plan.slo, qps=plan.qps, seed=seed,
                             extra=extra)  # fmt: skip
        cmd = shlex.join(argv)
        p99 = p99_argv(model, c, plan.input_len, plan.output_len, catalog_dir, plan.slo, plan.qps, seed=seed,
                       extra=extra, router=plan.router, prefix=plan.prefix, kv_router=plan.kv_router,
                       sessions=plan.sessions)  # fmt: skip
        sp = c.speculative
        spec = {"speculative": None if sp is None else sp.method, "spec_tokens": None if sp is None else sp.tokens,
                "spec_acceptance": None if sp is None else list(sp.acceptance)}  # fmt: skip
        return asdict(c) | spec | {"estimate_command": cmd, "p99_command": shlex.join(p99)}

    best = row(plan.best)
    return {
        "best": best, "candidates": [row(c) for c in plan.candidates[:top]], "slo": asdict(plan.slo), "qps": plan.qps,
        "router": plan.router, **kv_router_json(plan.kv_router),
        "prefix": None if plan.prefix is None else asdict(plan.prefix),
        "estimate_command": best["estimate_command"],
        "disaggregation": asdict(plan.disaggregation) if plan.disaggregation is not None else None,
        "disaggregation_note": plan.disaggregation_note,
        "speculative": "auto" if plan.speculative_auto else (None if plan.speculative is None else plan.speculative.method),
        "speculative_note": plan.speculative_note,
        "turns": 1 if plan.sessions is None else plan.sessions.turns,
        "think_time_s": 0.0 if plan.sessions is None else plan.sessions.think_time_s,
        "screened_input_len": screened,
    }  # fmt: skip


def render_plan_serve(
    plan: ServePlan, model: str, top: int, catalog_dir: Path | None, seed: int = 0, extra: Sequence[str] = ()
) -> None:
    out = console()
    b, slo = plan.best, plan.slo
    layout = f"tp {b.tp}{f' pp {b.pp}' if b.pp > 1 else ''}{f' ep {b.ep}' if b.ep > 1 else ''}"
    layout += " attention-dp" if b.attention_dp else ""
    if b.mode == "disaggregated":
        dec = f" of tp {b.decode_tp}{f' pp {b.decode_pp}' if b.decode_pp > 1 else ''}" if b.heterogeneous else ""
        layout = f"{layout} ({b.prefill_replicas} prefill + {b.decode_replicas} decode{dec})"
    out.print(
        f"[bold]{plan.model}[/] at {plan.qps:g} req/s, {plan.input_len}/{plan.output_len} tokens, TTFT p99 <= "
        f"{slo.ttft_s:g} s, ITL p99 <= {slo.itl_s:g} s: [bold]{b.replicas} replica(s) of {layout} {b.precision}[/]"
        f"{f' ({b.nodes_per_replica} nodes per replica)' if b.nodes_per_replica > 1 else ''} on "
        f"{b.nodes} x {b.instance}, ${b.cost_per_hour_usd:,.2f}/h"
        + (f" with {b.speculative.method} speculative decoding" if b.speculative is not None else "")
    )
    if plan.speculative_note:
        out.print(plan.speculative_note, markup=False, soft_wrap=True)
    if plan.prefix is not None:
        out.print(prefix_text(plan), markup=False, soft_wrap=True)
    if plan.sessions is not None:
        out.print(session_plan_text(plan.sessions, b, plan.input_len, plan.output_len, plan.router,
                                    plan.prefix is not None), markup=False, soft_wrap=True)  # fmt: skip
    shown = plan.candidates[:top]
    adp_col = any(c.ep > 1 for c in plan.candidates)  # an MoE model: attention DP was searched
    spec_col = plan.speculative is not None
    cols = ["instance", "prec", "mode", "tp", "pp", "ep", *(["attn\nDP"] if adp_col else []), "chunk",
            *(["spec"] if spec_col else []),
            "nodes per\nreplica", "replicas", "nodes", "$/h", "req/s per\nreplica", "TTFT p99", "ITL p99", "SLO"]  # fmt: skip
    rows = []
    for c in shown:
        sim = c.sim or {}
        rows.append([
            c.instance, c.precision,
            split_label(c) if c.mode == "disaggregated" else "coloc", str(c.tp), str(c.pp), str(c.ep), *(["yes" if c.attention_dp else "-"] if adp_col
            else []), str(c.max_num_tokens), *([c.speculative.method if c.speculative else "none"] if spec_col else []),
            str(c.nodes_per_replica), str(c.replicas), str(c.nodes),
            f"{c.cost_per_hour_usd:,.2f}", f"{c.rate_per_replica_rps:.2f}",
            f"{sim['ttft_p99_s']:.3f}" if sim else "-", f"{sim['itl_p99_s']:.4f}" if sim and plan.output_len > 1 else "-",  # 1 token: no gap
            {True: "meets", False: "misses*" if c.sim_note else "misses", None: "not simulated"}[c.meets_slo],
        ])  # fmt: skip
    # what every shown row shares goes to the title once (the table fits 140 columns without wrapped headers)
    said = {"instance": "{}", "prec": "{}", "pp": "pp {}", "nodes per\nreplica": "{} node(s) per replica",
            "mode": "{}", "spec": "speculative {}"}  # fmt: skip
    shared = [i for i, h in enumerate(cols) if h in said and len(rows) > 1 and len({r[i] for r in rows}) == 1]
    title = "candidates (cheapest verified first)"
    if shared:
        title += "; every row: " + ", ".join(said[cols[i]].format(rows[0][i]) for i in shared)
    keep = [i for i in range(len(cols)) if i not in shared]
    table = Table(*(cols[i] for i in keep), title=title, title_justify="left")
    no_wrap(table, *(h for h in ("instance", "SLO") if h in [cols[i] for i in keep]))  # "p6-b200.48x…" named none
    for column in table.columns:  # a split's label folds onto more lines rather than lose its decode layout to "…"
        if column.header == "mode":
            column.overflow = "fold"
    for r in rows:
        table.add_row(*(r[i] for i in keep))
    out.print(table)
    for n, c in enumerate(shown, 1):
        if c.sim_note:
            out.print(f"* row {n}: {c.sim_note}", markup=False, soft_wrap=True)
    what = "the best split's simulation" if b.mode == "disaggregated" else "the best replica's analytic point"
    out.print(f"reproduce {what} with:", markup=False)
    argv = estimate_argv(model, b, screened_input_len(plan.sessions, plan.input_len, plan.output_len), plan.output_len,
                         catalog_dir, slo, qps=plan.qps, seed=seed, extra=extra)  # fmt: skip
    if b.mode == "disaggregated" and (plan.prefix is not None or plan.sessions is not None):  # caches simulated
        argv = p99_argv(model, b, plan.input_len, plan.output_len, catalog_dir, slo, plan.qps, seed=seed, extra=extra,
                        router=plan.router, prefix=plan.prefix, kv_router=plan.kv_router,
                        sessions=plan.sessions)  # fmt: skip
    out.print(shlex.join(argv), markup=False, soft_wrap=True)
    if b.mode != "disaggregated" and b.sim is not None:
        one = (f"one of {b.replicas} replicas behind a {plan.router} router, {plan.qps / b.replicas:.4g} req/s each"
               if b.replicas > 1 else f"one replica at {plan.qps:.4g} req/s")  # fmt: skip
        if b.replicas > 1 and (plan.router in ROUTERS_JOINT or plan.prefix is not None or plan.sessions is not None):
            one = f"its {b.replicas} replicas together behind a {plan.router} router at {plan.qps:.4g} req/s"
        out.print(f"and its simulated p99 ({one}) with:", markup=False)
        p99 = p99_argv(model, b, plan.input_len, plan.output_len, catalog_dir, slo, plan.qps, seed=seed, extra=extra,
                       router=plan.router, prefix=plan.prefix, kv_router=plan.kv_router,
                       sessions=plan.sessions)  # fmt: skip
        out.print(shlex.join(p99), markup=False, soft_wrap=True)
    out.print(f"disaggregated prefill/decode: {plan.disaggregation_note}", markup=False, soft_wrap=True)


def prefix_text(plan: ServePlan) -> str:
    """The shared-prefix workload the plan was made for, and the best row's screened hit rate."""
    p, b = plan.prefix, plan.best
    assert p is not None
    skew = f", Zipf {p.zipf:g} popularity" if p.zipf else ", equally popular"
    screened = (
        "a session's first turn is keyed by its group, its later turns by their history (the screened hits: below)"
        if plan.sessions is not None
        else f"the best row was screened at {b.prefix_request_hit_rate:.0%} of requests hitting its replicas' caches "
        f"({b.prefix_hit_rate:.1%} of prompt tokens; Che's approximation, optimistic on purpose: the simulation decides)"
        if b.prefix_hit_rate > 0 or (b.mode != "disaggregated" and not b.attention_dp)
        else "the best row runs no prefix cache (attention DP: priced and simulated in full)"
    )
    return (f"planned for a shared-prefix workload: {p.groups} prefix group(s) of {p.prefix_len} tokens{skew}; "
            f"{screened}")  # fmt: skip


@contextmanager
def simulation_status(quiet: bool) -> Iterator[Callable[[Candidate], None] | None]:
    """A status line on stderr naming the deployment being simulated (each p99 check takes a fraction of a second to
    seconds; a search may run dozens), when stderr is a terminal and not for --json: stdout stays the result."""
    if quiet or not sys.stderr.isatty():
        yield None
        return
    count = 0
    with Console(stderr=True).status("plan serve: analytic search") as status:

        def show(c: Candidate) -> None:
            nonlocal count
            count += 1
            mode = split_label(c) if c.mode == "disaggregated" else f"{c.replicas} x"
            status.update(f"plan serve: simulating candidate {count}: {c.instance} {mode} tp {c.tp} pp {c.pp} "
                          f"{c.precision} (${c.cost_per_hour_usd:,.2f}/h)")  # fmt: skip

        yield show
