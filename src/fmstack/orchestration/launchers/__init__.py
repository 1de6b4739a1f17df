"""Launchers: local torchrun, Slurm sbatch, Kubernetes JobSet / PyTorchJob. See ``base.LAUNCHERS``."""

from fmstack.orchestration.launchers.base import JobStatus, Launcher, Submission, get_launcher, split_job_id

__all__ = ["JobStatus", "Launcher", "Submission", "get_launcher", "split_job_id"]
