"""The prefill pool's prefix caches in a disaggregated split (:class:`fmstack.perfmodel.inference_sim_disagg.DisaggSim`
with a shared-prefix workload, ``SimConfig.prefix``).

As in NVIDIA Dynamo's disaggregated serving and SGLang's PD disaggregation, each prefill worker keeps its own prefix
cache (vLLM's automatic prefix caching, SGLang's radix cache) in the KV memory it holds, computes only a prompt's
uncached tokens, and still sends the whole prompt's KV to the decode worker (Dynamo RFC ai-dynamo/dynamo discussion
#7861, "Prefix-Aware Delta KV Cache Transfer": "Currently, Dynamo's disagg mode transfers all KV cache for every
request"): a hit removes prefill work, never transfer time.

Pool: a prefill replica's KV pool is the colocated replica's of the same layout
(:class:`fmstack.perfmodel.inference_sim.BatchingSim`: ``max_concurrency x (input + output)`` tokens; the same engine
and memory fraction on the prefill worker). It holds the prompts it has taken and not yet moved to a decode replica
(their own tokens: ``input - skip``), the prefixes they reference, and in the rest, its free part, the unreferenced
prefixes, evicted least recently used first: the reference counts of
:class:`fmstack.perfmodel.inference_prefix.PrefixCache` and :mod:`fmstack.perfmodel.inference_sim_prefix` with a
prompt's reservation instead of a sequence's. A prompt looks its prefix up as the replica takes it (its first chunk:
a replica takes a prompt only with budget for it); a miss's prefix becomes the shared entry as its prefill completes;
a prompt drops its reference when its KV transfer ends. A prompt is never refused for memory (the pool holds many
prompts: Llama 3.1 70B fp8 on H100s, 1,384,704 tokens at TP 4, 46,080 at TP 1, against a few 2,048-token prompts
in flight); with the pool
overcommitted, the free part is 0 and every unreferenced prefix is evicted.

Host tier (``SimConfig.kv_offload``, session 20): each prefill replica's cache has its own host-memory tier, as a
colocated replica's (:mod:`fmstack.perfmodel.inference_prefix_offload`: an entry the GPU cache evicts moves there; a
hit there is copied back over the host-to-device links before the prompt's first chunk, the other prompts' iterations
running meanwhile). The KV then moves to the decode replica whole, as without it.

Routing (``SimConfig.router``): round-robin, random, least-loaded and power-of-two keep the split's one global
prefill queue that idle prefill replicas pull from (Dynamo's older ``PrefillQueue``; blind to the caches, each group
lands on every prefill replica); ``cache-aware`` and ``kv`` pick a prefill replica at arrival with the colocated routers
(:class:`fmstack.perfmodel.inference_router.Router`: SGLang's cache-aware policy over the prefill workers' loads,
requests routed and not yet moved; Dynamo's KV router, whose prefill router picks the prefill worker by the overlap
and the prefill blocks alone, Dynamo v0.9.1 design doc "Architecture Flow", step S3, and v1.3.0 docs "Disaggregated
Serving": ``track_active_blocks=false``), and each prefill replica serves its own queue first come first served.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from fmstack.errors import InputError
from fmstack.perfmodel.inference import ServeConfig, max_concurrency
from fmstack.perfmodel.inference_prefix import PrefixCache, PrefixWorkload
from fmstack.perfmodel.inference_prefix_offload import HostTier
from fmstack.perfmodel.inference_router import ROUTERS_AFFINITY, Router
from fmstack.perfmodel.inference_sim_fleet import GROUP_STREAM, ROUTER_STREAM
from fmstack.perfmodel.inference_sim_io import SimConfig, SimRequest
from fmstack.perfmodel.inference_sim_prefix import admission_need, admit_prefix, publish_prefix, release_tokens
from fmstack.perfmodel.inference_step import Deployment


class PrefillPrefix:
    """The prefill replicas' prefix caches, pools and (with an affinity router) their router and queues."""

    def __init__(self, d: Deployment, cfg: ServeConfig, sim: SimConfig, prefill_replicas: int) -> None:
        prefix = sim.prefix
        if prefix is None:
            raise ValueError("PrefillPrefix needs SimConfig.prefix")
        if prefix.prefix_len >= cfg.input_len:
            raise InputError("prefix-len", f"must be below --input-len ({cfg.input_len}), got {prefix.prefix_len}")
        if cfg.prefix_hit_rate > 0:
            raise InputError("prefix-hit-rate", "give either a scalar --prefix-hit-rate or a --prefix-groups workload")
        if d.attention_dp:
            raise InputError("prefix-groups", "a shared-prefix workload is not simulated in an attention-DP prefill "
                             "pool of a split (each rank would cache its own); use a prefill pool without attention DP")  # fmt: skip
        self.workload: PrefixWorkload = prefix
        self._setup(d, cfg, sim, prefill_replicas, prefix.prefix_len, routed=sim.router in ROUTERS_AFFINITY)

    def _setup(
        self, d: Deployment, cfg: ServeConfig, sim: SimConfig, prefill_replicas: int, prefix_len: int, *, routed: bool
    ) -> None:
        """The pools, caches, router and queues of ``prefill_replicas`` prefill replicas (shared with
        :class:`~fmstack.perfmodel.inference_sim_disagg_session.PrefillSessions`)."""
        self.prefix_len = prefix_len
        self.pool_tokens = float(max_concurrency(d, replace(cfg, max_batch=None)) * (cfg.input_len + cfg.output_len))
        """One prefill replica's KV pool in tokens (the colocated replica's of this layout)."""
        self.free_tokens = [self.pool_tokens] * prefill_replicas
        """Each prefill replica's free part: the pool less the prompts held and the prefixes they reference."""
        off = sim.kv_offload  # a host-memory tier under each prefill replica's cache (inference_prefix_offload)
        self.caches = [PrefixCache(None if off is None else HostTier(off)) for _ in range(prefill_replicas)]
        self.routed = routed
        """True: a router picks the prefill replica at arrival (own queues); False: the one global queue."""
        self.router = Router(name=sim.router, replicas=prefill_replicas,
                             rng=np.random.default_rng([sim.seed, ROUTER_STREAM]), kv_config=sim.kv_router)  # fmt: skip
        if self.router.kv is not None:  # Dynamo's prefill router, its counts kept as prompts are computed
            self.router.kv.watch_prompts()
        self.queues: list[list[int]] = [[] for _ in range(prefill_replicas)]
        """Routed: each prefill replica's prompts not yet taken, in arrival order."""
        self.load = [0] * prefill_replicas
        """Routed: each prefill replica's requests routed and not yet moved (the cache-aware router's load)."""
        self.holder: dict[int, int] = {}
        """Request -> the prefill replica holding its prompt's KV (taken, not yet moved)."""
        self._seed = sim.seed

    def groups(self, n: int) -> list[int]:
        """The ``n`` requests' groups, from their own generator (the lengths stay those of the run without them, as
        in :func:`fmstack.perfmodel.inference_sim_fleet.run_fleet`)."""
        return [int(g) for g in self.workload.draw(np.random.default_rng([self._seed, GROUP_STREAM]), n)]

    def route(self, req: SimRequest) -> int:
        """The prefill replica for arriving ``req`` (an affinity router; every earlier event already taken)."""
        if self.router.kv is not None:
            p = self.router.kv.pick(req, self.caches, self.prefix_len)
        else:
            p = self.router.pick(self.load, req.group, self.prefix_len, req.input_len)
        self.load[p] += 1
        return p

    def take(self, p: int, req: SimRequest) -> None:
        """Prefill replica ``p`` takes ``req`` (its first chunk now): a hit starts it past the prefix; its prompt's
        own tokens (and an unreferenced prefix it now references) leave the free part, the LRU prefixes fit what is
        left."""
        cache = self.caches[p]
        need = admission_need(cache, req, self.prefix_len)[0] - req.output_len
        admit_prefix(cache, req, self.prefix_len, first_chunk=True)
        self.free_tokens[p] -= need
        cache.fit(max(0.0, self.free_tokens[p]))
        self.holder[req.rid] = p

    def computed(self, p: int, req: SimRequest) -> None:
        """``req``'s prompt is computed on ``p``: it leaves the KV router's counts
        (:meth:`~fmstack.perfmodel.inference_router_kv.KvRouter.prompt_done`), then :meth:`prefilled`."""
        if self.router.kv is not None:
            self.router.kv.prompt_done(req)
        self.prefilled(p, req)

    def prefilled(self, p: int, req: SimRequest) -> None:
        """``req``'s prompt is computed on ``p``: a miss's prefix becomes the shared entry, referenced by it."""
        publish_prefix(self.caches[p], req, self.prefix_len, max(0.0, self.free_tokens[p]))

    def moved(self, req: SimRequest) -> None:
        """``req``'s KV has reached its decode replica: its prompt's tokens and its prefix reference go back."""
        p = self.holder.pop(req.rid)
        self.free_tokens[p] += release_tokens(self.caches[p], req) - req.output_len
        if self.routed:
            self.load[p] -= 1


def hit_rates(requests: list[SimRequest], prefix_len: int) -> tuple[float, float]:
    """(requests whose prefix (or session's history) was cached when a prefill replica took them, prompt tokens served
    from the caches over all prompt tokens) of ``requests``; nan without any."""
    if not requests:
        return math.nan, math.nan
    hit = sum(q.prefix_hit for q in requests) / len(requests)
    tokens = sum(q.kv_shared for q in requests if q.prefix_hit)  # a hit skips min(prefix_len, input - 1) or a history
    return hit, tokens / sum(q.input_len for q in requests)
