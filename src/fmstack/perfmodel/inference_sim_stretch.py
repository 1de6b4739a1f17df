"""Skip-ahead for the batching simulation (:class:`fmstack.perfmodel.inference_sim.BatchingSim`): a run of
iterations whose batch does not change until the next event is priced with one vectorised
:func:`fmstack.perfmodel.inference_step.step_time` call per block, and the clock jumps to its end.

Between an arrival, a completion and an admission the iterations of a replica differ only by their contexts: a
decode-only batch (:meth:`Stretches._decode_stretch`; every decode one token more per iteration), the same batch
with one prompt's chunk filling the token budget (:meth:`Stretches._chunk_stretch`, chunked prefill, Sarathi-Serve:
a 100,000-token prompt is 196 iterations of 512 tokens; the chunk's attended context ``chunk`` tokens more per
iteration), or every attention-DP rank's decodes (:meth:`Stretches._adp_stretch`). Each stretch prices its
iterations elementwise with the floating-point operations the one-at-a-time path uses (integer context sums, then
the same divisions and additions), and the clock adds their times one by one as the event loop would, so the
results are the same floats (tested against ``skip_ahead=False`` on randomized cases). The last iteration of a
stretch goes through the event loop as usual.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fmstack.perfmodel.inference_sim_io import SimRequest
from fmstack.perfmodel.inference_step import Deployment, RankLoad, step_time


@dataclass(slots=True)
class OpenStretch:
    """A stretch run past instants at which the router may yet send a request here (joint simulation,
    :attr:`Stretches.routed`): what :meth:`Stretches.cut_at` needs to take back the iterations past such an instant."""

    ends_s: list[float]
    """Each iteration's end; the last one's is the ``done`` event on the heap."""
    reqs: list[SimRequest]
    """The decodes, each one token more per iteration."""
    last_token_s: list[float]
    """Their last token's time before the stretch."""
    chunk: tuple[int, int] | None
    clock_s: float
    """The clock before the stretch."""
    counter: int
    """The tie-break counter before the stretch."""


Ks = np.ndarray[tuple[int], np.dtype[np.int64]]
Times = np.ndarray[tuple[int], np.dtype[np.float64]]


