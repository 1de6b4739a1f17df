"""Application metrics API for training and serving code: plain Python, no prometheus-client import.

A workload owns one :class:`AppMetrics` and calls it; the exporter's app source reads
:meth:`AppMetrics.snapshot` at scrape time (same process), or the workload calls :meth:`AppMetrics.write_snapshot`
into a directory that ``fmstack exporter --app-dir DIR`` reads (another process, like node_exporter's textfile
collector). Importing this module registers nothing anywhere and starts no thread or server.

Exported names (docs/observability.md): ``fmstack_train_*`` and ``fmstack_serving_*``, labels ``job_id`` (and
``model_name`` for serving). Histogram buckets for TTFT and inter-token latency are vLLM v1's
(``vllm/v1/metrics/loggers.py``, recalled), so dashboards compare like with like.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fmstack.fileio import atomic_write_text

STEP_BUCKETS_S: tuple[float, ...] = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0, 640.0)
TTFT_BUCKETS_S: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
    160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS_S: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip


def mfu_ratio(tokens_per_second: float, flops_per_token: float, num_gpus: int, peak_tflops_per_gpu: float) -> float:
    """Model FLOPs utilisation: achieved model FLOP/s over peak.

    ``flops_per_token`` is 6·N for dense training (forward + backward, PaLM, Chowdhery et al. 2022, App. B) plus
    attention if the caller counts it; recomputation is not counted (that would be HFU).
    Example: 1,000 tok/s on a 1e9-parameter model over 1 GPU of 989 TFLOP/s -> 6e12 / 989e12 = 0.00607.
    """
    if num_gpus <= 0 or peak_tflops_per_gpu <= 0:
        raise ValueError(f"num_gpus({num_gpus}) and peak_tflops_per_gpu({peak_tflops_per_gpu}) must be > 0")
    return tokens_per_second * flops_per_token / (num_gpus * peak_tflops_per_gpu * 1e12)


@dataclass(slots=True)
class HistogramData:
    """Cumulative-ready histogram: per-bucket counts (last slot is +Inf), sum and count."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        if list(self.bounds) != sorted(self.bounds) or len(set(self.bounds)) != len(self.bounds):
            raise ValueError(f"histogram bounds must be strictly increasing, got {self.bounds}")
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        # Prometheus buckets are "le": a value equal to a bound falls in that bound's bucket.
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def copy(self) -> HistogramData:
        return HistogramData(self.bounds, list(self.counts), self.total, self.count)

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, cumulative count) pairs ending with (+Inf, count), as Prometheus exposes them."""
        out, running = [], 0
        for bound, n in zip((*self.bounds, math.inf), self.counts, strict=True):
            running += n
            out.append((bound, running))
        return out


@dataclass(slots=True)
class AppSnapshot:
    """A consistent copy of an :class:`AppMetrics`, JSON-serialisable."""

    job_id: str
    model_name: str
    steps_total: int = 0
    tokens_total: int = 0
    tokens_per_second: float | None = None
    loss: float | None = None
    grad_norm: float | None = None
    mfu_ratio: float | None = None
    last_step_timestamp_s: float | None = None
    checkpoint_duration_s: float | None = None
    step_duration: HistogramData = field(default_factory=lambda: HistogramData(STEP_BUCKETS_S))
    requests_total: int = 0
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    ttft: HistogramData = field(default_factory=lambda: HistogramData(TTFT_BUCKETS_S))
    itl: HistogramData = field(default_factory=lambda: HistogramData(ITL_BUCKETS_S))
    finished: bool = False
    """The job ended (:meth:`AppMetrics.finish`): the node exporter stops serving its snapshot file."""

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    def copy(self) -> AppSnapshot:
        """A deep copy (the histograms' counts are the only mutable parts)."""
        return dataclasses.replace(
            self, step_duration=self.step_duration.copy(), ttft=self.ttft.copy(), itl=self.itl.copy()
        )

    @classmethod
    def from_json(cls, text: str) -> AppSnapshot:
        """Parse :meth:`to_json` output; raises ``ValueError`` (with the key) on anything else, a field of the
        wrong type included (strings for ``job_id`` / ``model_name``, 64-bit integers for counters and histogram
        counts, numbers or null for gauges, numbers for histogram bounds and sums; a bool is not a number), so a
        malformed file is skipped at parse time instead of failing the whole app source when rendered."""
        try:
            data: dict[str, Any] = json.loads(text)
        except RecursionError:
            raise ValueError("app snapshot: JSON nested too deeply") from None
        if not isinstance(data, dict):
            raise ValueError("app snapshot: expected a JSON object")
        for key, value in data.items():
            check = _FIELD_CHECKS.get(key)
            if check is not None:
                data[key] = check(key, value)
        hist: dict[str, Any] = {}
        for key in ("step_duration", "ttft", "itl"):
            h = data.pop(key, None)
            if h is not None:
                hist[key] = _histogram(key, h)
                if len(hist[key].counts) != len(hist[key].bounds) + 1:
                    raise ValueError(f"app snapshot: {key} has {len(hist[key].counts)} counts for bounds + 1")
        try:
            return cls(**data, **hist)
        except TypeError as exc:
            raise ValueError(f"app snapshot: {exc}") from None


_INT_LIMIT = 2**63
"""Counters and histogram counts are 64-bit: their sums stay far inside a float's range when rendered."""


def _str(key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"app snapshot: {key} must be a string, got {value!r:.40}")
    return value


def _bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"app snapshot: {key} must be true or false, got {value!r:.40}")
    return value


