"""``launch --dry-run`` renders on a laptop without credentials: no network, no files written (operations review,
round 2, defect 1). The checks a dry run leaves out are named on stderr."""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from fmstack.cli.main import cli
from fmstack.errors import InputError
from fmstack.orchestration.ckpt_checks import check_checkpoint_shape
from fmstack.orchestration.jobspec import parse_jobspec
from tests.launch.conftest import P5_SPEC


def _forbid(*_: Any, **__: Any) -> None:
    raise AssertionError("a dry run touched the network or the file system")


@pytest.fixture
def no_side_effects(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket.socket, "connect", _forbid)
    monkeypatch.setattr(socket, "create_connection", _forbid)
    monkeypatch.setattr(socket, "getaddrinfo", _forbid)
    monkeypatch.setattr(tempfile, "mkdtemp", _forbid)
    monkeypatch.setattr(os, "makedirs", _forbid)
    monkeypatch.setattr(os, "mkdir", _forbid)
    monkeypatch.setattr(Path, "mkdir", _forbid)


@pytest.mark.parametrize("on", ["slurm", "kubernetes"])
def test_dry_run_checks_shapes_only(tmp_path: Path, on: str, no_side_effects: None) -> None:
    if on == "kubernetes":
        pytest.importorskip("kubernetes_validate")
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump(P5_SPEC))  # /fsx and s3://ckpts exist only on the cluster
    before = sorted(p.name for p in tmp_path.iterdir())
    result = CliRunner().invoke(cli, ["launch", str(spec), "--on", on, "--dry-run"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert (
        "dry run: not checked: checkpoint.location '/fsx/ckpt/gpt-small' is writable; "
        "checkpoint.durable 's3://ckpts/gpt-small' is reachable"
    ) in result.stderr
    assert ("#SBATCH --job-name=gpt-small" if on == "slurm" else "kind: JobSet") in result.stdout


def test_dry_run_still_refuses_a_bad_shape() -> None:
    url_fast_tier = parse_jobspec({"name": "a", "command": ["true"], "checkpoint": {"location": "s3://b/k"}})
    with pytest.raises(InputError, match=r"checkpoint\.location: 's3://b/k': the fast tier must be a local"):
        check_checkpoint_shape(url_fast_tier)
    bad_url = parse_jobspec({"name": "a", "command": ["true"], "checkpoint": {"location": "/x", "durable": "s3:///k"}})
    with pytest.raises(InputError, match=r"checkpoint\.durable: 's3:///k' is not a path or a URL"):
        check_checkpoint_shape(bad_url)


def test_topology_outside_kubernetes_is_named_as_ignored(tmp_path: Path, no_side_effects: None) -> None:
    """Kueue's topology request means nothing to Slurm: the launch says it ignores it (review of session 7)."""
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({**P5_SPEC, "queue": "q", "topology": {"mode": "required"}}))
    result = CliRunner().invoke(cli, ["launch", str(spec), "--on", "slurm", "--dry-run"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "warning: topology.mode 'required' applies to Kubernetes with Kueue only; --on slurm ignores it" in (
        result.stderr
    )


def test_array_outside_slurm_is_named_as_ignored(tmp_path: Path, no_side_effects: None) -> None:
    """A Slurm job array means nothing to a JobSet: the launch says it runs one job (review of session 11)."""
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({**P5_SPEC, "array": "0-3"}))
    result = CliRunner().invoke(cli, ["launch", str(spec), "--on", "kubernetes", "--dry-run"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "warning: array '0-3' is a Slurm job array; --on kubernetes runs one job and ignores it" in result.stderr
    slurm = CliRunner().invoke(cli, ["launch", str(spec), "--on", "slurm", "--dry-run"], catch_exceptions=False)
    assert "#SBATCH --array=0-3" in slurm.output and "is a Slurm job array" not in slurm.stderr
