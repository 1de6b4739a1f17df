"""``fmstack launch SPEC --on local|slurm|kubernetes|pytorchjob [--dry-run]``, ``fmstack status ID``,
``fmstack cancel ID``: parse, call the orchestration layer, print."""

from __future__ import annotations

from pathlib import Path

import click

from fmstack.catalog import load_catalog
from fmstack.cli.common import catalog_option, json_option, print_json
from fmstack.errors import InputError
from fmstack.orchestration.ckpt_checks import check_checkpoint_location, check_checkpoint_shape, node_local_warning
from fmstack.orchestration.jobspec import load_jobspec, resolve
from fmstack.orchestration.launchers.base import LAUNCHERS, get_launcher, split_job_id
from fmstack.orchestration.mount_checks import mount_warnings


@click.command(
    epilog="Example:\n\n  fmstack launch job.yaml --on slurm --dry-run\n\n  fmstack launch job.yaml --on local",
)
@click.argument("spec", type=click.Path(path_type=Path))
@click.option("--on", "on", required=True, type=click.Choice(sorted(LAUNCHERS)), help="Where to run the job.")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print the rendered script or manifest; submit nothing. Checks shapes only: no network, no files.",
)
@catalog_option
@json_option
def launch(spec: Path, on: str, dry_run: bool, catalog_dir: Path | None, as_json: bool) -> None:
    """Validate a JobSpec, render it for a launcher and submit it (docs/launch.md)."""
    job = resolve(load_jobspec(spec), load_catalog(catalog_dir))
    launcher = get_launcher(on)
    launcher.render(job)  # render errors surface before any location probe or submission
    ck = job.spec.checkpoint
    in_pods = on in ("kubernetes", "pytorchjob") and ck is not None and ck.pvc is not None
    if dry_run:
        # a dry run renders on a laptop without credentials: no probe directory, no S3 call (shapes only)
        skipped = check_checkpoint_shape(job.spec)[1 if in_pods else 0 :]  # a claim is never checked from here
        if skipped:
            click.echo(f"dry run: not checked: {'; '.join(skipped)}", err=True)
    else:
        check_checkpoint_location(job.spec, fast_tier_on_this_host=not in_pods)
    if on != "local" and (warning := node_local_warning(job.spec, target=on)):
        click.echo(warning, err=True)
    topo = job.spec.topology
    if topo.mode != "none" and on not in ("kubernetes", "pytorchjob"):
        # Kueue's topology-aware scheduling has no meaning on Slurm or a local run (Slurm: --switches / topology.conf)
        click.echo(f"warning: topology.mode {topo.mode!r} applies to Kubernetes with Kueue only; --on {on} ignores it",
                   err=True)  # fmt: skip
    if job.spec.array is not None and on != "slurm":
        click.echo(f"warning: array {job.spec.array!r} is a Slurm job array; --on {on} runs one job and ignores it",
                   err=True)  # fmt: skip
    elif job.spec.array is not None and job.spec.command is not None:
        click.echo(f"warning: array {job.spec.array!r} runs the same command in every task; it must read "
                   "SLURM_ARRAY_TASK_ID to keep its checkpoints and outputs apart", err=True)  # fmt: skip
    elif job.spec.array is not None and job.spec.workload is not None:
        # the per-task values come before extra_args, and argparse keeps an option's last value
        per_task = ("--seed", "--ckpt-dir", "--ckpt-durable")
        given = [a.partition("=")[0] for a in job.spec.workload.extra_args if a.partition("=")[0] in per_task]
        for flag in dict.fromkeys(given):
            click.echo(f"warning: workload.extra_args sets {flag}, which overrides the per-task value of array "
                       f"{job.spec.array!r}: every task gets the same one", err=True)  # fmt: skip
    for line in mount_warnings(job, on):
        click.echo(line, err=True)
    sub = launcher.submit(job, dry_run=dry_run)
    if as_json:
        print_json({"job_id": sub.job_id, "dry_run": sub.dry_run, "rendered": sub.rendered})
    elif dry_run:
        click.echo(sub.rendered, nl=False)
    else:
        click.echo(sub.job_id)


@click.command(epilog="Example:\n\n  fmstack status slurm:42")
@click.argument("job_id", metavar="ID")
@json_option
def status(job_id: str, as_json: bool) -> None:
    """Show a job's state: PENDING, RUNNING, COMPLETED, FAILED, CANCELLED or UNKNOWN."""
    launcher, native = split_job_id(job_id)
    st = launcher.status(native)
    if as_json:
        print_json({"job_id": st.job_id, "state": st.state, "detail": st.detail, "restarts": st.restarts})
    else:
        click.echo(f"{st.job_id} {st.state} restarts={st.restarts} {st.detail}")


@click.command(epilog="Example:\n\n  fmstack cancel slurm:42\n\n  fmstack cancel slurm:42 --now\n\n"
               "  fmstack cancel local:NAME-... --grace-s 5")  # fmt: skip
@click.argument("job_id", metavar="ID")
@click.option(
    "--grace-s",
    type=float,
    default=None,
    help="Local jobs: seconds from SIGTERM to SIGKILL [default: 30, as Slurm's KillWait]. Slurm and Kubernetes "
    "apply their own (KillWait, terminationGracePeriodSeconds).",
)
@click.option(
    "--now",
    is_flag=True,
    help="Slurm jobs: plain scancel, without letting the steps checkpoint first (srun kills its tasks at once).",
)
def cancel(job_id: str, grace_s: float | None, now: bool) -> None:
    """Cancel a job. One that has already ended keeps its final state: says so, exit 0. A local job gets SIGTERM,
    then SIGKILL if still alive after --grace-s; the line says which stopped it. A running Slurm job launched by
    fmstack with a checkpoint saves the step it is at, then ends CANCELLED (--now: at once)."""
    from fmstack.orchestration.launchers.base import AlreadyEnded
    from fmstack.orchestration.launchers.local import DEFAULT_GRACE_S, LocalLauncher
    from fmstack.orchestration.launchers.slurm import SlurmLauncher

    launcher, native = split_job_id(job_id)
    if grace_s is not None and not isinstance(launcher, LocalLauncher):
        raise InputError("--grace-s", f"applies to local jobs only; {launcher.name} applies its own grace period")
    if now and not isinstance(launcher, SlurmLauncher):
        raise InputError("--now", f"applies to Slurm jobs only; {launcher.name} jobs get SIGTERM and a grace period")
    if grace_s is not None and not 0 <= grace_s < float("inf"):
        raise InputError("--grace-s", f"{grace_s:g}: must be a finite number of seconds >= 0")
    try:
        if isinstance(launcher, LocalLauncher):
            outcome = launcher.stop(native, DEFAULT_GRACE_S if grace_s is None else grace_s)
            click.echo(f"{job_id} cancel requested; {outcome}")
            return
        if isinstance(launcher, SlurmLauncher):
            click.echo(f"{job_id} cancel requested; {launcher.cancel(native, checkpoint=not now)}")
            return
        launcher.cancel(native)
    except AlreadyEnded as ended:  # nothing to do: the job keeps its final state (exit 0, as a no-op)
        click.echo(f"{job_id} already ended ({ended.state}); nothing to cancel")
        return
    click.echo(f"{job_id} cancel requested")
