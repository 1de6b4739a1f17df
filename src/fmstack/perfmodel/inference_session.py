"""Multi-turn sessions (chat, agents) as a serving workload: :class:`SessionWorkload`, and the prefix cache's side of
a session's history (:func:`keep_history`).

A session is ``turns`` requests. Turn 1's prompt is ``input_len`` new tokens (which may start with a shared system
prefix, :class:`fmstack.perfmodel.inference_prefix.PrefixWorkload`); turn ``t + 1`` arrives a think time after turn
``t``'s last token (exponential, mean ``think_time_s``) and its prompt is the conversation so far, every earlier
prompt's new tokens and every earlier output, plus ``input_len`` new tokens: ``(t - 1) x (input + output) + input``
at the mean lengths, as a chat front-end resends the whole conversation (OpenAI chat completions are stateless; the
``messages`` list grows by the last answer and the new user message). Mooncake's traces (Qin et al. 2025, FAST '25)
and SGLang's multi-turn benchmark (RadixAttention, Zheng et al. 2024, sec. 6) are this shape. A conversation longer
than the model's context is refused (:func:`check_context`), not truncated.

The engine keeps the turn's KV (its prompt and its generated tokens: vLLM caches the full blocks of decoded tokens
too, ``cache_blocks`` as tokens are appended; SGLang's radix cache inserts the finished request's whole sequence,
``cache_finished_req``) as the session's history, evictable least recently used once no request holds it: one entry
of the replica's (attention-DP rank's) :class:`~fmstack.perfmodel.inference_prefix.PrefixCache`, keyed by the
session (:func:`session_key`), ``input + output`` tokens long. The next turn on that replica hits it (radix match:
the longest cached prefix, so a stale shorter history from an earlier turn there is a partial hit); on another
replica it misses and recomputes the history. Simplifications: a session's history entry does not share its system
prefix with the group's entry (both are counted); the history is cached as the turn finishes, not block by block.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fmstack.errors import InputError

if TYPE_CHECKING:  # inference_sim_io imports this module (SimConfig.sessions)
    from fmstack.perfmodel.inference_prefix import PrefixCache
    from fmstack.perfmodel.inference_sim_io import SimRequest

SESSION_KEY0 = 1 << 40
"""Session ``s``'s history is cache key ``SESSION_KEY0 + s``, above any prefix group (0 .. groups - 1)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionWorkload:
    """Sessions of ``turns`` requests, each after a think time of mean ``think_time_s`` (``--turns``,
    ``--think-time-s``)."""

    turns: int
    """Requests per session (1: independent requests, today's workload)."""
    think_time_s: float = 0.0
    """Mean seconds from a turn's last token to the next turn's arrival (exponential; 0: at once)."""

    def __post_init__(self) -> None:
        if self.turns < 1:
            raise InputError("turns", f"must be >= 1, got {self.turns}")
        if not (math.isfinite(self.think_time_s) and self.think_time_s >= 0):
            raise InputError("think-time-s", f"must be a finite number of seconds >= 0, got {self.think_time_s}")

    def max_prompt_tokens(self, input_len: int, output_len: int) -> int:
        """The last turn's prompt at the mean lengths: ``(turns - 1) x (input + output) + input``."""
        return (self.turns - 1) * (input_len + output_len) + input_len


def session_key(session: int) -> int:
    """The cache key of session ``session``'s history."""
    return SESSION_KEY0 + session


def is_session_key(key: int) -> bool:
    """Whether cache key ``key`` is a session's history (not a prefix group)."""
    return key >= SESSION_KEY0


def keys_history(req: SimRequest) -> bool:
    """Whether ``req`` is a session's turn whose cache key is its session's history (its hit matches the cached
    history's length, not a prefix group's)."""
    return req.session >= 0 and is_session_key(req.group)


def check_context(sessions: SessionWorkload, input_len: int, output_len: int, max_seq_len: int) -> None:
    """Refuse a session whose whole conversation, ``turns x (input + output)`` tokens, exceeds the model's context
    (one line, exit 2): the workload would be truncated by a chat front-end, which is not modelled."""
    need = sessions.turns * (input_len + output_len)
    if need > max_seq_len:
        raise InputError(
            "turns", f"{sessions.turns} turns x ({input_len} + {output_len}) tokens = {need} exceed the model's "
            f"context of {max_seq_len} tokens; use fewer turns or shorter turns",
        )  # fmt: skip


def keep_history(cache: PrefixCache, req: SimRequest, free_tokens: float) -> None:
    """Turn ``req`` of a session has finished (its tokens, and any entry it held, back in the free part
    ``free_tokens``): its whole sequence, ``input + output`` tokens, stays cached as the session's history, the most
    recently used entry, replacing any shorter one of the session (LRU entries evicted to make room)."""
    cache.store(session_key(req.session), req.input_len + req.output_len, free_tokens)
