"""The per-node command every launcher runs: torchrun (``python -m torch.distributed.run``) plus the program.

User-written parts (program arguments, environment values) are returned as argv lists; the renderers quote them
with ``shlex.quote`` for shells, or pass them as separate container args for Kubernetes.
Rendezvous is static (``--master-addr`` / ``--master-port`` / ``--node-rank``): node 0 hosts the TCP store, which also
works when several virtual nodes share one host (the Slurm test cluster).
"""

from __future__ import annotations

from fmstack.orchestration.jobspec import ResolvedJob, workload_argv

# NCCL over EFA: the aws-ofi-nccl plugin selects libfabric's efa provider (AWS EFA user guide, "Get started with EFA
# and NCCL"; aws-ofi-nccl README). GPUDirect RDMA on p4d/p5 needs FI_EFA_USE_DEVICE_RDMA=1.
EFA_ENV: dict[str, str] = {
    "FI_PROVIDER": "efa",
    "FI_EFA_USE_DEVICE_RDMA": "1",
    "FI_EFA_FORK_SAFE": "1",
    "NCCL_DEBUG": "WARN",
    "NCCL_SOCKET_IFNAME": "^lo,docker",
}


def job_env(job: ResolvedJob) -> dict[str, str]:
    """Environment for every task: EFA settings when the instance has EFA, the plan's parallel degrees
    (``FMSTACK_TP``, ``FMSTACK_PP``, ``FMSTACK_DP``), then the user's env (which wins)."""
    env = dict(EFA_ENV) if job.efa_devices else {}
    plan = job.spec.plan
    if plan is not None:
        env.update({"FMSTACK_TP": str(plan.tp), "FMSTACK_PP": str(plan.pp), "FMSTACK_DP": str(plan.dp)})
    env.update(job.spec.env)
    return env


def torchrun_prefix(job: ResolvedJob) -> list[str]:
    """``python -m torch.distributed.run --nnodes N --nproc-per-node P`` (rendezvous flags are added per launcher)."""
    spec = job.spec
    argv = [
        spec.python,
        "-m",
        "torch.distributed.run",
        f"--nnodes={spec.nodes}",
        f"--nproc-per-node={job.procs_per_node}",
    ]
    if spec.command is not None:
        argv.append("--no-python")  # the user's argv[0] is an executable, not a Python script
    return argv


def program_argv(job: ResolvedJob) -> list[str]:
    return workload_argv(job)
