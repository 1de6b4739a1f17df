"""Speculative decoding: a cheap draft proposes ``k`` tokens, the target model verifies them in one forward pass.

Each decode iteration runs ``k`` draft passes and one target pass over ``k + 1`` tokens per sequence (the last
accepted token and the ``k`` drafts); the longest prefix of drafts the target agrees with is kept, plus the
target's own next token (the "bonus" token), so an iteration emits 1 .. k + 1 tokens (Leviathan et al. 2023, "Fast
Inference from Transformers via Speculative Decoding", ICML, sec. 3; Chen et al. 2023, arXiv 2302.01318). With a
conditional acceptance ``a_i`` at draft position ``i`` (accepted given that every earlier draft was), the expected
tokens per iteration are ``1 + sum_{i=1..k} prod_{j<=i} a_j``; for i.i.d. acceptance ``a`` this is Leviathan et
al.'s Eq. (1), ``(1 - a^(k+1)) / (1 - a)``.

Drafts (what one draft pass costs, priced by :func:`fmstack.perfmodel.inference_step.step_time` on the draft's own
:class:`Deployment`, without a second scheduler overhead: the passes run inside the target's iteration, in one CUDA
graph in TensorRT-LLM):

- ``mtp``: DeepSeek-V3's multi-token-prediction module (technical report arXiv 2412.19437, sec. 2.2: one
  transformer block, MoE for DeepSeek, and a 2h x h projection, sharing the embedding and the output head), reused
  for every draft position ("MTP Eagle", the default path of TensorRT-LLM for DeepSeek-V3/R1: tech blog 2,
  docs/source/blogs/tech_blog/blog2_DeepSeek_R1_MTP_Implementation_and_Optimization.md, NVIDIA/TensorRT-LLM at
  000a01de66f0eab4ab05640711f0253f50f5209c). Priced as a one-layer copy of the target (its LM head included).
- ``eagle``: an EAGLE-3 draft head (Li et al. 2025, arXiv 2503.01840): one dense decoder layer of the target's width
  and an LM head; priced as a one-layer dense copy of the target.
- ``draft``: a smaller model of the zoo, one decode step per draft token.
- ``ngram``: prompt-lookup drafts, no GPU work.

Default acceptance (chain drafts), ``mtp``: 0.85 at the first draft position, the low end of DeepSeek-V3's measured
85-90 % acceptance of the second token (technical report sec. 5.4.3; SGLang's MTP pull request 3582,
sgl-project/sglang, reports ~1.9 accepted tokens for one draft, ~0.9); 0.63 at every later position, where the one
module trained one token ahead is reused on its own drafts. 0.63 (0.6286 to two digits) is what makes a 7-draft chain
emit 3.20 tokens per iteration (``1 + 0.85 * sum_{i<7} b^i``; 3.207 at 0.63), the mean acceptance length Nebius
measured for DeepSeek-V3-0324's original MTP module reused for 7 drafts (model card of nebius/MTP-DeepSeek-V3-0324,
"Original MTP", temperature 0, MT-Bench / HumanEval / GSM8K; the card says the reused module's acceptance degrades at
later positions). With K = 3 this gives 2.72 tokens per iteration (i.i.d. 0.85 gave 3.19). No default is given for the
others: their acceptance depends on the draft and the data; ``--spec-acceptance`` names it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from fmstack.catalog.schema import ModelArch
from fmstack.errors import InputError

METHODS = ("mtp", "eagle", "draft", "ngram")
DEFAULT_TOKENS = {"mtp": 3, "eagle": 3, "draft": 4, "ngram": 3}
"""Draft tokens per iteration by default: ``mtp`` 3, TensorRT-LLM tech blog 2 (best min-latency at next-n 3 on
8 B200s); ``eagle`` 3 and ``ngram`` 3 (SGLang's ``--speculative-num-steps 3`` examples); ``draft`` 4 (Leviathan et
al. 2023's experiments use gamma 3-7)."""
DEFAULT_ACCEPTANCE = {"mtp": (0.85, 0.63)}
"""Conditional acceptance by default: (first draft position, every later one); module docstring for the sources."""
MAX_TOKENS = 16


@dataclass(frozen=True, kw_only=True, slots=True)
class SpecDecode:
    """How a replica speculates: the method, ``tokens`` drafts per iteration and their acceptance."""

    method: str
    tokens: int
    """Draft tokens per iteration, ``k``."""
    acceptance: tuple[float, ...]
    """Conditional acceptance of each draft position (``k`` values)."""
    draft: ModelArch | None = None
    """The draft model (``draft``: a zoo model; ``mtp`` / ``eagle``: derived from the target; ``ngram``: None)."""

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise InputError("speculative", f"{self.method!r} unknown; allowed: none, {', '.join(METHODS)}")
        if not 1 <= self.tokens <= MAX_TOKENS:
            raise InputError("spec-tokens", f"must be in 1..{MAX_TOKENS}, got {self.tokens}")
        if len(self.acceptance) != self.tokens:
            raise InputError(
                "spec-acceptance",
                f"{len(self.acceptance)} values for {self.tokens} draft tokens: give one or {self.tokens}",
            )
        for a in self.acceptance:
            if not (math.isfinite(a) and 0.0 < a <= 1.0):
                raise InputError("spec-acceptance", f"must be in (0, 1], got {a}")

    @property
    def mean_tokens_per_step(self) -> float:
        """Expected tokens one iteration emits per sequence (:func:`expected_tokens`)."""
        return expected_tokens(self.acceptance)


def expected_tokens(acceptance: Sequence[float]) -> float:
    """``1 + sum_i prod_{j<=i} a_j``: the bonus token plus each draft, kept when it and every earlier one are
    accepted (Leviathan et al. 2023, Eq. 1 for equal ``a_j``)."""
    return 1.0 + float(np.sum(np.cumprod(np.asarray(acceptance, dtype=np.float64))))


def iid_expected_tokens(a: float, k: int) -> float:
    """Leviathan et al. 2023, Eq. (1): ``(1 - a^(k+1)) / (1 - a)`` (``k + 1`` at ``a = 1``)."""
    return float(k + 1) if a == 1.0 else (1.0 - a ** (k + 1)) / (1.0 - a)


def draw_tokens(rng: np.random.Generator, acceptance: Sequence[float], n: int) -> NDArray[np.int64]:
    """Tokens emitted by ``n`` sequences in one iteration: 1 + the run of accepted drafts, each position a Bernoulli
    draw given the earlier ones (one uniform per position and sequence from the run's generator)."""
    u = rng.random((n, len(acceptance)))
    ok = u < np.asarray(acceptance, dtype=np.float64)
    out: NDArray[np.int64] = 1 + np.cumprod(ok, axis=1).sum(axis=1).astype(np.int64)
    return out


def draft_model(method: str, target: ModelArch, draft: ModelArch | None) -> ModelArch | None:
    """The model one draft pass runs: a one-layer copy of the target (``mtp``: its MoE block; ``eagle``: a dense
    decoder layer), the given draft model (``draft``), or none (``ngram``)."""
    if method == "mtp":
        moe = target.moe.model_copy(update={"first_dense_layers": 0}) if target.moe is not None else None
        return target.model_copy(update={"name": f"{target.name}-mtp", "num_layers": 1, "moe": moe})
    if method == "eagle":
        ffn = target.moe.dense_ffn_hidden_size if target.moe is not None else None
        return target.model_copy(
            update={
                "name": f"{target.name}-eagle",
                "num_layers": 1,
                "moe": None,
                "ffn_hidden_size": ffn or target.ffn_hidden_size,
            }
        )
    return draft if method == "draft" else None


def default_acceptance(method: str, k: int) -> tuple[float, ...]:
    """The default conditional acceptance of ``k`` draft positions (:data:`DEFAULT_ACCEPTANCE`)."""
    first, later = DEFAULT_ACCEPTANCE[method]
    return (first, *(later,) * (k - 1))


def make_spec(
    method: str,
    target: ModelArch,
    *,
    tokens: int | None = None,
    acceptance: Sequence[float] | None = None,
    draft: ModelArch | None = None,
) -> SpecDecode | None:
    """Resolve the user's choices into a :class:`SpecDecode` (None for ``none``); InputError names the field."""
    if method == "none":
        return None
    if method not in METHODS:
        raise InputError("speculative", f"{method!r} unknown; allowed: none, {', '.join(METHODS)}")
    k = DEFAULT_TOKENS[method] if tokens is None else tokens
    if not 1 <= k <= MAX_TOKENS:
        raise InputError("spec-tokens", f"must be in 1..{MAX_TOKENS}, got {k}")
    if method == "mtp" and target.num_nextn_predict_layers < 1:
        raise InputError(
            "speculative", f"mtp needs multi-token-prediction modules; {target.name} has none "
            "(num_nextn_predict_layers = 0); use eagle, draft or ngram",
        )  # fmt: skip
    if method == "draft":
        if draft is None:
            raise InputError("draft-model", "--speculative draft needs --draft-model NAME (a model of the zoo)")
        if draft.vocab_size != target.vocab_size:
            raise InputError(
                "draft-model", f"{draft.name}'s vocabulary ({draft.vocab_size}) differs from {target.name}'s "
                f"({target.vocab_size}): a draft must share the target's tokenizer",
            )  # fmt: skip
    elif draft is not None:
        raise InputError("draft-model", f"only with --speculative draft, not {method}")
    if acceptance is None or len(acceptance) == 0:
        if method not in DEFAULT_ACCEPTANCE:
            raise InputError(
                "spec-acceptance", f"{method} has no published default acceptance fmstack uses (it depends on the "
                "draft and the data); give --spec-acceptance A (conditional, in (0, 1]) or one value per position",
            )  # fmt: skip
        acc: tuple[float, ...] = default_acceptance(method, k)
    elif len(acceptance) == 1:
        acc = (float(acceptance[0]),) * k
    else:
        acc = tuple(float(a) for a in acceptance)
    return SpecDecode(method=method, tokens=k, acceptance=acc, draft=draft_model(method, target, draft))
