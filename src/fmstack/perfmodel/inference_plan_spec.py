"""Speculative decoding in `plan serve`: which variants each colocated layout is screened with, which one it keeps,
and the sentence the plan prints about it.

The spec (:class:`fmstack.perfmodel.inference_speculative.SpecDecode`) rides on each candidate's
:class:`fmstack.perfmodel.inference.ServeConfig` (``speculative``), so the analytic screening
(:func:`fmstack.perfmodel.inference.serve_curve`), the p99 simulation (``Deployment.spec``) and the row's
`estimate serve` command all price the same deployment. Splits are not searched with speculation: `estimate serve`
refuses it there (the disaggregated pools do not model it), so a plan with ``--speculative METHOD`` ranks colocated
rows only; ``--speculative auto`` screens each colocated layout with and without the method and ranks both (the
analytic screening prices means, where speculation always looks better; the simulated p99 decides, and a rejected
draft leaves a whole iteration as one token's gap), and searches the splits without it.
"""

from __future__ import annotations

from fmstack.errors import InputError
from fmstack.perfmodel.inference_plan_candidate import Candidate
from fmstack.perfmodel.inference_speculative import SpecDecode


def spec_variants(spec: SpecDecode | None, auto: bool) -> tuple[SpecDecode | None, ...]:
    """The speculation each colocated layout is screened with: none, ``spec``, or both (``auto``)."""
    if auto and spec is None:
        raise InputError("speculative", "auto compares each candidate with and without a method: none was given")
    if spec is None:
        return (None,)
    return (None, spec) if auto else (spec,)


def searches_splits(spec: SpecDecode | None, auto: bool) -> bool:
    """Splits are searched without speculation: with none asked, or under ``auto`` (the "without" half)."""
    return spec is None or auto


def spec_text(spec: SpecDecode) -> str:
    """``mtp, 3 draft tokens, acceptance 0.85 (3.19 tokens per iteration)``."""
    acc = ",".join(f"{a:g}" for a in (spec.acceptance[:1] if len(set(spec.acceptance)) == 1 else spec.acceptance))
    draft = f", draft {spec.draft.name}" if spec.method == "draft" and spec.draft is not None else ""
    return (f"{spec.method}, {spec.tokens} draft tokens{draft}, acceptance {acc} "
            f"({spec.mean_tokens_per_step:.2f} tokens per iteration)")  # fmt: skip


def spec_note(spec: SpecDecode | None, auto: bool, ranked: list[Candidate]) -> str:
    """What the plan did with speculation: applied to every colocated row, or compared per layout (``auto``:
    how many of the ranked colocated rows run it); splits skipped or searched without it. Empty without it."""
    if spec is None:
        return ""
    text = spec_text(spec)
    if not auto:
        return (f"speculative decoding {text} on every colocated candidate (screened and simulated with it); "
                "disaggregated splits not searched: speculative decoding is modelled for colocated replicas only")  # fmt: skip
    colocated = [c for c in ranked if c.mode == "colocated"]
    kept = sum(1 for c in colocated if c.speculative is not None)
    return (f"speculative decoding auto: each colocated layout screened without and with {text}, both ranked (the "
            f"simulated p99 decides): {kept} of {len(colocated)} ranked colocated rows run it; splits searched "
            "without it")  # fmt: skip
