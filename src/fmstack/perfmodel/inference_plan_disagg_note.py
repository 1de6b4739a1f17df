"""The sentence `plan serve` prints about its disaggregated splits (:func:`split_note`): whether one ranked, and why
it wins or loses against the best colocated row (cost, goodput per GPU). Re-exported by
:mod:`fmstack.perfmodel.inference_plan_disagg`."""

from __future__ import annotations

from fmstack.perfmodel.inference_plan_candidate import Candidate, split_label


def _pd(c: Candidate) -> str:
    if c.heterogeneous:
        return split_label(c)
    return f"{c.prefill_replicas}P:{c.decode_replicas}D tp {c.tp}" + (" attention DP" if c.attention_dp else "")


def split_note(ranked: list[Candidate], qps: float, searched: bool) -> str:
    """Whether a split ranked, and why it wins or loses against the best colocated row (cost, goodput per GPU)."""
    if not searched:
        return "disaggregated splits not searched (--no-disagg)"
    meets = [c for c in ranked if c.meets_slo]
    split = next((c for c in meets if c.mode == "disaggregated"), None)
    co = next((c for c in meets if c.mode == "colocated"), None)
    if split is None:
        tried = [c for c in ranked if c.mode == "disaggregated" and c.sim is not None]
        why = "no split was searched"
        untried = [c for c in ranked if c.mode == "disaggregated"]
        if untried:
            u = untried[0]
            why = (f"none ranked high enough (cost, then GPUs busy) to be simulated; the first, "
                   f"{_pd(u)} {u.precision} {u.instance} "
                   f"(${u.cost_per_hour_usd:,.2f}/h, {u.busy_gpus} GPUs busy), is sized for p99 with a "
                   f"bound on the prefill queue's wait")  # fmt: skip
        if tried:
            t = tried[0]
            why = (f"the cheapest split simulated ({_pd(t)} "
                   f"{t.instance}, ${t.cost_per_hour_usd:,.2f}/h) misses the p99 SLO")  # fmt: skip
        return f"no disaggregated split meets the SLO among the verified candidates: {why}"
    pd = f"{_pd(split)} {split.precision} on {split.instance}"
    if co is None:
        cheaper = [c for c in ranked if c.mode == "colocated" and c.cost_per_hour_usd <= split.cost_per_hour_usd]
        missed = sum(1 for c in cheaper if c.meets_slo is False)
        unsimulated = len(cheaper) - missed  # left once VERIFY_MAX candidates were simulated
        rest = [c.cost_per_hour_usd for c in ranked if c.mode == "colocated" and c not in cheaper]
        return (
            f"the split {pd} (${split.cost_per_hour_usd:,.2f}/h) is the cheapest that meets the p99 SLO: "
            f"{missed} colocated row(s) at or below its cost miss it in simulation"
            + (f", {unsimulated} at or below its cost were not simulated" if unsimulated else "")
            + (f", the next colocated row costs at least ${min(rest):,.2f}/h" if rest else "")
            + "; decode-only replicas keep prompt chunks out of the decode iterations "
            f"({split.concurrency} sequences at {split.mean_itl_s * 1e3:.1f} ms), KV transfer "
            f"{split.kv_transfer_s * 1e3:.1f} ms per request"
        )
    busy_s, busy_c = split.busy_gpus, co.busy_gpus
    key_s, key_c = (split.cost_per_hour_usd, busy_s), (co.cost_per_hour_usd, busy_c)
    verdict = "wins against" if key_s < key_c else ("ties with" if key_s == key_c else "loses against")
    why = (
        "decode-only replicas keep prompt chunks out of the decode iterations, so each holds "
        f"{split.concurrency} sequences at {split.mean_itl_s * 1e3:.1f} ms vs {co.concurrency} colocated at "
        f"{co.mean_itl_s * 1e3:.1f} ms"
    )
    if key_s > key_c:
        why += (f", but {split.prefill_replicas} prefill replica(s) must be paid for and the pools come in whole "
                f"replicas")  # fmt: skip
    elif key_s == key_c:
        why += "; the same cost and GPUs busy either way, so the ranking puts the higher analytic rate per replica first"  # fmt: skip
    return (
        f"the best split, {pd} (${split.cost_per_hour_usd:,.2f}/h, {busy_s} GPUs busy: {qps / busy_s:.3g} req/s per "
        f"GPU within the p99 SLO), {verdict} the best colocated row (${co.cost_per_hour_usd:,.2f}/h, {busy_c} "
        f"GPUs busy: {qps / busy_c:.3g} req/s per GPU): {why}; KV transfer "
        f"{split.kv_transfer_s * 1e3:.1f} ms per request"
    )
