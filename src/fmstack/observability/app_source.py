"""Application source: :class:`~fmstack.observability.app_metrics.AppSnapshot` -> ``fmstack_train_*`` and
``fmstack_serving_*`` families, from an in-process :class:`AppMetrics` or from snapshot files in a directory."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from fmstack.observability.app_metrics import AppMetrics, AppSnapshot, HistogramData


def _bucket_label(bound: float) -> str:
    return "+Inf" if bound == math.inf else repr(float(bound))


def _hist(fam: HistogramMetricFamily, labels: list[str], h: HistogramData) -> None:
    buckets = [(_bucket_label(b), float(n)) for b, n in h.cumulative()]
    fam.add_metric(labels, buckets, h.total)


def snapshot_families(snaps: Iterable[AppSnapshot]) -> Iterator[Metric]:
    """Families for a set of snapshots (one per job / replica); empty families are not emitted."""
    tl, sl = ["job_id"], ["job_id", "model_name"]
    steps = CounterMetricFamily("fmstack_train_steps", "Optimizer steps completed", labels=tl)
    tokens = CounterMetricFamily("fmstack_train_tokens", "Training tokens processed", labels=tl)
    tps = GaugeMetricFamily("fmstack_train_tokens_per_second", "Tokens per second in the last step", labels=tl)
    loss = GaugeMetricFamily("fmstack_train_loss", "Training loss of the last step", labels=tl)
    gnorm = GaugeMetricFamily("fmstack_train_grad_norm", "Gradient norm of the last step", labels=tl)
    mfu = GaugeMetricFamily("fmstack_train_mfu_ratio", "Model FLOPs utilisation 0-1 (6N per token)", labels=tl)
    last = GaugeMetricFamily("fmstack_train_last_step_timestamp_seconds", "When the last step finished", labels=tl)
    ckpt = GaugeMetricFamily("fmstack_train_checkpoint_duration_seconds", "Last checkpoint save time", labels=tl)
    step_h = HistogramMetricFamily("fmstack_train_step_duration_seconds", "Step time", labels=tl)
    reqs = CounterMetricFamily("fmstack_serving_requests", "Requests served", labels=sl)
    ptok = CounterMetricFamily("fmstack_serving_prompt_tokens", "Prompt tokens", labels=sl)
    gtok = CounterMetricFamily("fmstack_serving_generation_tokens", "Generated tokens", labels=sl)
    ttft = HistogramMetricFamily("fmstack_serving_time_to_first_token_seconds", "Time to first token", labels=sl)
    itl = HistogramMetricFamily("fmstack_serving_inter_token_latency_seconds", "Inter-token latency", labels=sl)
    for s in snaps:
        t, v = [s.job_id], [s.job_id, s.model_name]
        if s.steps_total:
            steps.add_metric(t, float(s.steps_total))
            tokens.add_metric(t, float(s.tokens_total))
            _hist(step_h, t, s.step_duration)
        gauges: tuple[tuple[GaugeMetricFamily, float | None], ...] = ((tps, s.tokens_per_second), (loss, s.loss), (gnorm, s.grad_norm), (mfu, s.mfu_ratio),
                           (last, s.last_step_timestamp_s), (ckpt, s.checkpoint_duration_s))  # fmt: skip
        for fam, value in gauges:
            if value is not None:
                fam.add_metric(t, float(value))
        if s.requests_total:
            reqs.add_metric(v, float(s.requests_total))
            ptok.add_metric(v, float(s.prompt_tokens_total))
            gtok.add_metric(v, float(s.generation_tokens_total))
            _hist(ttft, v, s.ttft)
            _hist(itl, v, s.itl)
    families: tuple[Metric, ...] = (
        steps,
        tokens,
        tps,
        loss,
        gnorm,
        mfu,
        last,
        ckpt,
        step_h,
        reqs,
        ptok,
        gtok,
        ttft,
        itl,
    )
    yield from (f for f in families if f.samples)


class AppSource:
    """The in-process application metrics (a workload that runs its own exporter)."""

    name = "app"

    def __init__(self, metrics: AppMetrics | list[AppMetrics]) -> None:
        self.metrics = metrics if isinstance(metrics, list) else [metrics]

    def collect(self) -> Iterator[Metric]:
        return snapshot_families([m.snapshot() for m in self.metrics])


class AppDirSource:
    """Snapshot files (``*.json``, written by :meth:`AppMetrics.write_snapshot`) in a directory."""

    name = "app"

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.bad_files = 0

    def collect(self) -> Iterator[Metric]:
        snaps = []
        for path in sorted(self.directory.glob("*.json")):
            try:
                snaps.append(AppSnapshot.from_json(path.read_text(encoding="utf-8")))
            except (OSError, ValueError, KeyError, TypeError):
                self.bad_files += 1  # a job writing or removing its file right now; next scrape will see it
        return snapshot_families(snaps)
