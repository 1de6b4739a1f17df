"""Per-step training metrics behind a small interface.

``JsonlMetrics`` appends one JSON object per step to a file (rank 0 only), read by tests and by the bench
step-time comparison; ``AppMetricsSink`` feeds the observability layer's application-metrics API
(``fmstack.observability.app_metrics.AppMetrics``), which the exporter serves as ``fmstack_train_*``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True, kw_only=True, slots=True)
class StepRecord:
    """One optimizer step as seen by rank 0."""

    step: int
    loss: float
    step_time_s: float
    tokens_per_s: float
    tokens: int
    """Tokens processed in this step over all ranks."""


class StepMetrics(Protocol):
    def record(self, rec: StepRecord) -> None: ...

    def finish(self) -> None:
        """The run ended normally (every step, or a stop signal's checkpoint saved): never called after a crash."""

    def close(self) -> None: ...


class JsonlMetrics:
    """Append-only JSON lines; a resumed run appends again, so readers keep the last record per step."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._f = path.open("a", encoding="utf-8")

    def record(self, rec: StepRecord) -> None:
        # repr(float) round-trips exactly, so loss curves can be compared bit for bit
        self._f.write(json.dumps(asdict(rec)) + "\n")
        self._f.flush()

    def finish(self) -> None:
        return None

    def close(self) -> None:
        self._f.close()


class AppMetricsSink:
    """Forwards each step to the observability layer's ``AppMetrics`` and, if a directory is given, writes its
    snapshot there for ``fmstack exporter --app-dir DIR`` (atomic temp file + rename, done by ``AppMetrics``).
    :meth:`finish` marks the job finished and writes the snapshot once more: the exporter then stops serving it and
    ``FmstackTrainingStalled`` cannot fire for a job that ended; a crashed run never calls it, so its snapshot stays
    unfinished and the stall alert fires (docs/observability.md)."""

    def __init__(self, job_id: str, snapshot_dir: Path | None = None) -> None:
        from fmstack.observability.app_metrics import AppMetrics

        self.app = AppMetrics(job_id=job_id)
        self._path = snapshot_dir / f"{job_id}.json" if snapshot_dir else None
        if snapshot_dir:
            snapshot_dir.mkdir(parents=True, exist_ok=True)

    def record(self, rec: StepRecord) -> None:
        self.app.record_step(step_time_s=rec.step_time_s, tokens=rec.tokens, loss=rec.loss)
        if self._path:
            self.app.write_snapshot(self._path)

    def finish(self) -> None:
        self.app.finish()
        if self._path:
            self.app.write_snapshot(self._path)

    def close(self) -> None:
        return None


class FanOut:
    """Send every record to several sinks."""

    def __init__(self, *sinks: StepMetrics) -> None:
        self._sinks = sinks

    def record(self, rec: StepRecord) -> None:
        for s in self._sinks:
            s.record(rec)

    def finish(self) -> None:
        for s in self._sinks:
            s.finish()

    def close(self) -> None:
        for s in self._sinks:
            s.close()


class NullMetrics:
    """For ranks other than 0."""

    def record(self, rec: StepRecord) -> None:
        return None

    def finish(self) -> None:
        return None

    def close(self) -> None:
        return None


def read_loss_curve(path: Path) -> dict[int, float]:
    """step -> loss, the last record for each step winning (a resumed run rewrites the steps it repeats)."""
    curve: dict[int, float] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            rec = json.loads(line)
            curve[int(rec["step"])] = float(rec["loss"])
    return dict(sorted(curve.items()))
