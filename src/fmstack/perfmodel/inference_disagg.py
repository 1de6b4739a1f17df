"""Disaggregated serving: prefill and decode on separate GPU pools, the KV cache moved between them.

Goodput is the request rate served within the SLO (DistServe, Zhong et al. 2024, OSDI, sec. 2). Colocated, each
replica mixes prompt chunks into decode iterations, at best spread evenly (Sarathi-Serve, Agrawal et al. 2024: with
``C`` sequences each iteration carries ``k = C * input_len / output_len`` prompt tokens, no spikes): every
inter-token gap pays for ``k`` prompt tokens, ``ITL = step(C decode + k prompt tokens)``, and a prompt takes
``ceil(input_len / k)`` iterations to its first token. The ITL SLO caps ``C``. Disaggregated (DistServe sec. 3; Splitwise,
Patel et al. 2024; NVIDIA Dynamo with NIXL):
- a decode replica runs only decode iterations: ``ITL(C) = step(C decode tokens)``, ``rate = C / (output_len ITL)``;
- a prefill replica serves prompts one at a time with service time ``s = step(prompt)``; Poisson arrivals make it
  an M/D/1 queue with mean wait ``W = rho s / (2 (1 - rho))`` (Pollaczek-Khinchine), so the TTFT SLO allows
  ``rho = 2a / (1 + 2a)`` with ``a = (TTFT_SLO - s - t_kv - ITL) / s``;
- the KV cache of a prompt, ``input_len * kv_bytes_per_token``, moves from each prefill GPU to its decode peer in
  parallel (each GPU sends its TP shard) as a point-to-point transfer over NVLink when both pools share an NVLink
  domain, else over the scale-out fabric (EFA), priced by :mod:`fmstack.perfmodel.collectives`.
The best split of the replicas between the pools maximises ``min(prefill rate, decode rate)``.

Speculative decoding (``cfg.speculative``; :mod:`fmstack.perfmodel.inference_disagg_spec`): the decode pool
speculates, an iteration of ``step(C)`` (verify + drafts) emits ``E`` = ``mean_tokens_per_step`` tokens per sequence,
so ``ITL(C) = step(C) / E`` (the TPOT) in the formulas above and the first token waits one whole ``step(C)``; the
prefill pool adds one draft pass over the prompt and the KV transfer the draft's KV. Colocated, the same ``E``:
``ITL = step / E`` and ``k = C * input_len * E / output_len`` prompt tokens per iteration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from fmstack.catalog.schema import ModelArch
from fmstack.catalog.topology import Cluster
from fmstack.errors import InputError
from fmstack.perfmodel.collectives import GroupPlacement, collective_time_s
from fmstack.perfmodel.efficiency import Efficiency
from fmstack.perfmodel.inference import ServeConfig, deployment, max_concurrency, prefill_ctx
from fmstack.perfmodel.inference_disagg_spec import draft_kv_bytes_per_token, prefill_deployment, tokens_per_iteration
from fmstack.perfmodel.inference_kv import KV_BYTES, kv_bytes_per_token, kv_split
from fmstack.perfmodel.inference_step import Deployment, RankLoad, step_time


@dataclass(frozen=True, kw_only=True, slots=True)
class SLO:
    """Latency targets (applied to the modelled means here; the plan checks p99 by simulation)."""

    ttft_s: float
    itl_s: float

    def __post_init__(self) -> None:
        if not all(math.isfinite(x) and x > 0 for x in (self.ttft_s, self.itl_s)):
            raise InputError(
                "slo", f"TTFT and ITL targets must be finite numbers > 0, got {self.ttft_s} s and {self.itl_s} s"
            )


@dataclass(frozen=True, kw_only=True, slots=True)
class DisaggComparison:
    """Colocated vs disaggregated goodput on the same GPUs, and why one wins."""

    num_gpus: int
    replicas: int
    colocated_rps: float
    colocated_concurrency: int
    colocated_itl_s: float
    prefill_replicas: int
    decode_replicas: int
    prefill_to_decode: str
    disagg_rps: float
    decode_concurrency: int
    decode_itl_s: float
    """Decode-only inter-token latency (speculative decoding: an iteration over its mean tokens, the TPOT)."""
    prefill_s: float
    kv_bytes_per_request: float
    kv_transfer_s: float
    kv_link: str
    disagg_ttft_s: float
    gain: float
    why: str


def kv_transfer_s(
    model: ModelArch, cluster: Cluster, cfg: ServeConfig, *, same_domain: bool, decode_tp: int | None = None
) -> tuple[float, float]:
    """(bytes of one prompt's KV cache, seconds to move it) with every TP shard sent in parallel. With a decode pool
    of another TP degree (``decode_tp``; heterogeneous pools) each prefill GPU holds ``1 / kv_split(tp_p)`` of the
    KV heads and each decode GPU needs ``1 / kv_split(tp_d)``: the transfer is priced as one point-to-point send of
    the larger per-GPU share, all GPUs at once (an assumption: each decode GPU receives its heads from the prefill
    GPUs that hold them; NVIDIA Dynamo's disaggregation design doc: NIXL moves the KV cache from the prefill engine's
    VRAM to the decode engine's, and a larger decode TP than prefill TP is the recommended use; no source times a
    mismatched-TP transfer). Contention of several senders on one receiver's link is not modelled. Speculative
    decoding with a draft model: the draft's KV cache of the prompt moves too, each GPU its share of the draft's
    heads (:mod:`fmstack.perfmodel.inference_disagg_spec`)."""
    total = cfg.input_len * kv_bytes_per_token(model, KV_BYTES[cfg.kv])
    split = kv_split(model, 1 if cfg.attention_dp else cfg.tp)  # attention DP: a prompt's KV on one rank
    if decode_tp is not None:
        split = min(split, kv_split(model, decode_tp))
    per_gpu = total / split
    draft = cfg.speculative.draft if cfg.speculative is not None else None
    if draft is not None:
        draft_total = cfg.input_len * draft_kv_bytes_per_token(cfg)
        dsplit = kv_split(draft, 1 if cfg.attention_dp else cfg.tp)
        if decode_tp is not None:
            dsplit = min(dsplit, kv_split(draft, decode_tp))
        total, per_gpu = total + draft_total, per_gpu + draft_total / dsplit
    placement = GroupPlacement(num_ranks=2, ranks_per_domain=2 if same_domain and cluster.scale_up else 1)
    return total, float(collective_time_s("send_recv", per_gpu, placement, cluster))


@dataclass(frozen=True, kw_only=True, slots=True)
class PoolRates:
    """What one prefill and one decode replica of a layout serve within the SLO (mean field)."""

    per_prefill_rps: float
    """Prompts/s one prefill replica takes with its M/D/1 wait inside the TTFT budget (0: no slack); attention DP:
    one rank of it (each of its ``tp`` ranks takes its own prompts)."""
    rho: float
    """That prefill replica's utilisation."""
    per_decode_rps: float
    """Requests/s one decode replica serves at the most sequences whose decode-only ITL meets the target."""
    decode_concurrency: int
    decode_itl_s: float
    """Decode-only inter-token latency at ``decode_concurrency`` (speculative decoding: the TPOT)."""
    decode_iteration_s: float
    """One decode-only iteration at ``decode_concurrency`` (``decode_itl_s`` times the tokens an iteration emits):
    the wait for the first token."""
    prefill_s: float
    kv_bytes: float
    kv_s: float
    kv_link: str
    same_domain: bool


def prefill_alone_s(d: Deployment, cfg: ServeConfig) -> float:
    """One prompt alone on a prefill replica: its ``max_num_tokens`` chunks, one iteration each, priced as
    :mod:`fmstack.perfmodel.inference_sim_disagg` prices them (the service time of the prefill queue). Attention
    DP: on one rank, within that rank's budget, the other ranks idle (the service time of one rank). Speculative
    decoding: with the draft's pass over the prompt (:func:`fmstack.perfmodel.inference_disagg_spec.prefill_deployment`)."""
    d = prefill_deployment(d)
    cached = math.floor(cfg.prefix_hit_rate * cfg.input_len)
    done, total = cached, 0.0
    while done < cfg.input_len:
        n = min(cfg.input_len - done, cfg.max_num_tokens)
        last = 1.0 if done + n >= cfg.input_len else 0.0
        ctx = n * done + n * (n + 1) / 2
        busy = RankLoad(prefill_tokens=float(n), prefill_token_ctx=ctx, prefill_seqs=last) if d.attention_dp else None
        total += float(step_time(d, 0.0, 0.0, float(n), ctx, last, busiest=busy).total_s)
        done += n
    return total


def kv_move(
    model: ModelArch, cluster: Cluster, cfg: ServeConfig, d: Deployment, decode: Deployment | None = None,
    *, same_domain: bool | None = None,
) -> tuple[float, float, str, bool]:  # fmt: skip
    """(bytes, seconds, link name, same NVLink domain) of one prompt's KV cache from a prefill replica ``d`` to a
    decode replica (``decode``, else one like ``d``) on ``cluster``: NVLink when both replicas fit one NVLink
    domain (the best pair a split can have: the mean-field figure), else the scale-out fabric
    (:func:`kv_transfer_s`). ``same_domain=False``: the scale-out fabric's figure (a pair the split's placement puts
    in two domains, :mod:`fmstack.perfmodel.inference_disagg_place`)."""
    dd = d if decode is None else decode
    same = d.num_gpus + dd.num_gpus <= cluster.gpus_per_domain and same_domain is not False
    # an attention-DP decode rank receives a prompt's whole KV cache (kv_split(1)), as an attention-DP prefill rank
    # sends it (``cfg.attention_dp``)
    decode_tp = None if decode is None else (1 if dd.attention_dp else dd.tp)
    kv_bytes, kv_s = kv_transfer_s(model, cluster, cfg, same_domain=same, decode_tp=decode_tp)
    link = f"NVLink ({cluster.scale_up.name})" if same and cluster.scale_up else cluster.scale_out.name.upper()
    return kv_bytes, kv_s, link, same


@dataclass(frozen=True, kw_only=True, slots=True)
class DecodeAtSlo:
    """A decode replica's best point on its decode-only curve within the ITL target."""

    rps: float
    """Requests/s at the most sequences whose decode-only ITL meets the target (``C / (output_len x ITL(C))``; 0
    when none does)."""
    concurrency: int
    itl_s: float
    iteration_s: float
    """The decode-only iteration at ``concurrency`` (``itl_s`` x the tokens an iteration emits per sequence)."""


def decode_itl(dd: Deployment, cfg: ServeConfig, conc: NDArray[np.float64]) -> NDArray[np.float64]:
    """Decode-only inter-token latency of ``conc`` sequences at the mean context ``input + output / 2`` (under
    attention DP every rank its share): an iteration over the tokens it emits per sequence (1, or speculative
    decoding's ``mean_tokens_per_step``: the TPOT)."""
    return step_time(dd, conc, float(cfg.input_len) + float(cfg.output_len) / 2.0).total_s / tokens_per_iteration(dd)


def decode_at_slo(
    dd: Deployment, cfg: ServeConfig, slo: SLO, conc: NDArray[np.float64], itl: NDArray[np.float64] | None = None
) -> DecodeAtSlo:
    """:class:`DecodeAtSlo` of a decode replica ``dd`` over ``conc`` sequences (the first of equal rates); ``itl``:
    their :func:`decode_itl` when the caller has it."""
    dec_itl = decode_itl(dd, cfg, conc) if itl is None else itl
    dec_rate = np.where(dec_itl <= slo.itl_s, conc / (float(cfg.output_len) * dec_itl), 0.0)
    i = int(np.argmax(dec_rate))
    itl_i = float(dec_itl[i])
    return DecodeAtSlo(rps=float(dec_rate[i]), concurrency=int(conc[i]), itl_s=itl_i,
                       iteration_s=itl_i * tokens_per_iteration(dd))  # fmt: skip


def pool_rates(
    model: ModelArch, cluster: Cluster, cfg: ServeConfig, slo: SLO, d: Deployment, conc: NDArray[np.float64],
    decode: Deployment | None = None, decode_at: DecodeAtSlo | None = None,
) -> PoolRates:  # fmt: skip
    """Per-replica prefill and decode rates of ``d`` (one replica of ``cfg``) at ``slo``, over ``conc`` sequences
    (decode replicas of ``decode`` when given: heterogeneous pools, ``conc`` up to its slots; the KV link is
    NVLink when one replica of each fits an NVLink domain of ``cluster``). ``decode_at``: the decode replica's
    :func:`decode_at_slo` over ``conc`` when the caller has it (a plan computes it once per decode layout)."""
    dd = d if decode is None else decode
    dec = decode_at_slo(dd, cfg, slo, conc) if decode_at is None else decode_at
    # in max_num_tokens chunks, as the split simulation runs it (one chunk up to the budget: one step); attention
    # DP: on one rank (its dense layers and attention unsplit), the experts over all
    prefill = prefill_alone_s(d, cfg)
    kv_bytes, kv_s, link, same = kv_move(model, cluster, cfg, d, decode)
    slack = (slo.ttft_s - prefill - kv_s - dec.iteration_s) / prefill
    rho = 2 * slack / (1 + 2 * slack) if slack > 0 else 0.0
    return PoolRates(
        per_prefill_rps=rho / prefill, rho=rho, per_decode_rps=dec.rps, decode_concurrency=dec.concurrency,
        decode_itl_s=dec.itl_s, decode_iteration_s=dec.iteration_s, prefill_s=prefill, kv_bytes=kv_bytes, kv_s=kv_s, kv_link=link, same_domain=same,
    )  # fmt: skip


def compare_disaggregation(
    model: ModelArch,
    cluster: Cluster,
    cfg: ServeConfig,
    slo: SLO,
    *,
    efficiency: Efficiency | None = None,
) -> DisaggComparison:
    """Goodput of ``cluster``'s GPUs colocated vs split into prefill and decode pools of ``cfg.tp``-GPU replicas."""
    d = deployment(model, cluster, cfg, efficiency)
    replicas = cluster.num_gpus // d.num_gpus
    if replicas < 2:
        raise InputError(
            "gpus", f"disaggregation needs at least 2 replicas of tp({cfg.tp}); have {cluster.num_gpus} GPUs"
        )
    limit = max_concurrency(d, cfg)
    conc = np.arange(1, limit + 1, dtype=np.float64)
    isl, osl = float(cfg.input_len), float(cfg.output_len)
    new = isl - math.floor(cfg.prefix_hit_rate * isl)
    pctx = prefill_ctx(isl, cfg.prefix_hit_rate)
    per_iter = tokens_per_iteration(d)  # speculative decoding: E tokens per iteration, a request osl / E of them
    k = np.minimum(conc * new * per_iter / osl, float(cfg.max_num_tokens))
    co_step = step_time(d, conc, isl + osl / 2.0, k, k * pctx / new, k / new).total_s
    co_itl = co_step / per_iter
    co_ttft = np.ceil(new / k) * co_step
    co_rate = np.minimum(conc / (osl * co_itl), k / new / co_step)
    ok = (co_ttft <= slo.ttft_s) & ((co_itl <= slo.itl_s) | (osl <= 1))  # one output token: no gap to hold
    co_i = int(np.argmax(np.where(ok, co_rate, -1.0)))
    co_rps = float(co_rate[co_i]) * replicas if ok.any() else 0.0
    pools = pool_rates(model, cluster, cfg, slo, d, conc)
    per_prefill, per_decode, rho, prefill = pools.per_prefill_rps, pools.per_decode_rps, pools.rho, pools.prefill_s
    if cfg.attention_dp:  # each rank serves its own prompts: tp prefill servers per replica, each at that rate
        per_prefill *= cfg.tp
    kv_bytes, kv_s, link = pools.kv_bytes, pools.kv_s, pools.kv_link
    best = (0.0, 1)
    for n_pre in range(1, replicas):
        rate = min(n_pre * per_prefill, (replicas - n_pre) * per_decode)
        if rate > best[0]:
            best = (rate, n_pre)
    dis_rps, n_pre = best
    rho_used = dis_rps / (n_pre * per_prefill) * rho if per_prefill > 0 else 0.0
    wait = rho_used * prefill / (2 * (1 - rho_used)) if rho_used < 1 else math.inf
    gain = dis_rps / co_rps if co_rps > 0 else (math.inf if dis_rps > 0 else 1.0)
    why = _why(co_rps, dis_rps, float(co_itl[co_i]), int(conc[co_i]), pools.decode_itl_s, pools.decode_concurrency,
               prefill, kv_s, kv_bytes, link, slo, co_ttft_s=float(co_ttft[co_i]))  # fmt: skip
    g = math.gcd(n_pre, replicas - n_pre)
    return DisaggComparison(
        num_gpus=cluster.num_gpus, replicas=replicas, colocated_rps=co_rps, colocated_concurrency=int(conc[co_i]),
        colocated_itl_s=float(co_itl[co_i]), prefill_replicas=n_pre, decode_replicas=replicas - n_pre,
        prefill_to_decode=f"{n_pre // g}:{(replicas - n_pre) // g}", disagg_rps=dis_rps,
        decode_concurrency=pools.decode_concurrency, decode_itl_s=pools.decode_itl_s, prefill_s=prefill,
        kv_bytes_per_request=kv_bytes, kv_transfer_s=kv_s, kv_link=link,
        disagg_ttft_s=prefill + wait + kv_s + pools.decode_iteration_s, gain=gain, why=why,
    )  # fmt: skip


def _why(
    co: float, dis: float, co_itl: float, co_c: int, dec_itl: float, dec_c: int,
    prefill: float, kv_s: float, kv_bytes: float, link: str, slo: SLO, *, co_ttft_s: float,
) -> str:  # fmt: skip
    kv = f"moving {kv_bytes / 1e6:.0f} MB of KV per request over {link} takes {kv_s * 1e3:.1f} ms"
    if dis <= 0 and co <= 0:
        return (
            f"neither meets the SLO (TTFT {slo.ttft_s * 1e3:.0f} ms, ITL {slo.itl_s * 1e3:.0f} ms) at any load: one "
            f"sequence per replica colocated has TTFT {co_ttft_s * 1e3:.0f} ms and ITL {co_itl * 1e3:.1f} ms (its "
            f"prompt in chunks beside the decode), decode-only ITL {dec_itl * 1e3:.1f} ms, prefill "
            f"{prefill * 1e3:.0f} ms; {kv}"
        )
    if dis > co and co <= 0:
        return (
            f"disaggregation wins: colocated misses the SLO (TTFT {slo.ttft_s * 1e3:.0f} ms, ITL "
            f"{slo.itl_s * 1e3:.0f} ms) even at one sequence per replica (TTFT {co_ttft_s * 1e3:.0f} ms, ITL "
            f"{co_itl * 1e3:.1f} ms: its prompt in chunks beside the decode); decode-only replicas run {dec_c} at "
            f"{dec_itl * 1e3:.1f} ms; {kv}"
        )
    if dis > co:
        return (
            f"disaggregation wins ({dis / co:.2f}x goodput): colocated, prompt chunks in decode iterations "
            f"hold the ITL SLO ({slo.itl_s * 1e3:.0f} ms) only up to {co_c} sequences per replica "
            f"({co_itl * 1e3:.1f} ms); decode-only replicas run {dec_c} at {dec_itl * 1e3:.1f} ms; {kv}"
        )
    return (
        f"colocated wins: splitting leaves fewer replicas for each phase; decode-only replicas run {dec_c} sequences "
        f"at {dec_itl * 1e3:.1f} ms vs {co_c} colocated at {co_itl * 1e3:.1f} ms, prefill takes {prefill * 1e3:.0f} ms "
        f"of the {slo.ttft_s * 1e3:.0f} ms TTFT budget; {kv}"
    )


def kingman_wait_quantile_s(rate_per_s: float, service_s: float, servers: int, q: float = 0.99) -> float:
    """An upper bound on the ``q`` quantile of the FCFS wait of M/D/c (``servers`` servers, deterministic service
    ``service_s``, Poisson arrivals). With equal service times FCFS hands customer ``n`` to server ``n mod c``, so
    the wait is that of an E_c/D/1 queue (every ``c``-th arrival, Erlang-c gaps; Crommelin 1932), and Kingman's
    exponential bound for GI/G/1 (Kingman 1964; Ross, *Stochastic Processes*, sec. 6.5) gives
    ``P(W > t) <= exp(-theta t)`` with ``theta`` the positive root of ``E[exp(theta (S - A))] = 1``, here
    ``theta s = c ln(1 + theta / lambda)``; so ``W_q <= ln(1 / (1 - q)) / theta`` (inf at or above saturation)."""
    if rate_per_s * service_s >= servers:
        return math.inf
    if rate_per_s <= 0:
        return 0.0

    def gap(theta: float) -> float:  # > 0 below the root, < 0 above it
        return servers * math.log1p(theta / rate_per_s) - theta * service_s

    lo, hi = 0.0, 1.0 / service_s
    while gap(hi) > 0:
        lo, hi = hi, hi * 2
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if gap(mid) > 0 else (lo, mid)
    return math.log(1.0 / (1.0 - q)) / lo


def prefill_replicas_p99(rate_per_s: float, service_s: float, budget_s: float, limit: int = 100_000) -> int | None:
    """The fewest prefill replicas whose p99 queueing wait (:func:`kingman_wait_quantile_s`) fits ``budget_s`` at
    ``rate_per_s`` prompts/s of ``service_s`` each (None: no budget, or more than ``limit`` replicas)."""
    if budget_s <= 0 or service_s <= 0:
        return None

    def fits(c: int) -> bool:
        return kingman_wait_quantile_s(rate_per_s, service_s, c) <= budget_s

    # the bound falls as servers are added (theta s = c ln(1 + theta / lambda) has a larger root for a larger c):
    # doubling, then bisection (a budget just above zero would otherwise take one evaluation per count)
    lo = max(1, math.floor(rate_per_s * service_s) + 1)
    if lo > limit:
        return None
    if fits(lo):
        return lo
    hi = lo
    while not fits(hi):  # lo does not fit
        if hi >= limit:
            return None
        lo, hi = hi, min(2 * hi, limit)
    while hi - lo > 1:  # lo does not fit, hi fits
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
    return hi