class Stretches:
    """The skip-ahead half of :class:`fmstack.perfmodel.inference_sim.BatchingSim`, which sets the state below."""

    d: Deployment
    ranks: int
    clock_s: float
    iterations: int
    prompt_ranks: list[int]
    _requests: list[SimRequest]
    _events: list[tuple[float, int, str, int]]
    _counter: int
    _batch: tuple[list[int], dict[int, int]]
    _busy: bool
    _step_s: float
    """The last iteration's seconds (sizes a stretch's first block)."""
    horizon_s: float
    """The next arrival that may yet be sent here (joint simulation; inf otherwise): a stretch stops there."""
    routed: bool
    """Joint simulation, lazily: stretches run past the arrivals a router has not yet sent (:meth:`cut_at` takes
    back what a request sent here would have cut), and stop at those sent here as at a horizon."""
    _open: OpenStretch | None
    _memo: tuple[tuple[int | str, ...], int, Times] | None
    """The last line of iterations priced: its key, its first index and the times from there (:meth:`_priced`)."""

    def _arrivals_until(self, time_s: float) -> float:
        raise NotImplementedError  # BatchingSim's: the arrivals join its queue

    def _push(self, time_s: float, kind: str, rid: int = -1) -> None:
        heapq.heappush(self._events, (time_s, self._counter, kind, rid))
        self._counter += 1

    def _decode_stretch(self, decode: list[int]) -> None:
        """Run the iterations that only decode, with the same batch, until the next event or completion.

        No prompt token is in the iteration: every running request decodes, or the decodes fill the token budget
        and the prompts in progress wait (chunked prefill); none waiting can be admitted before a completion frees
        room (the admission loop stopped: the queue is empty or its head does not fit, and only a completion
        changes that), so the next iterations differ only by their context, one token more each, until the first
        request completes or the next event (an arrival) comes. Their times come from one ``step_time`` call
        over the contexts, the same floating-point operations as one call each (the mean context as
        ``np.mean`` computes it: an exact integer sum over the count), and the clock adds them one by one as
        the event loop would; the last iteration of the stretch goes through the event loop as usual."""
        reqs = [self._requests[r] for r in decode]
        n = len(reqs)
        ctx_sum = sum(q.input_len + q.generated for q in reqs)

        def price(ks: Ks) -> Times:
            t = step_time(self.d, float(n), (ctx_sum + ks * n) / n, 0.0, 0.0, 0.0).total_s
            return np.broadcast_to(t, ks.shape)

        # iteration k's context sum is (a + k) n + r: the same line of iterations for any start on it
        a, r = divmod(ctx_sum, n)
        self._advance(decode, self._priced(("decode", n, r), a, price))

    def _chunk_stretch(self, decode: list[int], rid: int, chunk: int) -> None:
        """Run the iterations that carry ``chunk`` prompt tokens of request ``rid`` next to ``decode``'s sequences
        (chunked prefill), the same batch, until the next event, a completion or the prompt's last chunk.

        The prompt takes the whole token budget and has more than it left (long prompts in small chunks: a
        100,000-token prompt is 196 iterations of 512), the other prompts in progress wait behind it, and the
        queue's head is admitted only after an arrival or a completion (as in :meth:`_decode_stretch`); an arrival
        on the way is admitted as the next iteration starts (:meth:`BatchingSim._arrivals_until`) and waits behind
        the prompt too. So the next iterations differ only by the decodes' context (one token more each) and the
        chunk's attended context (``chunk`` tokens more each), up to the first completion or the iteration before
        the one that completes the prompt (that one carries fewer tokens and perhaps the next prompt's first chunk:
        it goes through the event loop). Priced as
        :meth:`_run_step` prices each, elementwise the same floating-point operations (integer sums, then the
        same divisions and additions), in one ``step_time`` call per block."""
        n = len(decode)
        ctx_sum = sum(self._requests[r].input_len + self._requests[r].generated for r in decode)
        start = self._requests[rid].prefilled
        last = (self._requests[rid].input_len - start - 1) // chunk  # iterations before the prompt's last chunk
        causal = chunk * (chunk + 1) / 2

        def price(ks: Ks) -> Times:
            ctx = (ctx_sum + ks * n) / n if n else 0.0
            t = step_time(self.d, float(n), ctx, float(chunk), chunk * (start + ks * chunk) + causal, 0.0).total_s
            return np.broadcast_to(t, ks.shape)

        a, r = divmod(start, chunk)  # iteration k's prompt start is (a + k) chunk + r, its context sum c + (a + k) n
        times = self._priced(("chunk", n, chunk, r, ctx_sum - a * n), a, price)

        # in a joint simulation an arrival not yet routed may come here: stop at the next arrival (the same results)
        on_event = self._arrivals_until if self.horizon_s == math.inf and not self.routed else None
        self._advance(decode, times, chunk=(rid, chunk), k_limit=last, on_event=on_event)

    def _priced(self, line: tuple[int | str, ...], at: int, price: Callable[[Ks], Times]) -> Callable[[Ks], Times]:
        """The times of a stretch's iterations ``ks`` (:meth:`_advance`'s ``times``) that start at index ``at`` of a
        ``line`` of iterations (all the arguments of ``step_time`` a function of the index, ``price`` that of this
        stretch's iteration ``k``, index ``at + k``). A stretch cut short (an arrival, or the joint simulation's
        horizon) and started again on the same line takes the times already priced instead of pricing them again:
        the same values, as ``price`` is elementwise (each time depends on its own iteration's arguments alone)."""
        memo = self._memo
        if memo is None or memo[0] != line or not memo[1] <= at <= memo[1] + len(memo[2]):
            memo = self._memo = (line, at, np.empty(0))

        def times(ks: Ks) -> Times:
            now = self._memo
            assert now is not None and now[0] == line, "a stretch prices its own line"
            _, first, values = now
            i0 = at - first
            have = len(values) - i0  # this stretch's first iteration not priced yet (<= ks[0]: blocks run in order)
            if have <= int(ks[-1]):
                values = np.concatenate([values, price(np.arange(have, int(ks[-1]) + 1, dtype=np.int64))])
                self._memo = (line, first, values)
            return values[i0 + int(ks[0]) : i0 + int(ks[-1]) + 1]

        return times

    def _advance(
        self,
        decode: list[int],
        times: Callable[[np.ndarray[tuple[int], np.dtype[np.int64]]], np.ndarray[tuple[int], np.dtype[np.float64]]],
        *,
        chunk: tuple[int, int] | None = None,
        k_limit: int | None = None,
        on_event: Callable[[float], float] | None = None,
    ) -> int:
        """Run the stretch of ``decode``'s iterations (and ``chunk``, a prompt's ``(request, tokens)`` in each)
        whose times ``times`` gives for iterations ``ks`` (0: the next), in blocks, until the first request
        completes, ``k_limit`` iterations or the next event comes; returns the iterations started (the last goes
        through the event loop). ``on_event``: given the end of an iteration at or past the next event, takes that
        event (and those up to it) and returns the next one's time, and the stretch goes on (a chunk's stretch: the
        arrivals join the queue, :meth:`BatchingSim._arrivals_until`); None: the stretch stops there."""
        reqs = [self._requests[r] for r in decode]
        k_max = min([q.output_len - q.generated for q in reqs] + ([] if k_limit is None else [k_limit]))
        assert k_max > 0, "a running request has produced all its tokens but was not retired"
        next_event_s = min(self._events[0][0] if self._events else math.inf, self.horizon_s)
        ends: list[float] = []
        # the first block: the iterations up to the next event at the last iteration's time (one call, mostly; a
        # stretch that goes past events: all of them), at least 64 (about the cost of one context up to 64); then
        # doubling
        clock_s, k0, block = self.clock_s, 0, 64
        if on_event is not None:
            block = max(block, min(k_max, 8192))
        elif self._step_s > 0 and next_event_s < math.inf:
            block = max(block, int(min((next_event_s - clock_s) / self._step_s, k_max)) + 8)
        while k0 < k_max:
            ks = np.arange(k0, min(k0 + block, k_max), dtype=np.int64)
            for t in times(ks).tolist():
                clock_s, self._step_s = clock_s + t, t
                ends.append(clock_s)
                if clock_s >= next_event_s:
                    if on_event is None or len(ends) == k_max:
                        break
                    next_event_s = on_event(clock_s)
            if ends[-1] >= next_event_s:
                break
            k0, block = k0 + len(ks), block * 2
        done = len(ends) - 1  # iterations finished here; the last one goes through the event loop
        if done > 0 and self.routed:
            self._open = OpenStretch(ends, reqs, [q.last_token_s for q in reqs], chunk, self.clock_s, self._counter)
        if done > 0:
            steps = [ends[j] - ends[j - 1] for j in range(1, done)]
            first_s = ends[0]
            for q in reqs:
                q.gaps_s.append(first_s - q.last_token_s)
                q.gaps_s.extend(steps)
                q.generated += done
                q.last_token_s = ends[done - 1]
            if chunk is not None:
                self._requests[chunk[0]].prefilled += chunk[1] * done
            self.iterations += done
            self._counter += done
            self.clock_s = ends[done - 1]
        self._batch = (decode, {} if chunk is None else {chunk[0]: chunk[1]})
        self._busy = True
        self.iterations += 1
        self._push(ends[-1], "done")
        return len(ends)

    def cut_at(self, time_s: float) -> None:
        """A request is sent here at ``time_s``: end the stretch in progress with the iteration that ends at or after
        ``time_s``, as a stretch run with ``horizon_s = time_s`` would have (and every earlier horizon, which does not
        change its iterations: the same floats, :mod:`fmstack.perfmodel.inference_sim_stretch`); its later iterations
        are taken back. Called after :meth:`BatchingSim.run_until` (time_s), so the stretch's last iteration ends at or
        after ``time_s`` and no completion came between."""
        s = self._open
        if s is None:
            return
        self._open = None
        ends, done = s.ends_s, len(s.ends_s) - 1
        m = bisect_left(ends, time_s)  # the first iteration ending at or after time_s
        if m >= done:
            return
        undo = done - m
        for q, last_s in zip(s.reqs, s.last_token_s, strict=True):
            del q.gaps_s[-undo:]
            q.generated -= undo
            q.last_token_s = ends[m - 1] if m else last_s
        if s.chunk is not None:
            self._requests[s.chunk[0]].prefilled -= s.chunk[1] * undo
        if self.ranks > 1:
            del self.prompt_ranks[-undo:]
        self.iterations -= undo
        self.clock_s = ends[m - 1] if m else s.clock_s
        self._events.remove((ends[done], s.counter + done, "done", -1))
        heapq.heapify(self._events)
        self._counter = s.counter + m
        self._push(ends[m], "done")

    def _adp_stretch(self, decodes: list[list[int]], decode_all: list[int]) -> None:
        """Attention DP: :meth:`_decode_stretch` over the ranks. No rank has a prompt chunk: each rank's queued
        requests wait for KV room or token budget that only a completion frees, and no queued request is assigned
        (the queue is empty or every rank is full), so each rank's decode count stays until the first completion
        or the next event. Row j of a block is iteration j, a column a rank: its mean context (an exact integer
        sum over its count, as ``np.mean`` forms it), the all-rank mean (the same sum over the ranks' row) and the
        busiest rank's time are the one-at-a-time path's floating-point operations element by element; the
        arguments that do not change (the counts, the totals) keep that path's shapes."""
        n = np.array([float(len(decode)) for decode in decodes])
        count = np.maximum(n.astype(np.int64), 1)
        sums = np.array([sum(self._requests[r].input_len + self._requests[r].generated for r in decode)
                         for decode in decodes], dtype=np.int64)  # fmt: skip
        b_all = float(n.sum())
        zeros = np.zeros(self.ranks)

        def times(ks: np.ndarray[tuple[int], np.dtype[np.int64]]) -> np.ndarray[tuple[int], np.dtype[np.float64]]:
            ctx = np.where(n > 0, (sums + ks[:, None] * count) / count, 0.0)
            ctx_all = (n * ctx).sum(axis=1) / b_all
            busy = RankLoad(decode_seqs=n, decode_ctx=ctx, prefill_tokens=zeros, prefill_token_ctx=zeros,
                            prefill_seqs=zeros)  # fmt: skip
            per_rank = step_time(self.d, b_all, ctx_all[:, None], 0.0, 0.0, 0.0, busiest=busy).total_s
            out: np.ndarray[tuple[int], np.dtype[np.float64]] = np.broadcast_to(per_rank, ctx.shape).max(axis=1)
            return out

        self.prompt_ranks.extend([0] * self._advance(decode_all, times))
