"""Slurm with ``image`` (pyxis/enroot): the bind-mount sources exist before the container starts, and the log
directory exists before sbatch (Slurm creates neither). The rendered script runs against an srun stub that
refuses a missing mount source the way enroot does (github.com/NVIDIA/pyxis/issues/133)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from fmstack.catalog import Catalog
from fmstack.errors import InputError
from fmstack.orchestration.jobspec import ResolvedJob, parse_jobspec, resolve
from fmstack.orchestration.launchers import get_launcher, shell

SRUN_STUB = r"""#!/bin/bash
# pyxis: every --container-mounts source must exist on the node, else the task fails before it starts
mounts=""; image=""
while [[ "$1" == --* ]]; do
  case "$1" in --container-mounts=*) mounts="${1#--container-mounts=}";; --container-image=*) image=1;; esac
  shift
done
if [ -n "$image" ]; then
  IFS=, read -ra pairs <<< "$mounts"
  for p in "${pairs[@]}"; do
    src="${p%%:*}"
    if [ ! -e "$src" ]; then echo "enroot-mount: failed to mount: $src: No such file or directory" >&2; exit 1; fi
  done
  echo started >> "$STARTED"; exit 0
fi
for i in 0 1; do SLURM_NODEID=$i "$@" || exit $?; done
"""


def _job(tmp: Path, catalog: Catalog, location: Path) -> ResolvedJob:
    spec = {
        "name": "ctr",
        "command": ["/bin/true"],
        "nodes": 2,
        "log_dir": str(tmp / "logs"),
        "image": "busybox",
        "checkpoint": {"location": str(location), "interval_steps": 5},
    }
    return resolve(parse_jobspec(spec), catalog)


def test_first_run_creates_the_checkpoint_mount_source(tmp_path: Path, catalog: Catalog) -> None:
    location = tmp_path / "ckpt" / "it's $(touch PWNED) new"  # also: quoted, never run
    stubs = tmp_path / "bin"
    stubs.mkdir()
    (stubs / "srun").write_text(SRUN_STUB)
    (stubs / "scontrol").write_text('#!/bin/bash\n[ "$2" = hostnames ] && echo n1 || echo "NodeAddr=127.0.0.1"\n')
    for f in stubs.iterdir():
        f.chmod(0o755)
    (tmp_path / "logs").mkdir()
    script = tmp_path / "job.sbatch"
    script.write_text(get_launcher("slurm").render(_job(tmp_path, catalog, location)))
    env = {**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}", "STARTED": str(tmp_path / "started"),
           "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-2]"}  # fmt: skip
    proc = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    # before the fix: exit 1, "enroot-mount: failed to mount: .../ckpt/...: No such file or directory"
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "started").read_text() == "started\n"
    assert location.is_dir()
    assert not list(tmp_path.rglob("PWNED"))


def test_submit_creates_the_log_directory(tmp_path: Path, catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    job = _job(tmp_path, catalog, tmp_path / "ckpt")
    calls: list[list[str]] = []

    def fake_run(argv: list[str], *, input_text: str | None = None, timeout_s: float = 60.0) -> str:
        calls.append(list(argv))
        assert (tmp_path / "logs").is_dir(), "sbatch ran before the log directory existed"
        return "4242\n"

    monkeypatch.setattr(shell, "run", fake_run)
    sub = get_launcher("slurm").submit(job)
    assert sub.job_id == "slurm:4242" and calls == [["sbatch", "--parsable"]]
    assert (tmp_path / "logs").is_dir()


def test_submit_refuses_a_log_directory_it_cannot_create(
    tmp_path: Path, catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "logs").write_text("a file, not a directory")
    job = _job(tmp_path, catalog, tmp_path / "ckpt")
    monkeypatch.setattr(shell, "run", lambda *a, **k: pytest.fail("sbatch must not run"))
    with pytest.raises(InputError, match="log_dir"):
        get_launcher("slurm").submit(job)
