"""The per-node command every launcher runs: torchrun (``python -m torch.distributed.run``) plus the program.

User-written parts (program arguments, environment values) are returned as argv lists; the renderers quote them
with ``shlex.quote`` for shells, or pass them as separate container args for Kubernetes.
Rendezvous is static (``--master-addr`` / ``--master-port`` / ``--node-rank``): node 0 hosts the TCP store, which also
works when several virtual nodes share one host (the Slurm test cluster).
"""

from __future__ import annotations

from fmstack.errors import InputError
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


STOP_WARNING_ENV = "FMSTACK_STOP_WARNING_S"
"""JobSpec ``env`` key that sets the stop lead in seconds (0: none); the JobSpec field ``checkpoint.stop_warning_s``
says the same and is the documented way (the key is kept for specs that use it)."""
DEFAULT_STOP_WARNING_S = 120
"""Seconds a stopping job gets to finish its step, save it and exit: one step, the checkpoint save and the exit must
fit, and Slurm may send its time-limit signal up to 60 s early or late (sbatch(1), ``--signal``); PyTorch
Lightning's SLURM docs use 90 s."""


def saves_on_stop(job: ResolvedJob) -> bool:
    """Whether the job's processes checkpoint the step they are at on SIGTERM: the reference workload with a
    checkpoint (``fmstack.workloads.stop``); a user's program may not."""
    return job.spec.checkpoint is not None and job.spec.command is None


def stop_lead_s(job: ResolvedJob) -> int:
    """Seconds a stopping job gets to save the step it is at (``checkpoint.stop_warning_s``, the env key, or
    :data:`DEFAULT_STOP_WARNING_S`); 0 for a job that does not save on a stop, or when the user says 0. Slurm warns
    this long before the time limit (capped at half of it); Kubernetes waits this long between SIGTERM and SIGKILL;
    torchrun waits this long for its workers after forwarding a SIGTERM."""
    spec = job.spec
    raw = spec.env.get(STOP_WARNING_ENV)
    field = spec.checkpoint.stop_warning_s if spec.checkpoint is not None else None
    if field is not None and raw is not None:
        raise InputError(
            "checkpoint.stop_warning_s", f"{field}, and env.{STOP_WARNING_ENV} says {raw!r}: set one of the two"
        )
    if field is not None:
        lead = field
    elif raw is not None:
        if not raw.isdigit() or int(raw) > 65535:
            raise InputError(
                f"env.{STOP_WARNING_ENV}", f"{raw!r}: seconds before the time limit, an integer 0..65535 (0: none)"
            )
        lead = int(raw)
    else:
        lead = DEFAULT_STOP_WARNING_S
    return lead if saves_on_stop(job) else 0
