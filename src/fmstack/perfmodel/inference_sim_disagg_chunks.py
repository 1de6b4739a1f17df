"""A prefill replica's iteration time in a disaggregated split (:class:`PrefillChunks`, the part of
:class:`fmstack.perfmodel.inference_sim_disagg.DisaggSim` that prices prefill-only iterations, which sets the state
below)."""

from __future__ import annotations

import numpy as np

from fmstack.perfmodel.inference_sim_io import SimRequest
from fmstack.perfmodel.inference_step import Deployment, step_time


class PrefillChunks:
    """Prefill-only iterations priced by ``step_time``, a run of one prompt's full-budget chunks in one call."""

    d: Deployment
    _requests: list[SimRequest]
    _skip_ahead: bool
    _chunk_cache: list[tuple[int, int, int, np.ndarray[tuple[int], np.dtype[np.float64]]] | None]

    def _prefill_step_s(self, p: int, chunks: dict[int, int]) -> float:
        """The prefill-only iteration of ``chunks`` (request -> tokens) on replica ``p``. A chunk that fills the
        budget alone and leaves more of its prompt (long prompts: 100,000 tokens are 49 chunks of 2,048) is followed
        by the same until the prompt's last chunk, whatever else happens meanwhile (the replica takes nothing new
        while its prompt fills the budget), each with ``n`` more tokens of attended context: their times come from
        one vectorised ``step_time`` call and are kept, elementwise the same floating-point operations as one call
        each (integer context sums, then the same addition)."""
        if self._skip_ahead and len(chunks) == 1:
            ((rid, n),) = chunks.items()
            req = self._requests[rid]
            if req.prefilled + n < req.input_len:
                cached = self._chunk_cache[p]
                if cached is not None and cached[:2] == (rid, n):
                    j, rest = divmod(req.prefilled - cached[2], n)
                    if rest == 0 and 0 <= j < len(cached[3]):
                        return float(cached[3][j])
                ks = np.arange((req.input_len - req.prefilled - 1) // n, dtype=np.int64)  # up to the last chunk
                ctx = n * (req.prefilled + ks * n) + n * (n + 1) / 2
                times = np.broadcast_to(step_time(self.d, 0.0, 0.0, float(n), ctx, 0.0).total_s, ks.shape)
                self._chunk_cache[p] = (rid, n, req.prefilled, times)
                return float(times[0])
        tokens = float(sum(chunks.values()))
        ctx_sum = sum(n * self._requests[r].prefilled + n * (n + 1) / 2 for r, n in chunks.items())
        done = sum(1 for r, n in chunks.items() if self._requests[r].prefilled + n >= self._requests[r].input_len)
        return float(step_time(self.d, 0.0, 0.0, tokens, float(ctx_sum), float(done)).total_s)
