"""JobSpecs used by the launch tests."""

from __future__ import annotations

from typing import Any

import pytest

from fmstack.catalog import Catalog
from fmstack.orchestration.jobspec import ResolvedJob, parse_jobspec, resolve
from tests.workloads.conftest import reference_curve  # noqa: F401  (session fixture shared with the Slurm e2e test)

P5_SPEC: dict[str, Any] = {
    "name": "gpt-small",
    "workload": {"model": "small", "parallel": "fsdp", "precision": "bf16", "steps": 1000, "batch_size": 4},
    "nodes": 4,
    "instance": "p5.48xlarge",
    "partition": "gpu",
    "queue": "team-a",
    "namespace": "research",
    "time_limit_min": 120,
    "env": {"HF_HOME": "/fsx/hf"},
    "image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/fmstack:0.1",
    "log_dir": "/fsx/logs",
    "checkpoint": {"location": "/fsx/ckpt/gpt-small", "durable": "s3://ckpts/gpt-small", "interval_steps": 50},
    "retry": {"max_restarts": 3, "backoff_s": 10, "requeue_exit_codes": [75]},
    "plan": {"tp": 1, "pp": 1, "dp": 32},
}


@pytest.fixture
def p5_job(catalog: Catalog) -> ResolvedJob:
    return resolve(parse_jobspec(P5_SPEC), catalog)


GB200_SLURM_SPEC: dict[str, Any] = {
    "name": "gpt-gb",
    "workload": {"model": "small", "parallel": "fsdp", "precision": "bf16", "steps": 1000, "batch_size": 4},
    "nodes": 36,  # two u-p6e-gb200x72 racks of 18 nodes: --segment=18
    "instance": "p6e-gb200.36xlarge",
    "partition": "gpu",
    "time_limit_min": 120,
    "image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/fmstack:0.1",
    "log_dir": "/fsx/logs",
    "checkpoint": {"location": "/fsx/ckpt/gpt-gb", "interval_steps": 50},
}
