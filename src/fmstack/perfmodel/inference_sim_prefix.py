"""The batching simulation's side of the prefix cache (:class:`fmstack.perfmodel.inference_prefix.PrefixCache`): what a
request reserves at admission, what it shares once its prefill is done, what it gives back when it finishes.

Reference-counted sharing, as vLLM's automatic prefix caching (``vllm/v1/core/kv_cache_manager.py``
``get_computed_blocks`` then ``allocate_slots``; ``block_pool.py`` ``touch`` / ``free_blocks``; docs "Automatic
Prefix Caching") and SGLang's radix cache (``match_prefix`` at scheduling, ``inc_lock_ref`` / ``dec_lock_ref``;
``PrefillAdder`` counts a request's unmatched tokens): the prefix is looked up as the request is admitted (and, on a
miss, again as it gets its first chunk: :func:`late_hit`); on a hit
the request reserves only its own tokens, ``input + output - skip`` with ``skip = min(prefix_len, input - 1)`` (the
last prompt token is computed again on a full hit, as vLLM does), and references the prefix; a prefix no running
request references lives in the pool's free part, so a hit on it also takes its ``prefix_len`` tokens out of the
free part (vLLM: "if a computed block of a request is an eviction candidate (in the free queue and ref_cnt == 0), it
cannot be counted as a free block"); a miss reserves ``input + output``. A miss's prefix becomes the shared entry,
referenced by it, once its prefill completes: ``prefix_len`` tokens of its reservation move to the entry, the free
part unchanged (a prompt no longer than the prefix caches a copy in the free part instead, as before session 17). A
finishing request gives back its own tokens and drops its reference; the prefix's last reference gives back its
tokens too, the prefix then evictable, least recently used first.
"""

from __future__ import annotations

from fmstack.perfmodel.inference_prefix import PrefixCache
from fmstack.perfmodel.inference_session import keys_history
from fmstack.perfmodel.inference_sim_io import SimRequest


def _cached_len(cache: PrefixCache, req: SimRequest, prefix_len: int) -> int:
    """The tokens a hit on ``req``'s key matches: the group's ``prefix_len``, or the length of the session's cached
    history (:mod:`fmstack.perfmodel.inference_session`: a radix match, so a shorter stale history matches less)."""
    return cache.size(req.group) if keys_history(req) else prefix_len


def admission_need(cache: PrefixCache | None, req: SimRequest, prefix_len: int) -> tuple[int, int]:
    """``(tokens the pool's free part must give, prompt tokens a hit skips)`` to admit ``req`` now (no change)."""
    full = req.input_len + req.output_len
    if cache is None or req.group < 0 or req.prefilled != 0 or req.group not in cache:
        return full, 0
    skip = min(_cached_len(cache, req, prefix_len), req.input_len - 1)
    return full - skip + (0 if cache.referenced(req.group) else cache.size(req.group)), skip


def admit_prefix(cache: PrefixCache | None, req: SimRequest, prefix_len: int, *, first_chunk: bool = False) -> None:
    """``req`` is admitted (its :func:`admission_need` taken from the free part): a hit starts it past the prefix
    and references it. The caller then fits the cache into what is left free. A miss looks again at its first chunk
    (:func:`late_hit`, which counts the lookup) unless it gets that chunk now (``first_chunk``: attention DP admits a
    request as it schedules its first chunk)."""
    if cache is None or req.group < 0 or req.prefilled != 0:
        return
    if req.group not in cache:
        cache.lookups += first_chunk
        return
    cache.lookup(req.group)
    skip = min(_cached_len(cache, req, prefix_len), req.input_len - 1)
    cache.acquire(req.group)
    req.prefix_hit, req.prefix_held, req.prefilled, req.kv_shared = True, True, skip, skip
    _note_load(cache, req)


def late_hit(cache: PrefixCache, req: SimRequest, prefix_len: int, free_tokens: float) -> float:
    """``req`` missed at admission and gets its first chunk now: it looks again, as another request's prefill may
    have cached the prefix since (a vLLM or SGLang scheduler matches a prompt as it schedules its first chunk; here a
    request can be admitted, its KV reserved, iterations before its first chunk). A hit moves ``skip`` tokens of its
    reservation to the prefix and references it (its size taken from the free part if no one referenced it; refused,
    a miss, where ``free_tokens`` cannot give the difference); returns the change of the free part."""
    if req.group < 0 or req.prefilled != 0 or req.prefix_held:
        return 0.0
    if req.group not in cache:
        cache.lookups += 1
        return 0.0
    skip = min(_cached_len(cache, req, prefix_len), req.input_len - 1)
    cost = 0 if cache.referenced(req.group) else cache.size(req.group)
    if cost - skip > free_tokens:
        cache.lookups += 1
        return 0.0
    cache.lookup(req.group)
    cache.acquire(req.group)
    req.prefix_hit, req.prefix_held, req.prefilled, req.kv_shared = True, True, skip, skip
    _note_load(cache, req)
    return float(skip - cost)


def _note_load(cache: PrefixCache, req: SimRequest) -> None:
    """A hit that :meth:`PrefixCache.acquire` copied back from the host tier: its tokens and the copy's seconds on
    ``req`` (the caller sets ``req.ready_s``: :func:`delay_first_chunk`)."""
    if cache.loaded_tokens and cache.host is not None:
        req.host_tokens = cache.loaded_tokens
        req.copy_s = cache.host.offload.copy_s(cache.loaded_tokens)


def delay_first_chunk(req: SimRequest, now_s: float) -> bool:
    """After a host-tier hit at ``now_s``: ``req``'s first chunk waits for the copy (True: it does, the caller wakes
    the engine at ``req.ready_s``)."""
    if req.copy_s <= 0 or req.ready_s > 0:
        return False
    req.ready_s = now_s + req.copy_s
    return True


def publish_prefix(cache: PrefixCache, req: SimRequest, prefix_len: int, free_tokens: float) -> None:
    """``req``, a miss, has computed its prompt: its prefix becomes the shared entry (``prefix_len`` of its tokens
    move there) unless another request's already is; a prompt no longer than the prefix caches a copy in the free
    part (``free_tokens``)."""
    if req.group < 0 or req.prefix_hit or keys_history(req):
        return  # a session's history is cached as its turn finishes (inference_session.keep_history)
    if prefix_len <= req.input_len - 1:
        if cache.publish(req.group, prefix_len):
            req.prefix_held, req.kv_shared = True, prefix_len
        return
    cache.insert(req.group, prefix_len, free_tokens)


def release_tokens(cache: PrefixCache | None, req: SimRequest) -> int:
    """The tokens ``req`` gives back to the free part as it finishes: its own, and the prefix's where it held the
    last reference."""
    own = req.input_len + req.output_len - req.kv_shared
    if cache is None or not req.prefix_held:
        return own
    return own + cache.release(req.group)
