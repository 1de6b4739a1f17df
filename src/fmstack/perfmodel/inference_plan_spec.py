"""Speculative decoding in `plan serve`: which variants each colocated layout is screened with, which one it keeps,
and the sentence the plan prints about it.

The spec (:class:`fmstack.perfmodel.inference_speculative.SpecDecode`) rides on each candidate's
:class:`fmstack.perfmodel.inference.ServeConfig` (``speculative``), so the analytic screening
(:func:`fmstack.perfmodel.inference.serve_curve`), the p99 simulation (``Deployment.spec``) and the row's
`estimate serve` command all price the same deployment. Splits carry it too: their decode pool speculates and their
prefill pool runs the draft over the prompts (:mod:`fmstack.perfmodel.inference_disagg_spec`). ``--speculative
auto`` screens each colocated layout and each split with and without the method and ranks both (the analytic
screening prices means, where speculation always looks better; the simulated p99 decides, and a rejected draft
leaves a whole iteration as one token's gap).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from fmstack.errors import InputError
from fmstack.perfmodel.inference import ServeConfig, iterations_per_request
from fmstack.perfmodel.inference_plan_candidate import Candidate
from fmstack.perfmodel.inference_speculative import SpecDecode

F = NDArray[np.float64]
P99_TAIL = 0.01
"""The share of gap samples above the p99."""


def spec_variants(spec: SpecDecode | None, auto: bool) -> tuple[SpecDecode | None, ...]:
    """The speculation each colocated layout is screened with: none, ``spec``, or both (``auto``)."""
    if auto and spec is None:
        raise InputError("speculative", "auto compares each candidate with and without a method: none was given")
    if spec is None:
        return (None,)
    return (None, spec) if auto else (spec,)


def tokens_pmf(spec: SpecDecode) -> F:
    """``P(n = j)``, j = 1 .. K + 1: the tokens a sequence emits in one iteration (1 + the run of accepted drafts,
    :func:`fmstack.perfmodel.inference_speculative.draw_tokens`); sums to 1, ``sum j P(n = j)`` is
    ``mean_tokens_per_step``."""
    a = np.asarray(spec.acceptance, dtype=np.float64)
    reach = np.concatenate(([1.0], np.cumprod(a)))  # P(n >= j + 1): drafts 1..j all accepted
    out: F = reach - np.append(reach[1:], 0.0)
    return out


def chunk_gap_s(spike_s: F, conc: F, cfg: ServeConfig) -> F:
    """The gap a p99 ITL sees from the iterations that carry a prompt chunk (``spike_s``, of
    :func:`fmstack.perfmodel.inference_plan_analytic.chunk_iteration_s`). Without speculation the whole iteration
    (the screening's rule: it counts once more than 1 % of iterations carry a prompt). With it a sequence that emits
    ``n`` tokens in that iteration sees ``n`` gaps of ``spike_s / n`` (the simulation splits an iteration's gap over
    its tokens), so the gaps of ``spike_s / j`` are a share ``f j P(n = j) / E`` of all gaps, ``f`` the share of
    iterations carrying a chunk (Little's law: ``conc x chunks per prompt / iterations per request``, at most 1;
    every prompt priced uncached: more chunks, a larger ``f``); the p99 sees ``spike_s / n*`` for the first ``n*``
    at which those shares, largest gaps first, pass 1 %, and ``n* = K + 1`` where they never do (the chunk gap is
    still checked, as without speculation)."""
    spec = cfg.speculative
    if spec is None:
        return spike_s
    pmf = tokens_pmf(spec)
    chunks = math.ceil(cfg.input_len / cfg.max_num_tokens)
    f = np.minimum(conc * chunks / iterations_per_request(cfg), 1.0)
    n_star = np.zeros(conc.shape)  # 0: not reached yet
    cum = np.zeros(conc.shape)
    for j, p in enumerate(pmf, start=1):  # largest gaps (fewest tokens) first
        cum = cum + f * j * p / spec.mean_tokens_per_step
        n_star = np.where((n_star == 0) & (cum > P99_TAIL), float(j), n_star)
    n_star = np.where(n_star == 0, float(spec.tokens + 1), n_star)
    out: F = spike_s / n_star
    return out


def spec_text(spec: SpecDecode) -> str:
    """``mtp, 3 draft tokens, acceptance 0.85,0.63,0.63 (2.72 tokens per iteration)``."""
    acc = ",".join(f"{a:g}" for a in (spec.acceptance[:1] if len(set(spec.acceptance)) == 1 else spec.acceptance))
    draft = f", draft {spec.draft.name}" if spec.method == "draft" and spec.draft is not None else ""
    return (f"{spec.method}, {spec.tokens} draft tokens{draft}, acceptance {acc} "
            f"({spec.mean_tokens_per_step:.2f} tokens per iteration)")  # fmt: skip


def spec_note(spec: SpecDecode | None, auto: bool, ranked: list[Candidate]) -> str:
    """What the plan did with speculation: applied to every row (a split's decode pool speculates), or compared per
    layout and split (``auto``: how many of the ranked rows run it). Empty without it."""
    if spec is None:
        return ""
    text = spec_text(spec)
    if not auto:
        return (f"speculative decoding {text} on every candidate (screened and simulated with it; a disaggregated "
                "split's decode pool speculates, its prefill pool runs the draft over the prompts)")  # fmt: skip
    colocated = [c for c in ranked if c.mode == "colocated"]
    kept = sum(1 for c in colocated if c.speculative is not None)
    splits = [c for c in ranked if c.mode == "disaggregated"]
    kept_splits = sum(1 for c in splits if c.speculative is not None)
    return (f"speculative decoding auto: each colocated layout and each split screened without and with {text}, both "
            f"ranked (the simulated p99 decides): {kept} of {len(colocated)} ranked colocated rows and {kept_splits} "
            f"of {len(splits)} ranked splits run it")  # fmt: skip
