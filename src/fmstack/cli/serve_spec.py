"""The speculative-decoding flags of `estimate serve` and `plan serve` (one decorator, one resolver)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from fmstack.catalog.schema import ModelArch
from fmstack.cli.common import choice
from fmstack.errors import InputError
from fmstack.perfmodel.inference_speculative import METHODS, SpecDecode, make_spec

F = TypeVar("F", bound=Callable[..., Any])


def spec_options(auto: bool = False) -> Callable[[F], F]:
    """``--speculative``, ``--spec-tokens``, ``--spec-acceptance``, ``--draft-model`` (``auto``: also the choice
    ``auto``, with and without per candidate)."""
    methods = ("none", *METHODS, *(("auto",) if auto else ()))

    def wrap(f: F) -> F:
        f = click.option("--draft-model", default=None, help="--speculative draft: the draft model (zoo name).")(f)
        f = click.option(
            "--spec-acceptance", default=None,
            help="Conditional acceptance of each draft position, one value or K comma-separated, in (0, 1] "
            "[mtp: 0.85 at the first position, 0.63 later (docs/inference.md); others: required].",
        )(f)  # fmt: skip
        f = click.option("--spec-tokens", type=int, default=None,
                         help="Draft tokens per iteration K, 1..16 [mtp 3, eagle 3, draft 4, ngram 3].")(f)  # fmt: skip
        help_auto = " auto: each candidate with and without MTP, both ranked." if auto else ""
        return click.option("--speculative", type=choice(methods), default="none", show_default=True,
                            help="Speculative decoding: draft K tokens, verify them in one pass." + help_auto)(f)  # fmt: skip

    return wrap


def parse_acceptance(text: str | None) -> list[float] | None:
    """``"0.8"`` or ``"0.9,0.8,0.7"`` -> floats; InputError on anything else."""
    if text is None:
        return None
    try:
        return [float(x) for x in text.split(",")]
    except ValueError:
        raise InputError("spec-acceptance", f"{text!r}: give a number in (0, 1] or K comma-separated ones") from None


def resolve_spec(
    method: str, target: ModelArch, tokens: int | None, acceptance: str | None, draft: str | None, catalog: Any
) -> SpecDecode | None:
    """The flags as a :class:`SpecDecode` (None for ``none``); the draft model looked up in the catalog."""
    method = method.lower()
    if method == "none":
        for flag, value in (("spec-tokens", tokens), ("spec-acceptance", acceptance), ("draft-model", draft)):
            if value is not None:
                raise InputError(flag, f"--{flag} needs --speculative ({', '.join(METHODS)})")
        return None
    draft_arch = catalog.model(draft) if draft is not None else None
    return make_spec(method, target, tokens=tokens, acceptance=parse_acceptance(acceptance), draft=draft_arch)


def resolve_plan_spec(
    method: str, target: ModelArch, tokens: int | None, acceptance: str | None, draft: str | None, catalog: Any
) -> tuple[SpecDecode | None, bool]:
    """`plan serve`'s flags: :func:`resolve_spec`, and ``auto`` as MTP (the one method with a published default
    acceptance) compared per candidate with no speculation: (the spec, whether auto)."""
    if method.lower() != "auto":
        return resolve_spec(method, target, tokens, acceptance, draft, catalog), False
    if target.num_nextn_predict_layers < 1:
        raise InputError(
            "speculative", f"auto compares each candidate with and without MTP; {target.name} has no MTP modules "
            "(num_nextn_predict_layers = 0): name a method (eagle, draft, ngram) with --spec-acceptance",
        )  # fmt: skip
    return resolve_spec("mtp", target, tokens, acceptance, draft, catalog), True


def spec_argv(spec: SpecDecode | None) -> list[str]:
    """The `estimate serve` flags that rebuild ``spec`` exactly (every value written out; none without it)."""
    if spec is None:
        return []
    acc = spec.acceptance[:1] if len(set(spec.acceptance)) == 1 else spec.acceptance
    argv = ["--speculative", spec.method, "--spec-tokens", str(spec.tokens),
            "--spec-acceptance", ",".join(repr(float(a)) for a in acc)]  # fmt: skip
    if spec.method == "draft" and spec.draft is not None:
        argv += ["--draft-model", spec.draft.name]
    return argv
