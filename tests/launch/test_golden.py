"""Rendered sbatch script, local script, JobSet and PyTorchJob compared exactly with reviewed golden files.

Regenerate after a reviewed change: ``FMSTACK_REGEN_GOLDEN=1 python3 -m pytest tests/launch/test_golden.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fmstack.catalog import Catalog
from fmstack.errors import InputError
from fmstack.orchestration.jobspec import ResolvedJob, parse_jobspec, resolve
from fmstack.orchestration.launchers import get_launcher
from tests.launch.conftest import P5_SPEC

GOLDEN = Path(__file__).parent / "golden"
CASES = {
    "slurm": "sbatch_p5.sh",
    "local": "local_p5.sh",
    "kubernetes": "jobset_p5.yaml",
    "pytorchjob": "pytorchjob_p5.yaml",
}


@pytest.mark.parametrize("launcher", sorted(CASES))
def test_render_matches_golden(launcher: str, p5_job: ResolvedJob, catalog: Catalog) -> None:
    if launcher == "local":  # one node only
        p5_job = resolve(parse_jobspec({**P5_SPEC, "nodes": 1, "plan": None}), catalog)
    text = get_launcher(launcher).render(p5_job)
    path = GOLDEN / CASES[launcher]
    if os.environ.get("FMSTACK_REGEN_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8")


def test_sbatch_carries_what_the_issue_asks(p5_job: ResolvedJob) -> None:
    text = get_launcher("slurm").render(p5_job)
    for needle in ("#SBATCH --nodes=4", "#SBATCH --gres=gpu:8", "#SBATCH --exclusive", "#SBATCH --time=120",
                   "#SBATCH --requeue", "export FI_PROVIDER=efa", "--nnodes=4 --nproc-per-node=8",
                   'for code in 75; do', 'failures=$(( ${SLURM_RESTART_COUNT:-0} - ${limit_requeues:-0} ))',
                   '[ "$failures" -lt 3 ]'):  # fmt: skip
        assert needle in text, needle


def test_jobset_requests_gpus_efa_and_a_queue(p5_job: ResolvedJob) -> None:
    m = get_launcher("kubernetes").manifest(p5_job)  # type: ignore[attr-defined]
    assert m["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert m["spec"]["suspend"] is True
    assert m["spec"]["network"] == {"enableDNSHostnames": True, "subdomain": "gpt-small"}
    job = m["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert (job["parallelism"], job["completions"], job["completionMode"]) == (4, 4, "Indexed")
    limits = job["template"]["spec"]["containers"][0]["resources"]["limits"]
    # EKS node-efa: EFA pods also request 2 MiB huge pages (test_k8s_efa.py)
    assert limits == {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "32", "hugepages-2Mi": "5120Mi"}


def test_local_refuses_more_than_one_node(p5_job: ResolvedJob) -> None:
    with pytest.raises(InputError, match="nodes: 4: the local launcher runs on this machine only; allowed: 1"):
        get_launcher("local").render(p5_job)


def test_sbatch_runs_the_image_through_pyxis(p5_job: ResolvedJob) -> None:
    sruns = [line for line in get_launcher("slurm").render(p5_job).splitlines() if line.startswith("srun ")]
    # first a step that creates the checkpoint mount source on every node, then the training step
    assert sruns[0].startswith("srun --nodes=4 --ntasks-per-node=1 mkdir -p -- /fsx/ckpt/gpt-small ||")
    srun = sruns[1]
    image = "123456789012.dkr.ecr.us-east-1.amazonaws.com/fmstack:0.1"
    assert f"--container-image={image}" in srun
    assert "--container-mounts=/fsx/logs:/fsx/logs,/fsx/ckpt/gpt-small:/fsx/ckpt/gpt-small" in srun
