"""KV-pool admission for the batching simulation (:class:`fmstack.perfmodel.inference_sim.BatchingSim`): waiting
requests move to running first come, first served while the sequence limit and the paged KV pool allow (vLLM's
scheduler, Kwon et al. 2023, sec. 4.5: a request reserves the KV of its full length), a prefix-cache hit reserving
only what it does not share (:mod:`fmstack.perfmodel.inference_sim_prefix`), and the per-rank prefix caches with
their host-memory tier (:mod:`fmstack.perfmodel.inference_prefix_offload`) that a router looks at.
"""

from __future__ import annotations

from fmstack.errors import InputError
from fmstack.perfmodel.inference_prefix import AnyRank, PrefixCache
from fmstack.perfmodel.inference_prefix_offload import HostTier
from fmstack.perfmodel.inference_sim_io import SimConfig
from fmstack.perfmodel.inference_sim_prefix import admission_need, admit_prefix, delay_first_chunk
from fmstack.perfmodel.inference_sim_stretch import Stretches


class KvAdmission(Stretches):
    """The KV-admission half of :class:`fmstack.perfmodel.inference_sim.BatchingSim`, which sets the state below."""

    sim: SimConfig
    _waiting: list[int]
    _running: list[int]
    _max_seqs: int
    _kv_tokens_free: float
    """The free KV pool (all ranks'), in tokens."""
    _kv_pool_tokens: float
    prefix_caches: list[PrefixCache]
    """Each rank's prefix cache (empty: none)."""
    prefix_len: int

    @property
    def kv_pool_tokens(self) -> float:
        """The KV pool one sequence must fit in (a rank's under attention DP)."""
        return self._kv_pool_tokens

    def use_prefix_cache(self, prefix_len: int) -> None:
        """Serve a shared-prefix workload of ``prefix_len``-token prefixes: an empty cache per rank."""
        off = self.sim.kv_offload
        if off is not None and self.ranks > 1:
            raise InputError("kv-offload-gib", "the host-memory KV tier is not simulated under attention DP")
        host = None if off is None else HostTier(off)
        self.prefix_caches, self.prefix_len = [PrefixCache(host) for _ in range(self.ranks)], prefix_len

    @property
    def prefix_cache(self) -> PrefixCache | AnyRank | None:
        """The prefixes cached here as a router sees them (attention DP: in any rank's cache); None: no cache."""
        if not self.prefix_caches:
            return None
        return self.prefix_caches[0] if self.ranks == 1 else AnyRank(self.prefix_caches)

    def _admit(self, now_s: float) -> list[int]:
        """Move waiting requests to running in FCFS order while the sequence limit and the KV pool (prompt + output
        tokens reserved at admission) allow, at ``now_s``; the ids admitted."""
        admitted: list[int] = []
        cache = self.prefix_caches[0] if self.prefix_caches else None
        while self._waiting and len(self._running) < self._max_seqs:
            req = self._requests[self._waiting[0]]
            need = req.input_len + req.output_len if cache is None else admission_need(cache, req, self.prefix_len)[0]
            if need > self._kv_tokens_free:
                break
            self._kv_tokens_free -= need
            if cache is not None:  # a hit references its prefix; unreferenced prefixes live in the pool's free part
                admit_prefix(cache, req, self.prefix_len)
                cache.fit(self._kv_tokens_free)
                if delay_first_chunk(req, now_s):
                    self._push(req.ready_s, "wake")
            self._running.append(self._waiting.pop(0))
            req.admitted_s = now_s
            admitted.append(req.rid)
        return admitted
