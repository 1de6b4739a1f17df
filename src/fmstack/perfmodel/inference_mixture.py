"""The mixture of engine iterations the analytic serving curve averages over (docs/inference.md, the curve).

Engines put whole prompts in an iteration (TensorRT-LLM, vLLM, SGLang), within a token budget per iteration,
``max_num_tokens``, that also counts the iteration's decode tokens (vLLM's ``max_num_batched_tokens`` with chunked
prefill, TensorRT-LLM's ``max_num_tokens``): what does not fit is chunked into the next iterations (chunked
prefill, Agrawal et al. 2024, Sarathi-Serve). So an iteration carries ``k = 0, 1, 2, ...`` prompt chunks, not the
mean share, and the iteration time is convex in them (a decode-only iteration reads weights, one with a prompt
computes). :func:`mean_iteration` is the mean over ``k``; :func:`own_prompt_time` the time from the start of the
iteration that admits a request to its first token, given that the iteration carries that request's prompt.
"""

from __future__ import annotations

import math
from dataclasses import fields

import numpy as np
from numpy.typing import NDArray

from fmstack.perfmodel.inference_step import Deployment, RankLoad, StepParts, step_time

F = NDArray[np.float64]
PK_CUTOFF = 1e-15
"""Counts rarer than this are left out of the mixtures (they move the means by < 1e-12)."""


def prompt_budget(d: Deployment, decodes: F, mnt: int) -> F:
    """Prompt tokens one budget holder (the engine; one rank under attention DP) fits in an iteration next to its
    share of ``decodes`` decode tokens: ``max_num_tokens`` less those decodes (vLLM's scheduler with chunked
    prefill and TensorRT-LLM's count decode tokens in the budget), at least one token."""
    dp = float(d.tp) if d.attention_dp else 1.0
    return np.maximum(float(mnt) - decodes / dp, 1.0)


def budget_running(d: Deployment, new: float, osl: float, mnt: int) -> float:
    """The most sequences the token budget keeps running: an iteration holds at most ``max_num_tokens`` tokens (per
    rank under attention DP), ``R`` decodes and ``a`` admitted prompts of ``new`` tokens, and a sequence stays
    ``osl`` iterations, so ``R = a x osl`` (Little's law) and ``R + a x new <= max_num_tokens`` give
    ``R <= max_num_tokens x osl / (new + osl)``; closed-loop clients beyond it wait for their prompt's turn."""
    dp = float(d.tp) if d.attention_dp else 1.0
    return dp * float(mnt) * osl / (new + osl)


def chunks_per_prompt(new: float, budget: F, mnt: int) -> tuple[F, F]:
    """``(chunks, budget)``: a prompt of ``new`` tokens comes in ``ceil(new / max_num_tokens)`` equal chunks, and at
    least one chunk progresses per iteration (the budget is floored at a chunk; the curve caps the running
    sequences at :func:`budget_running`, docs/inference.md)."""
    n_ch = np.full(budget.shape, max(1.0, math.ceil(new / mnt)))
    return n_ch, np.maximum(budget, new / n_ch)


