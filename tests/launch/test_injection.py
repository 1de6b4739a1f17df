"""User text reaches a shell only as quoted words: the rendered local and sbatch scripts are executed with a fake
interpreter that records the argv and environment it receives; nothing the user did not write runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fmstack.catalog import Catalog
from fmstack.orchestration.jobspec import ResolvedJob, parse_jobspec, resolve
from fmstack.orchestration.launchers import get_launcher
from fmstack.orchestration.launchers.k8s_manifests import render_jobset

EVIL = [
    "'; touch PWNED1; '",
    "$(touch PWNED2)",
    "`touch PWNED3`",
    "a\ntouch PWNED4",
    "\"double\" 'single' \\ back",
    "--x=$(touch PWNED5)",
    "$HOME ${HOME} ; && || | > out",
]
EVIL_ENV = "$(touch PWNED6)`touch PWNED7`'\"\n"


def _job(tmp: Path, catalog: Catalog, nodes: int = 1) -> ResolvedJob:
    fake = tmp / "fakepython"
    fake.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        "with open(os.environ['DUMP'], 'a') as f:\n"
        "    f.write(json.dumps({'argv': sys.argv[1:], 'evil': os.environ.get('EVIL')}) + '\\n')\n"
    )
    fake.chmod(0o755)
    spec = {
        "name": "inject",
        "command": ["/bin/echo", *EVIL],
        "nodes": nodes,
        "python": str(fake),
        "log_dir": str(tmp),
        "env": {"EVIL": EVIL_ENV},
        "image": "busybox",
    }
    return resolve(parse_jobspec(spec), catalog)


def _received(tmp: Path) -> list[dict[str, object]]:
    return [json.loads(x) for x in (tmp / "dump.jsonl").read_text().splitlines()]


def _no_pwned(tmp: Path) -> None:
    assert not [p for p in tmp.rglob("PWNED*")], "user text was executed"
    assert not (tmp / "out").exists()


def test_local_script_quotes_everything(tmp_path: Path, catalog: Catalog) -> None:
    job = _job(tmp_path, catalog)
    script = tmp_path / "job.sh"
    script.write_text(get_launcher("local").render(job, state_dir=str(tmp_path)))  # type: ignore[call-arg]
    env = {**os.environ, "DUMP": str(tmp_path / "dump.jsonl")}
    subprocess.run(["bash", str(script)], check=True, cwd=tmp_path, env=env, timeout=60)
    (got,) = _received(tmp_path)
    assert got["argv"][-len(EVIL) - 1 :] == ["/bin/echo", *EVIL]  # type: ignore[index]
    assert got["evil"] == EVIL_ENV
    _no_pwned(tmp_path)


def test_sbatch_script_quotes_everything(tmp_path: Path, catalog: Catalog) -> None:
    job = _job(tmp_path, catalog, nodes=2)
    stubs = tmp_path / "bin"
    stubs.mkdir()
    # srun runs its command once per node with that node's SLURM_NODEID, as Slurm does
    (stubs / "srun").write_text(
        '#!/bin/bash\nwhile [[ "$1" == --* ]]; do shift; done\nfor i in 0 1; do SLURM_NODEID=$i "$@" || exit $?; done\n'
    )
    (stubs / "scontrol").write_text(
        '#!/bin/bash\nif [ "$2" = hostnames ]; then echo n1; echo n2; else echo "NodeName=$3 NodeAddr=127.0.0.1 State=IDLE"; fi\n'
    )
    for f in stubs.iterdir():
        f.chmod(0o755)
    script = tmp_path / "job.sbatch"
    script.write_text(get_launcher("slurm").render(job))
    env = {**os.environ, "DUMP": str(tmp_path / "dump.jsonl"), "PATH": f"{stubs}:{os.environ['PATH']}",
           "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "n[1-2]"}  # fmt: skip
    subprocess.run(["bash", str(script)], check=True, cwd=tmp_path, env=env, timeout=60)
    runs = _received(tmp_path)
    assert len(runs) == 2
    for rank, got in enumerate(runs):
        argv = got["argv"]
        assert f"--node-rank={rank}" in argv  # type: ignore[operator]
        assert "--master-addr=127.0.0.1" in argv  # type: ignore[operator]
        assert "--master-port=24242" in argv  # type: ignore[operator]  # 20000 + 4242 % 20000
        assert argv[-len(EVIL) - 1 :] == ["/bin/echo", *EVIL]  # type: ignore[index]
        assert got["evil"] == EVIL_ENV
    _no_pwned(tmp_path)


def test_kubernetes_escapes_variable_expansion(tmp_path: Path, catalog: Catalog) -> None:
    m = render_jobset(_job(tmp_path, catalog))
    c = m["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    # Kubernetes expands $(VAR) in args and env values; $$ is the literal-dollar escape
    assert "$$(touch PWNED2)" in c["args"]
    assert "--x=$$(touch PWNED5)" in c["args"]
    assert {"name": "EVIL", "value": EVIL_ENV.replace("$", "$$")} in c["env"]
    assert "--node-rank=$(NODE_RANK)" in c["args"]  # ours, expanded on purpose


@pytest.mark.parametrize("name", ["a$(id)", "a;b", "a`b`", "a\nb", "A'b"])
def test_names_a_shell_could_read_are_refused(name: str) -> None:
    from fmstack.errors import InputError

    with pytest.raises(InputError, match="field 'name'"):
        parse_jobspec({"name": name, "command": ["true"]})