def _int(key: str, value: Any) -> int:
    if type(value) is not int or not -_INT_LIMIT <= value < _INT_LIMIT:  # type(): a bool is not a count
        raise ValueError(f"app snapshot: {key} must be a 64-bit integer, got {value!r:.40}")
    return value


def _number(key: str, value: Any) -> float:
    if (type(value) is int and -_INT_LIMIT <= value < _INT_LIMIT) or type(value) is float:
        return float(value)
    raise ValueError(f"app snapshot: {key} must be a number, got {value!r:.40}")


def _gauge(key: str, value: Any) -> float | None:
    return None if value is None else _number(key, value)


def _list(key: str, value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"app snapshot: {key} must be a list, got {value!r:.40}")
    return value


def _histogram(key: str, h: Any) -> HistogramData:
    if not isinstance(h, dict) or set(h) != {"bounds", "counts", "total", "count"}:
        raise ValueError(f"app snapshot: {key} must be an object with bounds, counts, total and count")
    bounds, counts = _list(f"{key}.bounds", h["bounds"]), _list(f"{key}.counts", h["counts"])
    kinds = set(map(type, bounds))  # the checks of _number and _int, per list (C-level loops: ~55 values)
    if not kinds <= {float, int} or (int in kinds and not _in_range([b for b in bounds if type(b) is int])):
        raise ValueError(f"app snapshot: {key}.bounds must be numbers, got {bounds!r:.60}")
    if not set(map(type, counts)) <= {int} or not _in_range(counts):
        raise ValueError(f"app snapshot: {key}.counts must be 64-bit integers, got {counts!r:.60}")
    total, count = _number(f"{key}.total", h["total"]), _int(f"{key}.count", h["count"])
    return HistogramData(tuple(map(float, bounds)), counts, total, count)


def _in_range(ints: list[int]) -> bool:
    return not ints or (min(ints) >= -_INT_LIMIT and max(ints) < _INT_LIMIT)


_FIELD_CHECKS: dict[str, Callable[[str, Any], Any]] = {
    **dict.fromkeys(("job_id", "model_name"), _str),
    "finished": _bool,
    **dict.fromkeys(
        ("steps_total", "tokens_total", "requests_total", "prompt_tokens_total", "generation_tokens_total"), _int
    ),
    **dict.fromkeys(
        ("tokens_per_second", "loss", "grad_norm", "mfu_ratio", "last_step_timestamp_s", "checkpoint_duration_s"),
        _gauge,
    ),
}


class AppMetrics:
    """Thread-safe recorder of training and serving metrics for one job (or one serving replica).

    >>> m = AppMetrics(job_id="llama-8b", clock=lambda: 100.0)
    >>> m.record_step(step_time_s=2.0, tokens=8192, loss=3.5)
    >>> m.snapshot().tokens_per_second
    4096.0
    """

    def __init__(self, job_id: str = "", model_name: str = "", clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._snap = AppSnapshot(job_id=job_id, model_name=model_name)

    def record_step(
        self,
        step_time_s: float,
        tokens: int,
        loss: float | None = None,
        mfu: float | None = None,
        grad_norm: float | None = None,
    ) -> None:
        """One optimizer step of ``step_time_s`` seconds that consumed ``tokens`` tokens (all ranks)."""
        if not step_time_s > 0 or tokens < 0:
            raise ValueError(f"step_time_s({step_time_s}) must be > 0 and tokens({tokens}) >= 0")
        if mfu is not None and not 0 <= mfu <= 1:
            raise ValueError(f"mfu({mfu}) is a ratio 0..1")
        now = self._clock()
        with self._lock:
            s = self._snap
            s.steps_total += 1
            s.tokens_total += tokens
            s.tokens_per_second = tokens / step_time_s
            s.loss = loss if loss is not None else s.loss
            s.mfu_ratio = mfu if mfu is not None else s.mfu_ratio
            s.grad_norm = grad_norm if grad_norm is not None else s.grad_norm
            s.last_step_timestamp_s = now
            s.step_duration.observe(step_time_s)

    def record_checkpoint(self, duration_s: float) -> None:
        """Duration of the last checkpoint save (blocking part), seconds."""
        if duration_s < 0:
            raise ValueError(f"duration_s({duration_s}) must be >= 0")
        with self._lock:
            self._snap.checkpoint_duration_s = duration_s

    def finish(self) -> None:
        """Mark the job finished; write the snapshot once more and the node exporter drops it (its alerts end)."""
        with self._lock:
            self._snap.finished = True

    def record_request(
        self, ttft_s: float, itl_s: Sequence[float] = (), prompt_tokens: int = 0, generation_tokens: int = 0
    ) -> None:
        """One served request: time to first token, its inter-token latencies, its token counts."""
        if ttft_s < 0 or any(x < 0 for x in itl_s) or prompt_tokens < 0 or generation_tokens < 0:
            raise ValueError("ttft_s, itl_s, prompt_tokens and generation_tokens must be >= 0")
        with self._lock:
            s = self._snap
            s.requests_total += 1
            s.prompt_tokens_total += prompt_tokens
            s.generation_tokens_total += generation_tokens
            s.ttft.observe(ttft_s)
            for x in itl_s:
                s.itl.observe(x)

    def snapshot(self) -> AppSnapshot:
        """A deep copy taken under the lock (the exporter reads this at scrape time)."""
        with self._lock:
            return self._snap.copy()

    def write_snapshot(self, path: str | os.PathLike[str]) -> Path:
        """Write the snapshot atomically (temp file + rename) so a reader never sees half a file."""
        # world-readable: the exporter may run as another user
        return atomic_write_text(path, self.snapshot().to_json(), field="snapshot", mode=0o644)
