"""App snapshot directory: one snapshot per job_id (newest wins), finished and expired files not served."""

from __future__ import annotations

import os
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from fmstack.observability.app_metrics import AppMetrics
from fmstack.observability.app_source import AppDirSource
from fmstack.observability.exporter import Exporter


def _write(path: Path, job_id: str, loss: float, mtime: float, finished: bool = False) -> None:
    m = AppMetrics(job_id=job_id, clock=lambda: 100.0)
    m.record_step(step_time_s=1.0, tokens=10, loss=loss)
    if finished:
        m.finish()
    m.write_snapshot(path)
    os.utime(path, (mtime, mtime))


def test_same_job_id_in_two_files_gives_one_series_newest_wins(tmp_path: Path) -> None:
    _write(tmp_path / "a.json", "j1", loss=3.0, mtime=1000.0)
    _write(tmp_path / "b.json", "j1", loss=2.0, mtime=900.0)  # older, though later in name order
    _write(tmp_path / "c.json", "j2", loss=5.0, mtime=1000.0)
    text = Exporter([AppDirSource(tmp_path, clock=lambda: 1010.0)]).render().decode()
    lines = [ln for ln in text.splitlines() if ln.startswith("fmstack_train_loss{")]
    assert lines == ['fmstack_train_loss{job_id="j1"} 3.0', 'fmstack_train_loss{job_id="j2"} 5.0']
    assert len({ln.split(" ")[0] for ln in text.splitlines() if not ln.startswith("#")}) == len(
        [ln for ln in text.splitlines() if not ln.startswith("#")]
    ), "duplicate series"
    list(text_string_to_metric_families(text))  # valid exposition
    assert 'fmstack_app_skipped_files{reason="duplicate"} 1.0' in text


def test_expired_and_finished_snapshots_are_not_served(tmp_path: Path) -> None:
    _write(tmp_path / "old.json", "old", loss=1.0, mtime=1000.0)
    _write(tmp_path / "done.json", "done", loss=1.0, mtime=4000.0, finished=True)
    _write(tmp_path / "live.json", "live", loss=1.0, mtime=4000.0)
    source = AppDirSource(tmp_path, max_age_s=3000.0, clock=lambda: 4000.5)  # old.json: 3000.5 s old
    text = Exporter([source]).render().decode()
    assert 'fmstack_train_loss{job_id="live"} 1.0' in text
    assert 'job_id="old"' not in text and 'job_id="done"' not in text
    assert 'fmstack_app_skipped_files{reason="expired"} 1.0' in text
    assert 'fmstack_app_skipped_files{reason="finished"} 1.0' in text
    assert source.bad_files == 0
    within = AppDirSource(tmp_path, max_age_s=3000.0, clock=lambda: 3999.5)  # old.json: 2999.5 s old
    assert 'fmstack_train_loss{job_id="old"} 1.0' in Exporter([within]).render().decode()
