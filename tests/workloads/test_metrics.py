"""Per-step metrics: JSON lines that round-trip floats exactly, and the observability AppMetrics snapshot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fmstack.workloads.metrics import AppMetricsSink, FanOut, JsonlMetrics, StepRecord, read_loss_curve


def test_jsonl_and_app_metrics(tmp_path: Path) -> None:
    sink = FanOut(JsonlMetrics(tmp_path / "m.jsonl"), AppMetricsSink("job-7", tmp_path / "app"))
    loss = 5.611125469207764
    sink.record(StepRecord(step=1, loss=loss, step_time_s=0.5, tokens_per_s=256.0, tokens=128))
    sink.record(StepRecord(step=2, loss=1 / 3, step_time_s=0.25, tokens_per_s=512.0, tokens=128))
    sink.record(StepRecord(step=2, loss=0.25, step_time_s=0.25, tokens_per_s=512.0, tokens=128))  # a resumed rerun
    sink.close()
    assert read_loss_curve(tmp_path / "m.jsonl") == {1: loss, 2: 0.25}
    snap = json.loads((tmp_path / "app" / "job-7.json").read_text())
    # three steps of 128 tokens; the last took 0.25 s -> 512 tokens/s
    assert snap["job_id"] == "job-7"
    assert snap["steps_total"] == 3
    assert snap["tokens_total"] == 384
    assert snap["tokens_per_second"] == 512.0
    assert snap["loss"] == 0.25


def test_app_sink_finish_writes_the_snapshot_once_more(tmp_path: Path) -> None:
    sink = FanOut(JsonlMetrics(tmp_path / "m.jsonl"), AppMetricsSink("job-8", tmp_path / "app"))
    sink.record(StepRecord(step=1, loss=2.0, step_time_s=0.5, tokens_per_s=256.0, tokens=128))
    path = tmp_path / "app" / "job-8.json"
    assert json.loads(path.read_text())["finished"] is False  # running: served, the stall rule watches it
    sink.finish()
    sink.close()
    snap = json.loads(path.read_text())
    assert (snap["finished"], snap["steps_total"]) == (True, 1)


@pytest.mark.torch
def test_bf16_autocast_forward_on_cpu() -> None:
    torch = pytest.importorskip("torch")
    from fmstack.workloads.gpt import GPTConfig, build_model, synthetic_batch

    cfg = GPTConfig()
    torch.manual_seed(0)
    model = build_model(cfg)
    x, y = synthetic_batch(cfg, seed=0, step=1, rank=0, batch_size=2)
    assert x.shape == (2, 32) and bool((x[:, 1:] == y[:, :-1]).all())  # y is x shifted by one token
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(x)
    assert logits.dtype == torch.bfloat16 and logits.shape == (2, 32, 256)
    loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, 256), y.reshape(-1))
    # an untrained model is close to uniform over 256 tokens: ln(256) = 5.545
    assert abs(loss.item() - 5.545) < 0.5
