"""Application source: :class:`~fmstack.observability.app_metrics.AppSnapshot` -> ``fmstack_train_*`` and
``fmstack_serving_*`` families, from an in-process :class:`AppMetrics` or from snapshot files in a directory."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator
from itertools import accumulate
from operator import attrgetter
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from fmstack.observability.app_metrics import AppMetrics, AppSnapshot, HistogramData
from fmstack.observability.blocks import LayoutCache, Series, SeriesLayout
from fmstack.observability.exposition import BlockMetric, value_texts


def _bucket_label(bound: float) -> str:
    return "+Inf" if bound == math.inf else repr(float(bound))


_TRAIN_LABELS, _SERVING_LABELS = ("job_id",), ("job_id", "model_name")
# (attribute, family name, help, type, labels): the families in the order they are written
_COUNTERS_TRAIN = (
    ("steps_total", "fmstack_train_steps", "Optimizer steps completed", "counter", _TRAIN_LABELS),
    ("tokens_total", "fmstack_train_tokens", "Training tokens processed", "counter", _TRAIN_LABELS),
)
_GAUGES = (
    ("tokens_per_second", "fmstack_train_tokens_per_second", "Tokens per second in the last step", "gauge", _TRAIN_LABELS),
    ("loss", "fmstack_train_loss", "Training loss of the last step", "gauge", _TRAIN_LABELS),
    ("grad_norm", "fmstack_train_grad_norm", "Gradient norm of the last step", "gauge", _TRAIN_LABELS),
    ("mfu_ratio", "fmstack_train_mfu_ratio", "Model FLOPs utilisation 0-1 (6N per token)", "gauge", _TRAIN_LABELS),
    ("last_step_timestamp_s", "fmstack_train_last_step_timestamp_seconds", "When the last step finished", "gauge", _TRAIN_LABELS),
    ("checkpoint_duration_s", "fmstack_train_checkpoint_duration_seconds", "Last checkpoint save time", "gauge", _TRAIN_LABELS),
)  # fmt: skip
_STEP_HIST = ("step_duration", "fmstack_train_step_duration_seconds", "Step time", "histogram", _TRAIN_LABELS)
_COUNTERS_SERVING = (
    ("requests_total", "fmstack_serving_requests", "Requests served", "counter", _SERVING_LABELS),
    ("prompt_tokens_total", "fmstack_serving_prompt_tokens", "Prompt tokens", "counter", _SERVING_LABELS),
    ("generation_tokens_total", "fmstack_serving_generation_tokens", "Generated tokens", "counter", _SERVING_LABELS),
)
_SERVING_HISTS = (
    ("ttft", "fmstack_serving_time_to_first_token_seconds", "Time to first token", "histogram", _SERVING_LABELS),
    ("itl", "fmstack_serving_inter_token_latency_seconds", "Inter-token latency", "histogram", _SERVING_LABELS),
)
_FAMILIES = (*_COUNTERS_TRAIN, *_GAUGES, _STEP_HIST, *_COUNTERS_SERVING, *_SERVING_HISTS)
_RANK = {f[1]: i for i, f in enumerate(_FAMILIES)}
_GAUGE_VALUES = attrgetter(*(g[0] for g in _GAUGES))

_SnapshotKey = tuple[str, str, bool, tuple[bool, ...], bool, tuple[float, ...], tuple[float, ...], tuple[float, ...]]


def _snapshot_values(s: AppSnapshot) -> tuple[_SnapshotKey, list[float]]:
    """A snapshot's structure (labels, which families it has, histogram bounds) and its values in series order:
    training counters and step histogram (if any step), gauges that are set, serving counters and histograms (if
    any request). A histogram is its cumulative buckets, then ``_count`` (the +Inf bucket) and ``_sum`` (both left
    out when the first bound is negative, as prometheus-client's ``HistogramMetricFamily`` does)."""
    values: list[float] = []
    gauges = _GAUGE_VALUES(s)
    if s.steps_total:
        values += (float(s.steps_total), float(s.tokens_total))
        _hist_values(values, s.step_duration)
    values += [float(v) for v in gauges if v is not None]
    if s.requests_total:
        values += (float(s.requests_total), float(s.prompt_tokens_total), float(s.generation_tokens_total))
        _hist_values(values, s.ttft)
        _hist_values(values, s.itl)
    mask = tuple(v is not None for v in gauges)
    bounds = (s.step_duration.bounds, s.ttft.bounds, s.itl.bounds)
    return (s.job_id, s.model_name, bool(s.steps_total), mask, bool(s.requests_total), *bounds), values


def _hist_values(values: list[float], h: HistogramData) -> None:
    start = len(values)
    values += map(float, accumulate(h.counts))
    if _has_sum(h.bounds):
        values += (values[-1] if len(values) > start else 0.0, h.total)


def _has_sum(bounds: tuple[float, ...]) -> bool:
    return not bounds or float(bounds[0]) >= 0


def _snapshot_series(key: _SnapshotKey) -> list[Series]:
    job_id, model_name, steps, mask, requests, step_bounds, ttft_bounds, itl_bounds = key
    labels = {"job_id": job_id}
    serving = {"job_id": job_id, "model_name": model_name}
    series: list[Series] = []
    if steps:
        series += [((f[1], f[1], f[2], f[3]), f[1] + "_total", labels) for f in _COUNTERS_TRAIN]
        series += _hist_series(_STEP_HIST, labels, step_bounds)
    series += [((f[1], f[1], f[2], f[3]), f[1], labels) for f, has in zip(_GAUGES, mask, strict=True) if has]
    if requests:
        series += [((f[1], f[1], f[2], f[3]), f[1] + "_total", serving) for f in _COUNTERS_SERVING]
        series += _hist_series(_SERVING_HISTS[0], serving, ttft_bounds)
        series += _hist_series(_SERVING_HISTS[1], serving, itl_bounds)
    return series


def _hist_series(
    spec: tuple[str, str, str, str, tuple[str, ...]], labels: dict[str, str], bounds: tuple[float, ...]
) -> list[Series]:
    fk = (spec[1], spec[1], spec[2], spec[3])
    out: list[Series] = [(fk, spec[1] + "_bucket", {**labels, "le": _bucket_label(b)}) for b in (*bounds, math.inf)]
    if _has_sum(bounds):
        out += [(fk, spec[1] + "_count", labels), (fk, spec[1] + "_sum", labels)]
    return out


class SnapshotRenderer:
    """``fmstack_train_*`` / ``fmstack_serving_*`` families of a set of snapshots (one per job or replica), written
    from a layout per structure (which jobs, which families each has); empty families are not emitted."""

    def __init__(self) -> None:
        self._layouts: LayoutCache[SeriesLayout] = LayoutCache()

    def families(self, snaps: Iterable[AppSnapshot]) -> list[BlockMetric]:
        keys: list[_SnapshotKey] = []
        values: list[float] = []
        for snap in snaps:
            key, vals = _snapshot_values(snap)
            keys.append(key)
            values += vals
        structure = tuple(keys)
        layout = self._layouts.get(structure)
        if layout is None:
            series = [item for key in keys for item in _snapshot_series(key)]
            layout = self._layouts.put(structure, SeriesLayout(series, rank=_RANK.__getitem__))
        return layout.families(value_texts(values))


def snapshot_families(snaps: Iterable[AppSnapshot]) -> Iterator[Metric]:
    """Families for a set of snapshots (one per job / replica); empty families are not emitted."""
    return iter(SnapshotRenderer().families(snaps))


class AppSource:
    """The in-process application metrics (a workload that runs its own exporter)."""

    name = "app"

    def __init__(self, metrics: AppMetrics | list[AppMetrics]) -> None:
        self.metrics = metrics if isinstance(metrics, list) else [metrics]
        self._renderer = SnapshotRenderer()

    def collect(self) -> Iterator[Metric]:
        return iter(self._renderer.families([m.snapshot() for m in self.metrics]))


DEFAULT_MAX_AGE_S = 6 * 3600.0
"""Snapshot files not rewritten for this long are no longer served (``fmstack exporter --app-max-age``)."""


class AppDirSource:
    """Snapshot files (``*.json``, written by :meth:`AppMetrics.write_snapshot`) in a directory.

    One snapshot per ``job_id`` is served: when several files name the same job, the most recently written one
    (file modification time, then file name) wins, so the exposition never holds the same series twice. A file
    whose job marked itself finished (:meth:`AppMetrics.finish`) or that was not rewritten for ``max_age_s`` is
    not served: a finished or dead job's series end (and ``FmstackTrainingStalled`` with them) instead of growing
    the exposition forever. ``fmstack_app_skipped_files{reason}`` counts this scrape's skipped files.
    """

    name = "app"

    def __init__(
        self, directory: Path, max_age_s: float = DEFAULT_MAX_AGE_S, clock: Callable[[], float] = time.time
    ) -> None:
        if not max_age_s > 0:
            raise ValueError(f"max_age_s must be > 0, got {max_age_s}")
        self.directory = directory
        self.max_age_s = max_age_s
        self._clock = clock
        self.bad_files = 0
        self._renderer = SnapshotRenderer()

    def collect(self) -> Iterator[Metric]:
        now = self._clock()
        newest: dict[str, tuple[int, str, AppSnapshot]] = {}
        skipped = dict.fromkeys(("expired", "finished", "duplicate"), 0)
        for path in sorted(self.directory.glob("*.json")):
            try:
                mtime_ns = path.stat().st_mtime_ns
                if now - mtime_ns / 1e9 > self.max_age_s:
                    skipped["expired"] += 1
                    continue
                snap = AppSnapshot.from_json(path.read_text(encoding="utf-8"))
            except (OSError, ValueError, KeyError, TypeError):
                # a job writing or removing its file right now (the next scrape will see it), or a malformed
                # file (from_json checks every field's type): skipped, the other jobs' files are still served
                self.bad_files += 1
                continue
            if snap.finished:
                skipped["finished"] += 1
                continue
            prev = newest.get(snap.job_id)
            if prev is not None:
                skipped["duplicate"] += 1
                if (mtime_ns, path.name) < prev[:2]:
                    continue
            newest[snap.job_id] = (mtime_ns, path.name, snap)
        snaps = [snap for _, _, snap in sorted(newest.values(), key=lambda item: item[1])]
        bad = CounterMetricFamily(
            "fmstack_app_bad_files", "Snapshot files skipped because they could not be read or parsed"
        )
        bad.add_metric([], float(self.bad_files))
        skip = GaugeMetricFamily(
            "fmstack_app_skipped_files",
            "Snapshot files not served in this scrape: expired, finished job, or an older file of the same job_id",
            labels=["reason"],
        )
        for reason, n in skipped.items():
            skip.add_metric([reason], float(n))
        return iter([*self._renderer.families(snaps), bad, skip])
