"""Application metrics API: numbers by hand, histogram semantics, snapshots, and no prometheus side effects."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from fmstack.observability.app_metrics import TTFT_BUCKETS_S, AppMetrics, AppSnapshot, HistogramData, mfu_ratio


def test_record_step_by_hand() -> None:
    m = AppMetrics(job_id="gpt-small", clock=lambda: 1234.5)
    m.record_step(step_time_s=2.0, tokens=8192, loss=3.5, mfu=0.4, grad_norm=1.25)
    m.record_step(step_time_s=4.0, tokens=8192)
    s = m.snapshot()
    assert s.steps_total == 2 and s.tokens_total == 16384
    assert s.tokens_per_second == 2048.0  # last step: 8192 / 4.0
    assert (s.loss, s.mfu_ratio, s.grad_norm) == (3.5, 0.4, 1.25)  # kept from the step that reported them
    assert s.last_step_timestamp_s == 1234.5
    assert s.step_duration.count == 2 and s.step_duration.total == 6.0


def test_histogram_buckets_are_le_inclusive() -> None:
    h = HistogramData((0.1, 0.5, 1.0))
    for v in (0.1, 0.2, 1.0, 7.0):
        h.observe(v)
    assert h.cumulative() == [(0.1, 1), (0.5, 2), (1.0, 3), (float("inf"), 4)]
    with pytest.raises(ValueError, match="strictly increasing"):
        HistogramData((1.0, 0.5))


def test_ttft_buckets_match_vllm_range() -> None:
    assert TTFT_BUCKETS_S[0] == 0.001 and TTFT_BUCKETS_S[-1] == 2560.0


def test_mfu_by_hand() -> None:
    # 1,000 tok/s x 6 x 1e9 params = 6e12 FLOP/s on one 989 TFLOP/s (H100 SXM BF16 dense) GPU
    assert mfu_ratio(1000, 6 * 1e9, 1, 989) == pytest.approx(6e12 / 989e12, rel=1e-12)
    with pytest.raises(ValueError, match=r"num_gpus\(0\)"):
        mfu_ratio(1000, 6e9, 0, 989)


def test_bad_values_raise() -> None:
    m = AppMetrics()
    with pytest.raises(ValueError, match=r"step_time_s\(0\)"):
        m.record_step(step_time_s=0, tokens=1)
    with pytest.raises(ValueError, match=r"mfu\(1.5\)"):
        m.record_step(step_time_s=1, tokens=1, mfu=1.5)


def test_serving_requests() -> None:
    m = AppMetrics(model_name="llama")
    m.record_request(ttft_s=0.2, itl_s=[0.02, 0.03, 0.02], prompt_tokens=100, generation_tokens=4)
    s = m.snapshot()
    assert (s.requests_total, s.prompt_tokens_total, s.generation_tokens_total) == (1, 100, 4)
    assert s.ttft.count == 1 and s.itl.count == 3 and s.itl.total == pytest.approx(0.07)


def test_snapshot_roundtrip_and_atomic_write(tmp_path: Path) -> None:
    m = AppMetrics(job_id="j", model_name="x")
    m.record_step(1.0, 10, loss=2.0)
    m.record_request(0.5, [0.1])
    path = m.write_snapshot(tmp_path / "j.json")
    assert AppSnapshot.from_json(path.read_text()) == m.snapshot()
    assert [p.name for p in tmp_path.iterdir()] == ["j.json"]  # no temp file left behind
    with pytest.raises(ValueError, match="app snapshot"):
        AppSnapshot.from_json('{"job_id": "j", "model_name": "", "colour": 1}')


def test_threads_do_not_lose_steps() -> None:
    m = AppMetrics()

    def work() -> None:
        for _ in range(500):
            m.record_step(0.1, 1)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert m.snapshot().steps_total == 2000


def test_import_has_no_prometheus_side_effects() -> None:
    code = (
        "import sys, fmstack.observability.app_metrics as a\n"
        "m = a.AppMetrics(job_id='j'); m.record_step(1.0, 1)\n"
        "assert 'prometheus_client' not in sys.modules, 'app_metrics imported prometheus_client'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_app_dir_source_reads_snapshots_and_skips_bad_files(tmp_path: Path) -> None:
    from fmstack.observability.app_source import AppDirSource
    from fmstack.observability.exporter import Exporter

    train = AppMetrics(job_id="train-1", clock=lambda: 50.0)
    train.record_step(step_time_s=0.5, tokens=2048, loss=4.0)
    train.write_snapshot(tmp_path / "train-1.json")
    serve = AppMetrics(job_id="serve-1", model_name="m")
    serve.record_request(ttft_s=0.3, itl_s=[0.02], prompt_tokens=10, generation_tokens=2)
    serve.write_snapshot(tmp_path / "serve-1.json")
    (tmp_path / "half-written.json").write_text('{"job_id": ')
    source = AppDirSource(tmp_path)
    text = Exporter([source]).render().decode().splitlines()
    assert 'fmstack_train_tokens_per_second{job_id="train-1"} 4096.0' in text  # 2048 / 0.5
    assert 'fmstack_train_last_step_timestamp_seconds{job_id="train-1"} 50.0' in text
    assert 'fmstack_serving_time_to_first_token_seconds_bucket{job_id="serve-1",model_name="m",le="0.5"} 1.0' in text
    assert 'fmstack_serving_time_to_first_token_seconds_bucket{job_id="serve-1",model_name="m",le="0.25"} 0.0' in text
    assert 'fmstack_exporter_source_up{source="app"} 1.0' in text
    assert source.bad_files == 1


def _with(snapshot_json: str, **fields: object) -> str:
    data = json.loads(snapshot_json)
    for key, value in fields.items():
        if "." in key:  # histogram.field
            hist, name = key.split(".")
            data[hist][name] = value
        else:
            data[key] = value
    return json.dumps(data)


def test_malformed_snapshot_files_are_bad_files_and_the_others_are_served(tmp_path: Path) -> None:
    from fmstack.observability.app_source import AppDirSource
    from fmstack.observability.exporter import Exporter

    good = AppMetrics(job_id="train-1", clock=lambda: 50.0)
    good.record_step(step_time_s=0.5, tokens=2048, loss=4.0)
    good.write_snapshot(tmp_path / "train-1.json")
    other = AppMetrics(job_id="train-2")
    other.record_step(step_time_s=1.0, tokens=10, loss=2.0)
    text = other.snapshot().to_json()
    (tmp_path / "ids-a-list.json").write_text(_with(text, job_id=["a"]))  # unhashable in the layout key
    (tmp_path / "loss-text.json").write_text(_with(text, loss="abc"))  # float("abc") when rendered
    source = AppDirSource(tmp_path)
    exporter = Exporter([source])
    for scrape in (1, 2):
        lines = exporter.render().decode().splitlines()
        assert 'fmstack_exporter_source_up{source="app"} 1.0' in lines
        assert 'fmstack_train_tokens_per_second{job_id="train-1"} 4096.0' in lines  # 2048 / 0.5
        assert 'fmstack_train_loss{job_id="train-1"} 4.0' in lines
        assert not [line for line in lines if "train-2" in line or 'job_id="a"' in line]
        assert source.bad_files == 2 * scrape
        assert f"fmstack_app_bad_files_total {2.0 * scrape}" in lines  # operators see the skipped files


@pytest.mark.parametrize(
    "fields",
    [
        {"job_id": ["a"]},
        {"model_name": 7},
        {"loss": "abc"},
        {"loss": True},  # a bool is not a number
        {"tokens_per_second": [1.0]},
        {"steps_total": 1.5},
        {"steps_total": True},
        {"tokens_total": "10"},
        {"requests_total": 10**400},  # float() of it overflows when rendered
        {"step_duration.bounds": ["0.1", "1"]},
        {"step_duration.bounds": [False, True]},
        {"step_duration.counts": [0, 0, 1.0]},
        {"step_duration.count": None},
        {"step_duration.total": "0"},
        {"step_duration": [1, 2]},
        {"ttft": {"bounds": [1.0], "counts": [0, 0]}},  # total and count missing
        {"itl": {"bounds": 1.0, "counts": [0, 0], "total": 0.0, "count": 0}},
    ],
)
def test_snapshot_fields_of_the_wrong_type_raise_value_error(fields: dict[str, object]) -> None:
    m = AppMetrics(job_id="j")
    m.record_step(step_time_s=0.5, tokens=2048, loss=4.0)
    with pytest.raises(ValueError, match="app snapshot"):
        AppSnapshot.from_json(_with(m.snapshot().to_json(), **fields))


def test_snapshot_from_json_takes_what_json_writes_for_numbers() -> None:
    m = AppMetrics(job_id="j")
    m.record_step(step_time_s=0.5, tokens=2048)
    text = m.snapshot().to_json()
    hist = {"step_duration.bounds": [1, 2.5], "step_duration.counts": [1, 0, 0], "step_duration.total": 1}
    s = AppSnapshot.from_json(_with(text, loss=4, grad_norm=None, **hist))  # integers where floats were written
    assert s.loss == 4.0 and type(s.loss) is float and s.grad_norm is None
    assert s.step_duration.bounds == (1.0, 2.5) and s.step_duration.total == 1.0
    with pytest.raises(ValueError, match="nested too deeply"):
        AppSnapshot.from_json("[" * 100_000 + "]" * 100_000)


def test_every_snapshot_field_is_checked() -> None:
    from fmstack.observability.app_metrics import _FIELD_CHECKS

    histograms = {"step_duration", "ttft", "itl"}
    assert set(_FIELD_CHECKS) | histograms == {f.name for f in dataclasses.fields(AppSnapshot)}
