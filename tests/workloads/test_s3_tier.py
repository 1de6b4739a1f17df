"""Durable tier on S3 (moto_server on 127.0.0.1 through s3fs/fsspec): committed checkpoints are copied with the
marker last, retention applies there too, and a run whose local tier is gone resumes from S3 exactly."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("s3fs")
from fmstack.workloads import ckpt_store
from fmstack.workloads.metrics import read_loss_curve
from tests.s3server import moto_server
from tests.workloads.conftest import REF_ARGS, prefix

pytestmark = pytest.mark.torch


@pytest.fixture
def s3_options() -> Iterator[dict[str, object]]:
    with moto_server() as endpoint:
        opts: dict[str, object] = {
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"},
        }
        import boto3

        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")  # fmt: skip
        s3.create_bucket(Bucket="ckpts")
        yield opts


def _train(tmp: Path, steps: int, metrics: str, *extra: str) -> str:
    argv = [sys.executable, "-m", "fmstack.workloads.train", "--steps", str(steps), *REF_ARGS]
    argv += ["--metrics-file", str(tmp / metrics), *extra]
    proc = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_resume_from_s3_when_the_local_tier_is_lost(
    tmp_path: Path, s3_options: dict[str, object], reference_curve: dict[int, float]
) -> None:
    tiers = ["--ckpt-dir", str(tmp_path / "local"), "--ckpt-durable", "s3://ckpts/run", "--ckpt-interval", "2"]
    tiers += ["--ckpt-keep", "2", "--storage-options", json.dumps(s3_options)]
    out = _train(tmp_path, 6, "run.jsonl", *tiers)
    assert "ckpt durable step=6" in out
    assert ckpt_store.committed_steps("s3://ckpts/run", s3_options) == [4, 6]  # keep_last=2 on S3 as well
    assert ckpt_store.read_marker("s3://ckpts/run", 6, s3_options)["world_size"] == 1
    shutil.rmtree(tmp_path / "local")  # the node is gone; only the durable tier remains
    out = _train(tmp_path, 8, "run.jsonl", *tiers)
    assert "ckpt resumed step=6 from=s3://ckpts/run" in out
    assert read_loss_curve(tmp_path / "run.jsonl") == prefix(reference_curve, 8)