def counts(m: F, q: F, poisson: NDArray[np.bool_]) -> tuple[F, F, NDArray[np.intp]]:
    """``(k, P(k), point)`` for every count ``k`` with ``P(k) > PK_CUTOFF`` at every point: binomial(``m``, ``q``)
    (``m`` clients, each with a chunk in a share ``q`` of the iterations), or Poisson(``m q``) where ``poisson``."""
    lam = m * q
    top = float(np.max(lam)) if lam.size else 0.0
    ks = np.arange(math.ceil(top + 10.0 * math.sqrt(top) + 10.0) + 1, dtype=np.float64)[:, None]
    log_k_fact = np.array([math.lgamma(i + 1.0) for i in ks[:, 0]])[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        j = ks[:-1]
        log_choose = np.concatenate(  # log C(m, k) = sum_{j < k} log((m - j) / (j + 1)); 0 for k > m
            [np.zeros((1, m.size)), np.cumsum(np.where(m - j > 0, np.log(m - j), -np.inf) - np.log(j + 1.0), 0)]
        )
        log_1q = np.log1p(-q)  # -inf at q = 1: every client has a chunk in every iteration
        tail = np.where(m - ks > 0, (m - ks) * log_1q, 0.0)
        pk = np.exp(log_choose + ks * np.log(q) + tail)
        poi = np.where(ks > 0, np.exp(ks * np.log(lam) - lam - log_k_fact), np.exp(-lam))
        pk = np.where(poisson, poi, pk)
    ki, pi = np.nonzero(pk > PK_CUTOFF)
    return ks[ki, 0], pk[ki, pi], pi


def _mix(values: StepParts, pk: F, pi: NDArray[np.intp], n: int) -> StepParts:
    mass = np.bincount(pi, weights=pk, minlength=n)
    return StepParts(**{
        f.name: np.bincount(pi, weights=pk * getattr(values, f.name), minlength=n) / mass for f in fields(StepParts)
    })  # fmt: skip


def _combine(a: StepParts, wa: F, b: StepParts, wb: F) -> StepParts:
    return StepParts(**{f.name: wa * getattr(a, f.name) + wb * getattr(b, f.name) for f in fields(StepParts)})


def mean_iteration(
    d: Deployment, c: F, ctx: float, new: float, pctx: float, osl: float, mnt: int, *, open_loop: bool
) -> StepParts:
    """The mean iteration of ``c`` running sequences, priced as the mixture of iterations the engine runs.

    A prompt needs ``chunks`` iterations alone (``budget``: :func:`prompt_budget`), and ``c /
    osl`` prompts start per iteration on average (Little's law); ``chunks``: :func:`chunks_per_prompt`. Closed loop, each of the ``c`` running clients
    has a chunk in ``chunks`` of every ``osl`` iterations at its own phase, so the chunks that arrive for an
    iteration, ``k``, are binomial(c, chunks / osl); open loop (Poisson arrivals), Poisson with the same mean (one
    client of one output token: every iteration is a prompt). ``k`` chunks that exceed the budget spill, whole
    budget by whole budget, into the next ``ceil(k chunk / budget) - 1`` iterations (chunked prefill), priced as
    that many iterations sharing the tokens equally in place of as many decode-only ones; a spill that meets the
    next iterations' own arrivals is not compounded (first order in the overflow).

    Attention DP: a closed loop of same-length requests started together keeps the ranks in step (every rank
    admits a prompt in the same iterations, docs/inference.md), so an admission is one prompt on every rank,
    priced at the mean rank, ``c / (osl x tp)`` such admissions per iteration. Open loop, TensorRT-LLM gives each
    new request to the rank with the fewest active prompt tokens among those below the mean request count
    (``_balance_requests_across_ranks``, a heap), so ``k`` prompts land on ``k`` different ranks and the iteration
    takes the busiest rank's ``ceil(k / tp)`` chunks next to its ``c / tp`` decodes, while the routed experts take
    all ranks' tokens (:func:`step_time` with ``busiest``). The budget is per rank."""
    shape = np.shape(c)
    c, back = np.unique(np.asarray(c, dtype=np.float64), return_inverse=True)  # clients beyond the limit repeat it
    dp = float(d.tp) if d.attention_dp else 1.0
    group = 1.0 if open_loop else dp  # prompts admitted together (closed-loop attention-DP ranks are in step)
    n_ch, budget = chunks_per_prompt(new, prompt_budget(d, c, mnt), mnt)
    q = np.minimum(1.0, n_ch / osl)
    k, pk, pi = counts(c / group, q, np.full(c.shape, open_loop) & (c > 1.0))
    cs, chunk, chunk_ctx, b, nc = c[pi], new / n_ch[pi], pctx / n_ch[pi], budget[pi], n_ch[pi]
    r = np.ceil(k / dp) if (d.attention_dp and open_loop) else k  # chunks on the busiest budget holder
    spill = np.maximum(1.0, np.ceil(r * chunk / b - 1e-9))  # iterations the k chunks take
    busy = None
    if d.attention_dp and open_loop:
        busy = RankLoad(decode_seqs=cs / dp, decode_ctx=ctx, prefill_tokens=r * chunk / spill,
                        prefill_token_ctx=r * chunk_ctx / spill, prefill_seqs=r / nc / spill)  # fmt: skip
    n = k * group / spill  # chunks per iteration, all ranks
    t = step_time(d, cs, ctx, n * chunk, n * chunk_ctx, n / nc, busiest=busy)
    if float(np.max(spill, initial=1.0)) > 1.0:
        t = _combine(t, spill, step_time(d, cs, ctx), 1.0 - spill)
    mixed = _mix(t, pk, pi, c.size)
    return StepParts(**{f.name: getattr(mixed, f.name)[back].reshape(shape) for f in fields(StepParts)})


def _sum_ceil(r: F, s: F) -> F:
    """``sum_{j=1..r} ceil(j s / r)`` for positive integers ``r``, ``s`` (as floats), in closed form: the floor sum
    ``sum_{j<r} floor(j s / r) = ((r - 1)(s - 1) + gcd(r, s) - 1) / 2`` (a lattice-point count), plus ``s`` for
    ``j = r``, plus one for each ``j`` whose ``j s / r`` is not whole (all but ``gcd(r, s)`` of them)."""
    ri, si = np.rint(r).astype(np.int64), np.rint(s).astype(np.int64)
    g = np.gcd(ri, si).astype(np.float64)
    rf, sf = ri.astype(np.float64), si.astype(np.float64)
    return ((rf - 1.0) * (sf - 1.0) + g - 1.0) / 2.0 + sf + rf - g


def own_prompt_time(
    d: Deployment, c: F, ctx: float, new: float, pctx: float, osl: float, mnt: int, *, open_loop: bool
) -> F:
    """Seconds from the start of the iteration that admits a request (``c`` running with it) to its first token.

    The iteration carries the request's own chunk and the chunks that arrived with it: given that it carries
    this one (size-biased), the others' count is that of ``c - 1`` clients, binomial(c - 1, chunks / osl) closed
    loop, Poisson open loop, so ``1 + k`` chunks, priced as a mixture over ``k`` (not at the mean count: the
    iteration time is convex in the chunks). Beyond the budget the ``1 + k`` chunks share
    ``ceil((1 + k) chunk / budget)`` iterations first come, first served; the request, at a uniform place among
    them, waits for the iterations up to its own. A prompt of several chunks repeats this per chunk. Attention
    DP: the request's own rank carries its chunk and ``ceil((1 + k) / tp) - 1`` of the others (the heap spreads
    them), the experts all ``1 + k``; the iteration takes that rank's time. Closed loop the ranks are in step
    (:func:`mean_iteration`): ``tp`` prompts at a time, the others' count that of ``c / tp - 1`` such groups, the
    request's rank ``1 + k`` chunks and the experts ``tp (1 + k)``."""
    shape = np.shape(c)
    c, back = np.unique(np.asarray(c, dtype=np.float64), return_inverse=True)  # clients beyond the limit repeat it
    dp = float(d.tp) if d.attention_dp else 1.0
    # prompts admitted together: closed loop under attention DP the ranks are in step (one prompt on every rank at
    # once, as :func:`mean_iteration` prices it); otherwise one at a time
    group = 1.0 if open_loop else dp
    decodes = np.maximum(c - 1.0, 0.0)
    n_ch, budget = chunks_per_prompt(new, prompt_budget(d, decodes, mnt), mnt)
    k, pk, pi = counts(np.maximum(c / group - 1.0, 0.0), np.minimum(1.0, n_ch / osl), np.full(c.shape, open_loop))
    os_, chunk, chunk_ctx, b, nc = decodes[pi], new / n_ch[pi], pctx / n_ch[pi], budget[pi], n_ch[pi]
    total = group * (1.0 + k)  # chunks in the iteration, all ranks
    r = np.ceil(total / dp - 1e-9)  # the request's rank (the whole engine without attention DP)
    spill = np.maximum(1.0, np.ceil(r * chunk / b - 1e-9))
    # place j = 1 .. r uniformly (FCFS among simultaneous arrivals): the chunk is done after ceil(j spill / r)
    # of the spill iterations (equal shares)
    upto = _sum_ceil(r, spill) / r
    busy = None
    if d.attention_dp:
        busy = RankLoad(decode_seqs=os_ / dp, decode_ctx=ctx, prefill_tokens=r * chunk / spill,
                        prefill_token_ctx=r * chunk_ctx / spill, prefill_seqs=r / nc / spill)  # fmt: skip
    n = total / spill
    t = step_time(d, os_, ctx, n * chunk, n * chunk_ctx, n / nc, busiest=busy).total_s
    per_chunk = np.bincount(pi, weights=pk * upto * t, minlength=c.size) / np.bincount(pi, weights=pk, minlength=c.size)
    out: F = (n_ch * per_chunk)[back].reshape(shape)
    return out
