"""The largest batch one training or RL step may have, and the check every entry point shares.

Before session 20 nothing bounded it: ``estimate train --micro-batch 10^30`` printed a memory total of 3.8e31 GiB
("memory does NOT fit"), and ``plan train --global-batch 10^30`` ranked a row printed as
``gb1000000000000000019884624838656``: the planner's float64 columns had rounded the batch, so the command it
printed to reproduce the row asked for another batch.
"""

from __future__ import annotations

import math

from fmstack.errors import InputError

MAX_BATCH_SEQUENCES = 1 << 24
"""Sequences in one step (training's global batch, an RL step's prompts x samples): 16,777,216 (2^24). The largest
published batches are 65,536 sequences (LAMB on BERT, You et al. 2020, ICLR, table 1) and 15,360 (DeepSeek-V3,
arXiv:2412.19437 sec. 4.2), so this is 256 times past any run; and tokens per step stay below 2^53, exact in the
planner's float64 columns, for any sequence up to 4 x a 10M-token context (the catalog's longest context is 131,072:
a training sequence may go 4 x past its model's, ``config.MAX_SEQ_LEN_FACTOR``)."""


def check_batch(field: str, sequences: int, what: str = "sequences per step") -> None:
    """Refuse a batch (or a part of one: a micro-batch, the prompts of an RL step) over
    :data:`MAX_BATCH_SEQUENCES`; ``field`` is the flag or config field that gave it."""
    if sequences > MAX_BATCH_SEQUENCES:
        raise InputError(
            field,
            f"{sequences:,} {what}; allowed: at most {MAX_BATCH_SEQUENCES:,} (2^24), 256 x the largest published "
            "batch (65,536 sequences), so that tokens per step stay finite and exact",
        )


MAX_TRAIN_TOKENS = 1e16
"""Tokens one training run may be planned for: 10^16, about 640 x Llama 3's 15.6 trillion (Dubey et al. 2024,
arXiv:2407.21783, sec. 3.1) and past any published run; beyond it a run's days (1e30 tokens: ~1e20 days) mean
nothing. Before session 20 any finite positive count was taken."""


def check_tokens(tokens: float) -> None:
    """Refuse a training token count that is not finite, not positive, or over :data:`MAX_TRAIN_TOKENS`."""
    if not math.isfinite(tokens) or tokens <= 0:  # nan <= 0 is False: nan would pass a bare comparison
        raise InputError("tokens", f"must be > 0 and finite, got {tokens:g}")
    if tokens > MAX_TRAIN_TOKENS:
        raise InputError("tokens", f"{tokens:g} tokens; allowed: at most {MAX_TRAIN_TOKENS:g}, about 640 x the "
                         "15.6 trillion Llama 3 405B was trained on")  # fmt: skip
