"""`plan_serve`: the cheapest deployment (instance, precision, TP / PP / EP, nodes per replica, replicas) that serves
a request rate at an SLO.

Search: every priced instance x precision x layout (x EP = 1 or TP for MoE, and for MoE with EP = TP > 1 attention data
parallelism off and on: TensorRT-LLM ``enable_attention_dp``, SGLang ``--enable-dp-attention``) that fits is evaluated on the vectorised
analytic curve (:func:`fmstack.perfmodel.inference.serve_curve`, every concurrency at once); the highest per-replica
request rate whose mean TTFT and ITL meet the targets gives ``replicas = ceil(qps / rate)`` and whole nodes give the
cost. Layouts (:func:`layouts`): within one node TP 1, 2, 4, ...; a replica of ``n = 2, 4, ...`` whole nodes runs TP
across the nodes (``tp = n x gpus_per_node``, vLLM / SGLang TP 16 over two H100 nodes) or TP in each node and PP across
them (``pp = n``, vLLM's TP 8 x PP 2), the same deployments ``fmstack estimate serve --nodes n --tp .. --pp ..`` prices.
Node counts per replica are searched in doublings from 1 up to the first count at which some layout meets the SLO on
the analytic curve, and one doubling past it (a larger replica can hold more KV per GPU), at most
``max_nodes_per_replica``.
Means are optimistic for p99 targets: the filter also asks that an iteration carrying a whole prompt chunk meets
the ITL target and adds it to the TTFT (a prompt may queue behind one). The cheapest candidates are then checked with the batching simulation
(:mod:`fmstack.perfmodel.inference_sim`, one replica of ``replicas`` behind a router at ``qps``: every
``replicas``-th arrival of a Poisson stream behind round-robin, Poisson at ``qps / replicas`` behind a random
router; a split's prefill pool is one shared queue): a candidate whose
simulated p99 misses the SLO gets more replicas until it meets it (or is dropped). A multi-turn workload (``--turns``)
is screened as its mean turn and simulated as sessions (:mod:`fmstack.perfmodel.inference_plan_session`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from fmstack.catalog.loader import Catalog
from fmstack.catalog.schema import ModelArch
from fmstack.catalog.topology import MAX_CLUSTER_GPUS, Cluster, build_cluster, resolve_instance
from fmstack.errors import InputError
from fmstack.perfmodel.efficiency import EfficiencyFor
from fmstack.perfmodel.inference import (
    ServeConfig,
    check_rate,
    deployment_for,
    max_concurrency,
    serve_curve,
)
from fmstack.perfmodel.inference_disagg import SLO, DisaggComparison, compare_disaggregation
from fmstack.perfmodel.inference_kv import check_tp
from fmstack.perfmodel.inference_plan_analytic import analytic as _analytic
from fmstack.perfmodel.inference_plan_candidate import Candidate as Candidate  # re-exported
from fmstack.perfmodel.inference_plan_candidate import ClusterOf, config_of, layout_text
from fmstack.perfmodel.inference_plan_disagg import DecodePools, split_note
from fmstack.perfmodel.inference_plan_disagg_session import screen_split, session_splits_note
from fmstack.perfmodel.inference_plan_session import check_plan_sessions, screened_input_len
from fmstack.perfmodel.inference_plan_spec import spec_note, spec_variants
from fmstack.perfmodel.inference_plan_verify import verify_cheapest
from fmstack.perfmodel.inference_plan_why import PRECISIONS, Tried, nothing_found
from fmstack.perfmodel.inference_prefix import PrefixWorkload
from fmstack.perfmodel.inference_router_kv import KvRouterConfig
from fmstack.perfmodel.inference_session import SessionWorkload
from fmstack.perfmodel.inference_sim_io import ROUTERS
from fmstack.perfmodel.inference_speculative import SpecDecode

F = NDArray[np.float64]

CHUNK_CHOICES = (2048, 512)
"""Prompt-token budgets per iteration the plan tries (vLLM's ``max_num_batched_tokens`` with chunked prefill): a
smaller chunk keeps a prompt from dominating p99 ITL at the price of more iterations to the first token."""
MAX_NODES_PER_REPLICA = 4
"""Default bound on the nodes of one replica (4 x 8 H100 = 32 GPUs hold DeepSeek-V3 in bf16, 1.34 TB)."""
DOUBLINGS_PAST_FIRST = 0
"""Node counts searched past the smallest one at which a layout meets the SLO on the analytic curve."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ServePlan:
    """The cheapest verified deployment and the runners-up."""

    model: str
    qps: float
    input_len: int
    output_len: int
    slo: SLO
    best: Candidate
    candidates: list[Candidate]
    curve: dict[str, list[float]]
    """The best candidate's per-replica curve: concurrency, requests_per_s, ttft_s, itl_s."""
    disaggregation: DisaggComparison | None = None
    """The best candidate's nodes colocated vs split into prefill and decode pools
    (:func:`fmstack.perfmodel.inference_disagg.compare_disaggregation`; None where fewer than 2 replicas fit)."""
    disaggregation_note: str = ""
    """Why disaggregation wins or loses on the best candidate's nodes, or why it was not compared."""
    router: str = "round-robin"
    """How the colocated candidates' replicas were fed in their p99 check (:data:`ROUTERS`: each simulated as one
    of its ``replicas`` behind this router); a split's prefill pool is one shared queue whatever the router."""
    prefix: PrefixWorkload | None = None
    """The shared-prefix workload the colocated candidates' p99 checks simulated (their replicas together; the
    analytic search prices every prompt in full)."""
    kv_router: KvRouterConfig | None = None
    """``router="kv"``: the KV router's settings the p99 checks used (None otherwise)."""
    speculative: SpecDecode | None = None
    """The speculative decoding asked (``speculative_auto``: compared per layout; each row's own is
    ``Candidate.speculative``)."""
    speculative_auto: bool = False
    speculative_note: str = ""
    """What the plan did with it (:func:`fmstack.perfmodel.inference_plan_spec.spec_note`; empty without it)."""
    sessions: SessionWorkload | None = None
    """A multi-turn workload (``--turns N``): screened as its mean turn, its p99 checks simulate the sessions
    (:mod:`fmstack.perfmodel.inference_plan_session`); None: independent requests."""


def searched_instances(catalog: Catalog, instances: tuple[str, ...] | None) -> list[str]:
    """The instances :func:`plan_serve` searches: ``instances`` (InputError for one without a price: it cannot be
    costed), else every instance of the catalog with a price."""
    out: list[str] = []
    for name in instances or catalog.names("instance"):
        if resolve_instance(catalog, name).price_per_hour_usd is None:
            if instances:
                raise InputError(
                    "instance",
                    f"{name} has no price in the catalog and plan serve ranks deployments by cost: redefine "
                    f"{name} with price_per_hour_usd in a --catalog DIR file (README, Catalog), or size one "
                    "replica with estimate serve",
                )
            continue
        out.append(name)
    return out


def _fits_tp(model: ModelArch, tp: int, gpd: int) -> bool:
    try:
        check_tp(model, tp, gpd)
    except InputError:
        return False
    return True


def _precisions(gpu_has: list[str], wanted: tuple[str, ...] | None) -> list[str]:
    return [p for p in (wanted or ("bf16", "fp8")) if p in gpu_has]


def layouts(model: ModelArch, nodes: int, gpus_per_node: int, gpus_per_domain: int) -> list[tuple[int, int, int]]:
    """(tp, pp, ep) of one replica on ``nodes`` nodes that :func:`fmstack.perfmodel.inference.validate_serve` and
    the deployment accept. One node: TP 1, 2, 4, ... dividing the node. More: the replica takes every GPU of its
    nodes, TP across them (``tp = nodes x gpus_per_node``) or TP over a node and PP across them (``pp = nodes``).
    MoE adds EP = TP (experts spread over the TP group, across nodes when TP spans them) where the experts divide."""
    if nodes == 1:
        tp_pp = [(t, 1) for t in (1, 2, 4, 8, 16, 32, 64, 72) if t <= gpus_per_node and gpus_per_node % t == 0]
    else:
        tp_pp = [(nodes * gpus_per_node, 1)]
        if nodes <= model.num_layers:
            tp_pp.append((gpus_per_node, nodes))
    out: list[tuple[int, int, int]] = []
    for tp, pp in tp_pp:
        if not _fits_tp(model, tp, gpus_per_domain):
            continue
        out.append((tp, pp, 1))
        if model.moe is not None and tp > 1 and model.moe.num_experts % tp == 0:
            out.append((tp, pp, tp))
    return out


MAX_PLAN_GPUS = MAX_CLUSTER_GPUS
"""The largest deployment one serving plan sizes (1,048,576 GPUs, the most one cluster may have in fmstack; the
largest clusters hold a few 1e5): past it the p99 checks, which place every replica of a split on its nodes, take
minutes and gigabytes for a fleet no one runs as one deployment (``--qps 1e9`` of Llama 3.1 8B: 43.6 million
one-GPU replicas)."""


def plan_serve(
    catalog: Catalog,
    model: ModelArch,
    *,
    qps: float,
    input_len: int,
    output_len: int,
    slo: SLO,
    instances: tuple[str, ...] | None = None,
    precisions: tuple[str, ...] | None = None,
    seed: int = 0,
    max_nodes_per_replica: int = MAX_NODES_PER_REPLICA,
    search_attention_dp: bool = True,
    search_disagg: bool = True,
    search_heterogeneous: bool = True,
    on_simulate: Callable[[Candidate], None] | None = None,
    efficiency_for: EfficiencyFor | None = None,
    router: str = "round-robin",
    prefix: PrefixWorkload | None = None,
    kv_router: KvRouterConfig | None = None,
    speculative: SpecDecode | None = None,
    speculative_auto: bool = False,
    sessions: SessionWorkload | None = None,
) -> ServePlan:
    """The cheapest deployment of ``model`` serving ``qps`` requests/s within ``slo`` (p99 checked by simulation).
    ``search_attention_dp=False`` leaves attention data parallelism out of the search (the search before it);
    ``search_disagg=False`` the disaggregated prefill / decode splits (:mod:`fmstack.perfmodel.inference_plan_disagg`),
    ``search_heterogeneous=False`` only the splits whose pools take two different layouts.
    ``on_simulate`` is called with each deployment before its simulation (progress for the CLI); ``efficiency_for``
    gives each cluster's efficiency (a calibration profile's; None: the default curves) to every deployment the
    search prices, analytic and simulated. ``router`` (:data:`ROUTERS`) spreads ``qps`` over a colocated
    candidate's replicas in its p99 check (:func:`fmstack.perfmodel.inference_plan_verify.verify_cheapest`);
    ``least-loaded`` / ``cache-aware`` / ``kv`` (``kv_router``: its settings, None: Dynamo's defaults), or a
    shared-prefix workload ``prefix``, check them simulated together. ``speculative``: every candidate runs it (a
    split's decode pool speculates, :mod:`fmstack.perfmodel.inference_disagg_spec`); with ``speculative_auto`` each
    layout and split is screened with and without it, both ranked (the simulation's p99 decides;
    :mod:`fmstack.perfmodel.inference_plan_spec`). ``sessions``: a multi-turn workload (``router`` may then be
    ``session``; :mod:`fmstack.perfmodel.inference_plan_session`), splits screened at its mean turn and simulated
    with it, attention-DP pools left out (:func:`fmstack.perfmodel.inference_plan_disagg_session.screen_split`)."""
    check_rate(qps)
    check_plan_sessions(sessions, router)
    variants = spec_variants(speculative, speculative_auto)
    search_heterogeneous = search_heterogeneous and search_disagg
    if router not in ROUTERS and not (router == "session" and sessions is not None):
        raise InputError("router", f"must be one of {', '.join(ROUTERS)}, got {router!r}")
    if seed < 0:
        raise InputError("seed", f"must be >= 0, got {seed}")
    if router == "kv":
        kv_router = kv_router or KvRouterConfig()
    elif kv_router is not None:
        raise InputError("router", f"KV router settings are given but the router is {router!r}: use router 'kv'")
    if prefix is not None and prefix.prefix_len >= input_len:
        raise InputError("prefix-len", f"must be below --input-len ({input_len}), got {prefix.prefix_len}")
    if max_nodes_per_replica < 1:
        raise InputError("max-nodes-per-replica", f"must be >= 1, got {max_nodes_per_replica}")
    names = searched_instances(catalog, instances)
    clusters: dict[tuple[str, int], Cluster] = {}

    def cluster_of(name: str, nodes: int) -> Cluster:
        if (name, nodes) not in clusters:
            clusters[name, nodes] = build_cluster(catalog, name, nodes, part_of_domain=True)
        return clusters[name, nodes]

    found: list[Candidate] = []
    tried = Tried()
    decode_pools = DecodePools()  # each decode layout's curve once, shared by the splits of every prefill layout
    for name in names:
        cluster = cluster_of(name, 1)
        inst = cluster.instance
        has = [p for p in PRECISIONS if getattr(cluster.gpu, f"{p}_dense_tflops", None) is not None]
        usable = _precisions(has, precisions)
        if not usable:
            tried.no_precision.append((name, cluster.gpu.name, has))
        for precision in usable:
            first: int | None = None  # the fewest nodes per replica at which a layout meets the SLO
            split_layouts: list[tuple[ServeConfig, int]] = []  # for heterogeneous pools
            nodes = 1
            while nodes <= max_nodes_per_replica and (first is None or nodes <= first * 2**DOUBLINGS_PAST_FIRST):
                if nodes > 1 and _one_node_holds(cluster_of, names, name, nodes):
                    break
                c = cluster_of(name, nodes)
                shapes = layouts(model, nodes, inst.num_gpus, c.gpus_per_domain)
                for tp, pp, ep, adp in _with_attention_dp(model, shapes, search_attention_dp):
                    cfg = ServeConfig(tp=tp, pp=pp, ep=ep, precision=precision, input_len=input_len,
                                      output_len=output_len, attention_dp=adp)  # fmt: skip
                    if not tried.fits(cfg, c, model, name, nodes, efficiency_for):
                        continue  # no chunk and no split of this layout holds one sequence
                    for chunk in CHUNK_CHOICES:
                        cfg = replace(cfg, max_num_tokens=chunk)
                        # attention DP: each rank its own prefix cache (inference_plan_analytic._best_point)
                        for spec in variants:  # auto: with and without, both ranked (the p99 check decides)
                            option = _analytic(replace(cfg, speculative=spec), c, model, qps, slo, name, nodes,
                                               efficiency_for, router=router, prefix=prefix,
                                               sessions=sessions)  # fmt: skip
                            if option is not None:
                                found.append(option)
                                first = nodes if first is None else first
                    for spec in variants if search_disagg else ():  # prefill: the largest prompt budget
                        split_layouts.append((replace(cfg, max_num_tokens=max(CHUNK_CHOICES), speculative=spec), nodes))
                        split = screen_split(split_layouts[-1][0], cluster_of, model, qps, slo, name, nodes,
                                             efficiency_for=efficiency_for, decode_pools=decode_pools, prefix=prefix,
                                             router=router, sessions=sessions)  # fmt: skip
                        if split is not None:  # the node search is bounded by the colocated rows alone
                            found.append(split)
                nodes *= 2
            if search_heterogeneous:
                found += _heterogeneous(split_layouts, cluster_of, model, qps, slo, name, efficiency_for,
                                        decode_pools, prefix, router, sessions)  # fmt: skip
    if not found:
        raise nothing_found(tried, cluster_of, model, layouts, precisions, max_nodes_per_replica, slo, input_len,
                            output_len, efficiency_for)  # fmt: skip
    fewest = min(c.num_gpus for c in found)
    if fewest > MAX_PLAN_GPUS:  # before the p99 checks, which place and simulate every replica of a split
        raise InputError("qps", f"{qps:g} requests/s needs at least {fewest:,} GPUs (the fewest of any deployment "
                         f"screened), more than the {MAX_PLAN_GPUS:,} one plan sizes: plan a share of the traffic "
                         "(--qps divided by the number of deployments)")  # fmt: skip
    ranked = verify_cheapest(cluster_of, model, found, qps, input_len, output_len, slo, seed, on_simulate,
                             efficiency_for=efficiency_for, router=router, prefix=prefix,
                             kv_router=kv_router, sessions=sessions)  # fmt: skip
    best = ranked[0]
    if not best.meets_slo:
        raise InputError(
            "slo", f"no deployment meets the p99 SLO (TTFT {slo.ttft_s:g} s, ITL {slo.itl_s:g} s) in simulation; "
            f"the cheapest analytic candidate {best.instance} tp {best.tp} pp {best.pp}"
            f"{' attention-dp' if best.attention_dp else ''} {best.precision} misses it"
            + (f" ({best.sim_note})" if best.sim_note else ""),
        )  # fmt: skip
    cfg = config_of(best, input_len, output_len)
    if sessions is not None:  # the curve of the mean turn the row was screened at (its estimate_command's)
        cfg = replace(cfg, input_len=screened_input_len(sessions, input_len, output_len),
                      prefix_hit_rate=best.prefix_hit_rate)  # fmt: skip
    d = deployment_for(model, cluster_of(best.instance, best.nodes_per_replica), cfg, efficiency_for)
    conc = np.arange(1, max_concurrency(d, cfg) + 1, dtype=np.float64)
    curve = serve_curve(d, cfg, conc)
    dis, note = (
        _disaggregation(model, cluster_of(best.instance, best.nodes), best, cfg, qps, slo, efficiency_for)
        if sessions is None
        else (None, "DistServe's comparison not made: it prices independent requests, not sessions")
    )
    splits = split_note(ranked, qps, search_disagg) + session_splits_note(sessions, search_disagg)
    note = f"splits ranked in the plan (p99 by simulation): {splits}. On means: {note}"
    if dis is not None and best.mode == "disaggregated" and dis.colocated_rps > dis.disagg_rps:
        note += (
            " (the two verdicts differ because the SLO applies to p99 in the plan and to means here: colocated "
            "replicas run prompt chunks inside decode iterations, so their ITL spreads and the p99 misses where "
            "the mean meets it)"
        )
    return ServePlan(
        model=model.name, qps=qps, input_len=input_len, output_len=output_len, slo=slo, best=best,
        candidates=ranked,
        curve={"concurrency": conc.tolist(), "requests_per_s": curve.requests_per_s.tolist(),
               "ttft_s": curve.ttft_s.tolist(), "itl_s": curve.itl_s.tolist()},
        disaggregation=dis, disaggregation_note=note, router=router, prefix=prefix, kv_router=kv_router,
        speculative=speculative, speculative_auto=speculative_auto,
        speculative_note=spec_note(speculative, speculative_auto, ranked), sessions=sessions,
    )  # fmt: skip


def _heterogeneous(
    layouts: list[tuple[ServeConfig, int]], cluster_of: ClusterOf, model: ModelArch, qps: float, slo: SLO, name: str,
    efficiency_for: EfficiencyFor | None = None, decode_pools: DecodePools | None = None,
    prefix: PrefixWorkload | None = None, router: str = "round-robin", sessions: SessionWorkload | None = None,
) -> list[Candidate]:  # fmt: skip
    """Splits whose prefill and decode pools take two different layouts of those searched (every ordered pair, attention
    DP on and off counting as two layouts; the same-layout split is the diagonal, found in the search loop)."""
    out: list[Candidate] = []
    for pre, pre_nodes in layouts:
        for dec, _ in layouts:
            same = (dec.tp, dec.pp, dec.ep, dec.attention_dp) == (pre.tp, pre.pp, pre.ep, pre.attention_dp)
            if same or dec.speculative is not pre.speculative:  # auto: a split speculates in both pools or neither
                continue
            try:  # a layout whose weights leave no KV memory (DeepSeek-V3 at tp 1) pairs with nothing
                c = screen_split(pre, cluster_of, model, qps, slo, name, pre_nodes, decode_cfg=dec,
                                 efficiency_for=efficiency_for, decode_pools=decode_pools, prefix=prefix,
                                 router=router, sessions=sessions)  # fmt: skip
            except InputError:
                continue
            if c is not None:
                out.append(c)
    return out


def _disaggregation(
    model: ModelArch, cluster: Cluster, best: Candidate, cfg: ServeConfig, qps: float, slo: SLO,
    efficiency_for: EfficiencyFor | None = None,
) -> tuple[DisaggComparison | None, str]:  # fmt: skip
    """Colocated vs disaggregated goodput on the best candidate's nodes (the disaggregation model's mean-field
    goodput at the SLO applied to means: DistServe's comparison, not the plan's simulated p99), and a sentence."""
    per_replica = best.tp * best.pp
    if cluster.num_gpus < 2 * per_replica:
        return None, (
            f"DistServe's comparison not made: it splits the best row's own layout ({layout_text(best)}) into a prefill "
            f"and a decode replica, 2 x {per_replica} GPUs, and the plan's {best.nodes} node(s) hold "
            f"{cluster.num_gpus}"
        )  # fmt: skip
    cmp = compare_disaggregation(model, cluster, cfg, slo,
                                 efficiency=None if efficiency_for is None else efficiency_for(cluster))  # fmt: skip
    meets = "at least" if cmp.disagg_rps >= qps else "below"
    return cmp, (
        f"DistServe's mean-field comparison on the best row's {cmp.num_gpus} GPUs ({cmp.replicas} replicas of "
        f"{layout_text(best)}, both pools in that layout), the SLO applied to means: "
        f"colocated {cmp.colocated_rps:.2f} req/s vs disaggregated {cmp.disagg_rps:.2f} req/s (prefill:decode "
        f"replicas {cmp.prefill_to_decode}, {meets} the {qps:g} req/s asked); {cmp.why}"
    )  # fmt: skip


def _with_attention_dp(
    model: ModelArch, shapes: list[tuple[int, int, int]], search: bool
) -> list[tuple[int, int, int, bool]]:
    """Each (tp, pp, ep) without attention DP, and for an MoE model with ``ep == tp > 1`` also with it (what
    :class:`fmstack.perfmodel.inference_deploy.Deployment` accepts; at TP 1 it would change nothing)."""
    out: list[tuple[int, int, int, bool]] = []
    for tp, pp, ep in shapes:
        out.append((tp, pp, ep, False))
        if search and model.moe is not None and ep == tp > 1:
            out.append((tp, pp, ep, True))
    return out


def _one_node_holds(cluster_of: Callable[[str, int], Cluster], names: list[str], name: str, nodes: int) -> bool:
    """Another searched instance with the same GPU at no higher price per GPU holds ``nodes`` of ``name``'s GPUs in
    one node (NVLink, not the scale-out fabric): the multi-node replica is not searched (8 x p5.4xlarge vs one
    p5.48xlarge)."""
    own = cluster_of(name, 1).instance
    per_gpu = (own.price_per_hour_usd or 0.0) / own.num_gpus
    for other in names:
        inst = cluster_of(other, 1).instance
        if other == name or inst.price_per_hour_usd is None or inst.gpu != own.gpu:
            continue
        if inst.num_gpus >= nodes * own.num_gpus and inst.price_per_hour_usd / inst.num_gpus <= per_gpu:
            return True
    return False
