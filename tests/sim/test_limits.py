"""Limits of a fleet-twin run: --jobs, --days, --nodes and --spares are bounded (a huge value used to run out of
memory or time), and a trace is cut at the same job limit; each refusal is one InputError naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from fmstack.errors import InputError
from fmstack.sim.config import MAX_DAYS, MAX_JOBS, MAX_NODES, SimConfig
from fmstack.sim.workload import read_trace


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"jobs": MAX_JOBS + 1}, "jobs: must be 1 to 1,000,000"),
        ({"jobs": 0}, "jobs: must be 1 to 1,000,000"),
        ({"days": MAX_DAYS * 2}, "days: must be > 0 and <= 366"),
        ({"nodes": MAX_NODES + 1}, "nodes: must be 1 to 100,000"),
        ({"nodes": -1}, "nodes: must be 1 to 100,000"),
        ({"nodes": 4, "spares": 5}, "spares: must be 0 to nodes (4), got 5"),
    ],
)
def test_config_limits(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(InputError, match=match.replace("(", r"\(").replace(")", r"\)")):
        SimConfig(**kwargs)  # type: ignore[arg-type]


def test_limits_themselves_are_accepted() -> None:
    cfg = SimConfig(jobs=MAX_JOBS, days=MAX_DAYS, nodes=MAX_NODES, spares=MAX_NODES)
    assert cfg.horizon_s == 366 * 86400.0


def test_trace_over_the_job_limit_names_the_line(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_s,num_gpus,duration_s\n1,0,8,600\n2,10,8,600\n3,20,8,600\n")
    assert len(read_trace(trace, fleet_gpus=16, gpus_per_node=8, max_jobs=3)) == 3
    with pytest.raises(InputError, match=r"t\.csv line 4: more than 2 jobs"):
        read_trace(trace, fleet_gpus=16, gpus_per_node=8, max_jobs=2)


def test_trace_header_and_row_shapes_are_checked(tmp_path: Path) -> None:
    """Review, 2026-11-24: a duplicate header column was read silently; a trailing comma got a hint about quoting."""
    dup = tmp_path / "dup.csv"
    dup.write_text("job_id,submit_s,num_gpus,duration_s,job_id\n1,0,8,7200,2\n")
    with pytest.raises(InputError, match=r"^trace: dup.csv line 1: column job_id appears twice in the header$"):
        read_trace(dup, fleet_gpus=16, gpus_per_node=8)
    trailing = tmp_path / "tc.csv"
    trailing.write_text("job_id,submit_s,num_gpus,duration_s\n1,0,8,7200,\n")
    with pytest.raises(InputError, match=r"line 2: 5 fields, the header has 4; remove the trailing comma$"):
        read_trace(trailing, fleet_gpus=16, gpus_per_node=8)
