"""Speculative decoding in disaggregated serving: what each pool runs, priced with the colocated machinery.

- The decode pool speculates as a colocated replica does: its :class:`~fmstack.perfmodel.inference_step.Deployment`
  carries the whole :class:`~fmstack.perfmodel.inference_speculative.SpecDecode`, so a decode-only iteration is
  :func:`~fmstack.perfmodel.inference_step.step_time`'s verify pass over ``k + 1`` tokens per sequence plus its ``k``
  draft passes, emits :attr:`SpecDecode.mean_tokens_per_step` tokens per sequence on average, and the draft's
  weights and KV cache come off the pool's memory (:func:`fmstack.perfmodel.inference_config.memory_of`).
- The prefill pool runs the draft once over each prompt: the draft needs its own KV cache of the prompt, and its
  first proposal comes from the prompt's last hidden state (SGLang launches both roles with the same
  ``--speculative-algo``, sgl-project/sglang issue 6684; the prefill role runs the draft's extend pass and sends the
  hidden states with the KV cache, pull requests 7242 and 9976). Priced as a one-draft-token speculation on a
  prefill-only iteration (:func:`prefill_spec`): no decode sequence, so no verify tokens, and
  :func:`~fmstack.perfmodel.inference_step.draft_time`'s first pass, the prompt's tokens through the draft (MTP and
  EAGLE: one layer). The prefill replica holds the draft's weights too.
- The KV transfer carries the draft's KV layers with the target's (:func:`draft_kv_bytes_per_token`).
- ``ngram`` (prompt lookup) has no draft model: no draft work and no draft KV anywhere; the decode pool verifies.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from numpy.typing import NDArray

from fmstack.perfmodel.inference_config import ServeConfig
from fmstack.perfmodel.inference_kv import KV_BYTES, kv_bytes_per_token
from fmstack.perfmodel.inference_sim_io import SimRequest
from fmstack.perfmodel.inference_speculative import SpecDecode, draw_tokens
from fmstack.perfmodel.inference_step import Deployment


def prefill_spec(spec: SpecDecode | None) -> SpecDecode | None:
    """The prefill pool's share of ``spec``: one draft pass over the prompt (a one-draft-token spec: on a
    prefill-only iteration :func:`~fmstack.perfmodel.inference_step.draft_time` is then that pass alone); None
    without speculation or without a draft model (``ngram``)."""
    if spec is None or spec.draft is None:
        return None
    return replace(spec, tokens=1, acceptance=spec.acceptance[:1])


def prefill_deployment(d: Deployment) -> Deployment:
    """``d`` as a prefill replica: its speculation cut to :func:`prefill_spec` (``d`` itself without one)."""
    spec = prefill_spec(d.spec)
    return d if spec == d.spec else replace(d, spec=spec)


def tokens_per_iteration(d: Deployment) -> float:
    """Output tokens one decode iteration of ``d`` emits per sequence on average: 1, or
    :attr:`SpecDecode.mean_tokens_per_step`."""
    return 1.0 if d.spec is None else d.spec.mean_tokens_per_step


def draft_kv_bytes_per_token(cfg: ServeConfig) -> float:
    """Bytes of the draft's KV cache per token, all its layers and heads (0 without a draft model): moved with the
    target's from the prefill to the decode pool."""
    draft = cfg.speculative.draft if cfg.speculative is not None else None
    return 0.0 if draft is None else float(kv_bytes_per_token(draft, KV_BYTES[cfg.kv]))


def pools_text(spec: SpecDecode | None) -> str | None:
    """Which pool speculates, in words (None without speculation)."""
    if spec is None:
        return None
    prefill = (
        "the prefill pool runs the draft once over each prompt and sends the draft's KV cache with the target's"
        if spec.draft is not None
        else "the prefill pool runs no draft (n-gram lookup needs none)"
    )
    return f"the decode pool speculates ({spec.method}, {spec.tokens} draft tokens, verified in one pass); {prefill}"


def draw(rng: np.random.Generator, d: Deployment, n: int) -> NDArray[np.int64] | None:
    """Tokens each of ``n`` decode sequences emits this iteration (:func:`draw_tokens` from the run's generator, as
    the colocated simulation draws them); None without speculation (one each, nothing drawn)."""
    return None if d.spec is None or n == 0 else draw_tokens(rng, d.spec.acceptance, n)


def emit_step(req: SimRequest, now_s: float, drawn: NDArray[np.int64] | None, i: int) -> int:
    """The tokens ``req``, the iteration's ``i``-th decode sequence, emits at ``now_s``: one (``drawn`` None: no
    speculation) or its draw (:meth:`SimRequest.emit_tokens`); how many."""
    return req.emit_tokens(now_s, 1 if drawn is None else int(drawn[i]))
