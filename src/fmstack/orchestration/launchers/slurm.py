"""Slurm launcher: an sbatch script (srun + torchrun on every node), submitted, queried and cancelled through the
Slurm commands (``sbatch --parsable``, ``scontrol show job -o``, ``scancel``, ``scontrol requeue``).

Directives follow sbatch(1): ``--nodes``, ``--ntasks-per-node=1`` (torchrun starts the per-GPU processes),
``--gres=gpu:N``, ``--exclusive``, ``--time``, ``--requeue`` (Slurm requeues on node failure; the script requeues
itself on the JobSpec's ``requeue_exit_codes``, srun's status or a task's own code, while its failure requeues are
fewer than ``max_restarts``, and never after SIGTERM to the batch shell: ``slurm_requeue``), ``--array``.
The rendezvous host is the first node's NodeAddr (``scontrol show node``), which also resolves for virtual nodes.

Checkpoint before the time limit: a reference-workload job with a checkpoint asks for ``--signal=B:USR1@N``
(Slurm sends SIGUSR1 to the batch shell N seconds, give or take Slurm's 60 s event resolution, before the limit;
sbatch(1)). The script's trap turns it into ``scancel --signal=TERM $SLURM_JOB_ID``: SIGTERM to the job steps only,
not to the batch step where srun runs (srun answers a SIGTERM of its own with SIGKILL to its tasks: "forcing job
termination", src/srun/srun_job.c). torchrun forwards it, every rank finishes its step, they agree, the step is
checkpointed (``fmstack.workloads.stop``), and the script requeues the job, which resumes from that step.
USR1 and not TERM: without ``B:`` Slurm would also signal torchrun, which dies of a SIGUSR1 it does not handle.

Cancel with a checkpoint: the same script traps SIGUSR2, which ``fmstack cancel`` sends to the batch shell alone
(``scancel --batch --signal=USR2``) when the script carries :data:`GRACEFUL_CANCEL_MARK`. The trap stops the steps as
the time-limit warning does; once they have saved and exited the script cancels its own job (``scancel
$SLURM_JOB_ID``), so it ends CANCELLED, not requeued. A plain ``scancel`` instead signals srun too, which kills
its tasks at once, possibly in the middle of a save.
"""

from __future__ import annotations

import os
import shlex

from fmstack.errors import InputError
from fmstack.observability.actions import Action
from fmstack.orchestration.jobspec import ResolvedJob, parse_mount
from fmstack.orchestration.launchers import shell, slurm_gb200, slurm_requeue
from fmstack.orchestration.launchers.base import ENDED, AlreadyEnded, JobStatus, Submission
from fmstack.orchestration.launchers.torchrun import (
    DEFAULT_STOP_WARNING_S as DEFAULT_STOP_WARNING_S,
)
from fmstack.orchestration.launchers.torchrun import (
    job_env,
    program_argv,
    saves_on_stop,
    stop_lead_s,
    torchrun_prefix,
)

_STATES = {
    "PENDING": "PENDING", "CONFIGURING": "PENDING", "REQUEUED": "PENDING", "REQUEUE_HOLD": "PENDING",
    "RUNNING": "RUNNING", "COMPLETING": "RUNNING", "SUSPENDED": "RUNNING",
    "COMPLETED": "COMPLETED", "CANCELLED": "CANCELLED",
    "FAILED": "FAILED", "TIMEOUT": "FAILED", "NODE_FAIL": "FAILED", "OUT_OF_MEMORY": "FAILED", "PREEMPTED": "FAILED",
    "BOOT_FAIL": "FAILED", "DEADLINE": "FAILED",
}  # fmt: skip


def _container_mounts(job: ResolvedJob) -> list[str]:
    """The host paths fmstack mounts into the container at the same paths: the log directory and the checkpoint
    tiers that are file-system paths (none without ``image``)."""
    spec = job.spec
    if not spec.image:
        return []
    mounts = [job.log_dir]
    if spec.checkpoint is not None:
        mounts.append(os.path.abspath(spec.checkpoint.location))
        durable = spec.checkpoint.durable
        if durable and ("://" not in durable or durable.startswith("file://")):
            mounts.append(os.path.abspath(durable.removeprefix("file://")))
    for m in mounts:
        if "," in m or ":" in m:
            raise InputError(
                "log_dir/checkpoint", f"{m!r}: a path mounted into the container must not contain ',' or ':'"
            )
    return list(dict.fromkeys(mounts))


def container_mount_entries(job: ResolvedJob) -> list[tuple[str, str, str]]:
    """(source, destination, flags) of every pyxis bind mount, none without ``image``: fmstack's own
    (:func:`_container_mounts`), then the JobSpec's ``container_mounts``; one per destination, the first wins."""
    if not job.spec.image:
        return []
    own = [(m, m, "") for m in _container_mounts(job)]
    by_dst: dict[str, tuple[str, str, str]] = {os.path.normpath(e[1]): e for e in own}
    for text in job.spec.container_mounts:
        src, dst, flags = parse_mount(text)
        taken = by_dst.get(os.path.normpath(dst))
        if taken is not None and taken in own and os.path.normpath(src) != os.path.normpath(taken[0]):
            raise InputError(
                "container_mounts",
                f"{text!r} mounts onto {dst}, which fmstack mounts from {taken[0]} for the job's logs or checkpoints; "
                "mount it at another path, or change log_dir / checkpoint.location",
            )
        # a mount onto a parent of fmstack's own, applied after it, would cover the log or checkpoint directory
        parent = os.path.normpath(dst).rstrip("/") + "/"
        hidden = [m for _, m, _ in own if os.path.normpath(m).startswith(parent) or parent == "/"]
        if hidden:
            raise InputError(
                "container_mounts",
                f"{text!r} mounts onto {dst}, a parent of {', '.join(hidden)} that fmstack mounts for the job's logs or "
                "checkpoints, and would cover them in the container; mount it at another path",
            )
        by_dst.setdefault(os.path.normpath(dst), (src, dst, flags))
    return list(by_dst.values())


def _container_flags(job: ResolvedJob) -> str:
    """With ``image``, srun runs each task in that container through NVIDIA's pyxis/enroot plugin
    (``--container-image``; github.com/NVIDIA/pyxis, the container runtime of AWS ParallelCluster and SageMaker
    HyperPod Slurm images), with the log directory and the checkpoint location mounted at the same paths."""
    mounts = container_mount_entries(job)
    if not mounts:
        return ""
    joined = ",".join(":".join(p for p in e if p) for e in mounts)
    return f" --container-image={shlex.quote(job.spec.image or '')} --container-mounts={shlex.quote(joined)}"


def _mount_sources(job: ResolvedJob) -> list[str]:
    """Create the checkpoint mount sources on every node before the container starts: a bind mount needs its
    source, and a first run's checkpoint directory does not exist yet (enroot: "enroot-mount: failed to mount:
    SRC at ...: No such file or directory", github.com/NVIDIA/pyxis/issues/133), so every task would fail before
    the workload could create it. The log directory exists: ``submit`` creates it (Slurm opens the output there)."""
    sources = [m for m in _container_mounts(job) if m != job.log_dir]
    if not sources:
        return []
    nodes = job.spec.nodes
    mkdir = shlex.join(["mkdir", "-p", "--", *sources])
    say = shlex.quote("fmstack: cannot create the container mount source(s) " + " ".join(sources))
    return [
        "# container mounts need their source directories on every node (pyxis/enroot bind mounts)",
        f"srun --nodes={nodes} --ntasks-per-node=1 {mkdir} || {{ echo {say} >&2; exit 1; }}",
    ]


ARRAY_TASK_ID = '"$SLURM_ARRAY_TASK_ID"'
"""The shell word each srun task reads its array index from (Slurm sets it in the batch environment; srun passes
it on; a requeued task keeps its index)."""


def _program_words(job: ResolvedJob) -> str:
    """The program's argv as shell words. In an array job every task of the reference workload gets its own
    checkpoint directory and durable prefix (``.../task-$SLURM_ARRAY_TASK_ID``) and seed (``seed + task id``):
    with one shared directory the tasks overwrite each other's ``step_*`` checkpoints and a requeued task resumes
    from another task's state, the hazard the local launcher refuses for two jobs. The user's ``extra_args`` and a
    ``command`` are left as written (a command reads ``SLURM_ARRAY_TASK_ID`` itself)."""
    argv = program_argv(job)
    words = [shlex.quote(a) for a in argv]
    w = job.spec.workload
    if job.spec.array is None or w is None:
        return " ".join(words)
    own = len(argv) - len(w.extra_args)
    for i in range(own - 1):
        flag, value = argv[i], argv[i + 1]
        if flag in ("--ckpt-dir", "--ckpt-durable"):
            words[i + 1] = shlex.quote(value.rstrip("/") + "/task-") + ARRAY_TASK_ID
        elif flag == "--seed":
            words[i + 1] = f'"$(({int(value)} + SLURM_ARRAY_TASK_ID))"'
    return " ".join(words)


def _array_comment(job: ResolvedJob) -> list[str]:
    spec = job.spec
    if spec.array is None:
        return []
    if spec.workload is None:
        return ["# array job: every task runs the same command; it reads SLURM_ARRAY_TASK_ID to keep its outputs apart"]
    line = f"# array job: task N trains with seed {spec.workload.seed} + N"
    if spec.checkpoint is not None:
        line += " and saves to <tier>/task-N; a requeued task keeps N and resumes its own checkpoint"
    return [line]


def stop_warning_s(job: ResolvedJob) -> int:
    """Seconds before the time limit at which the job is told to checkpoint and stop; 0 for none. Only the
    reference workload with a checkpoint gets one: a program that cannot save would just stop early and restart
    from scratch. At most half the time limit, so a short job still trains before it is warned."""
    return min(stop_lead_s(job), job.spec.time_limit_min * 60 // 2)


GRACEFUL_CANCEL_MARK = "# fmstack: graceful cancel on USR2"
"""A line of every batch script that traps SIGUSR2 as a cancel with a checkpoint (``SlurmLauncher.cancel`` reads
the job's stored script for it: a shell without the trap would die of SIGUSR2 and leave the job FAILED)."""


def _stop_lines(lead_s: int, saves: bool) -> list[str]:
    """Run srun in the background and wait, so the batch shell's traps run while the job steps work. SIGUSR1 (the
    time-limit warning) becomes SIGTERM to the steps and a requeue once they have exited; SIGUSR2 (``fmstack
    cancel``, jobs that save on a stop) SIGTERM to the steps and a cancel once they have exited; SIGTERM to the batch
    shell itself (scancel, preemption, the time limit) is only noted, so the shell outlives its steps' saves."""
    lines = ['stop=""']
    if lead_s:
        lines += [
            f"# time limit in ~{lead_s} s (--signal=B:USR1): the steps checkpoint and stop; the job is requeued",
            'trap \'stop=USR1; echo "fmstack: time-limit warning: checkpoint and stop"; '
            'scancel --signal=TERM "$SLURM_JOB_ID"\' USR1',
        ]
    if saves:
        lines += [
            f"{GRACEFUL_CANCEL_MARK} (sent by fmstack cancel to this shell alone): the steps checkpoint and stop, "
            "then the job cancels itself",
            'trap \'stop=CANCEL; echo "fmstack: cancel requested: checkpoint and stop"; '
            'scancel --signal=TERM "$SLURM_JOB_ID"\' USR2',
        ]
    lines.append("trap 'stop=${stop:-TERM}; echo \"fmstack: SIGTERM: waiting for the steps to checkpoint\"' TERM")
    return lines


def _after_stop(lead_s: int, saves: bool) -> list[str]:
    """After a cancel stopped the steps, cancel the job (it ends CANCELLED, not FAILED with the steps' exit 143).
    After the time-limit warning stopped them, requeue: the job resumes from the checkpoint of the step it stopped
    at. Not counted against ``retry.max_restarts`` (a time limit is not a failure), though Slurm's
    ``SLURM_RESTART_COUNT``, which the exit-code requeue below compares with it, counts every requeue."""
    lines = []
    if saves:
        lines += [
            "# a cancel's steps have saved and exited: end the job as cancelled (scancel signals this shell: trapped)",
            'if [ "$stop" = CANCEL ]; then',
            '  echo "fmstack: stopped for cancel (exit $rc)"; scancel "$SLURM_JOB_ID"; exit "$rc"',
            "fi",
        ]
    if lead_s:
        lines += [
            "# a run that finished its steps inside the warning exits 0 and is not requeued",
            'if [ "$stop" = USR1 ] && [ "$rc" -ne 0 ]; then',
            f'  echo "{slurm_requeue.TIME_LIMIT_REQUEUE} (exit $rc); requeue to resume"; scontrol requeue '
            '"$SLURM_JOB_ID"; exit 0',
            "fi",
        ]
    return lines


def render_sbatch(job: ResolvedJob) -> str:
    """The sbatch script for ``job``; everything user-written is a quoted shell word."""
    spec = job.spec
    q = shlex.quote
    d = [f"--job-name={spec.name}", f"--nodes={spec.nodes}", "--ntasks-per-node=1"]
    if job.gpus_per_node:
        d.append(f"--gres=gpu:{job.gpus_per_node}")
    if spec.exclusive:
        d.append("--exclusive")
    d.append(f"--time={spec.time_limit_min}")
    if spec.partition:
        d.append(f"--partition={spec.partition}")
    d += slurm_gb200.directives(job)  # --segment on GB200/GB300 NVL72 (topology/block)
    d += ["--requeue", "--open-mode=append", f"--output={job.log_dir}/%x-%j.out"]
    lead_s = stop_warning_s(job)
    if lead_s:
        d.append(f"--signal=B:USR1@{lead_s}")
    if spec.array:
        d.append(f"--array={spec.array}")
    for v in (spec.partition or "", job.log_dir):
        if any(c.isspace() or c in "\"'$`\\" for c in v):
            raise InputError("partition/log_dir", f"{v!r}: #SBATCH values must not contain spaces, quotes, $ or `")
    cmd = torchrun_prefix(job)
    rdzv = '--node-rank="$SLURM_NODEID" --master-addr="$MASTER_ADDR" --master-port="$MASTER_PORT"'
    inner = f"exec {shlex.join(cmd)} {rdzv} {_program_words(job)}"
    codes = spec.retry.requeue_exit_codes
    env = job_env(job)
    for key, value in slurm_gb200.nccl_env(job).items():  # multi-node NVLink; the JobSpec's env wins
        env.setdefault(key, value)
    if lead_s:
        # torchrun SIGKILLs its workers this long after forwarding a SIGTERM (default 30 s): give them the lead
        env.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", str(lead_s))
    lines = [
        "#!/bin/bash",
        *(f"#SBATCH {x}" for x in d),
        f"# fmstack: {spec.nodes} node(s) x {job.procs_per_node} process(es), {job.gpus_per_node} GPU(s) per node",
        *slurm_gb200.comment_lines(job),
        *_array_comment(job),
        "set -uo pipefail",
        *(f"export {k}={q(v)}" for k, v in sorted(env.items())),
        'HEAD_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        'MASTER_ADDR=$(scontrol show node "$HEAD_NODE" | tr " " "\\n" | sed -n "s/^NodeAddr=//p")',
        "MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))",
        "export MASTER_ADDR MASTER_PORT",
        'echo "fmstack: job $SLURM_JOB_ID restart ${SLURM_RESTART_COUNT:-0} on $SLURM_JOB_NODELIST head $MASTER_ADDR"',
        *_mount_sources(job),
        "# node rank comes from each srun task's own SLURM_NODEID, hence bash -c",
        *_stop_lines(lead_s, saves_on_stop(job)),
        *(slurm_requeue.before_srun() if codes else []),
        f"srun --kill-on-bad-exit=1 --nodes={spec.nodes} --ntasks-per-node=1{_container_flags(job)} bash -c {q(inner)}"
        + (f" {slurm_requeue.SRUN_STDERR} &" if codes else " &"),
        "srun_pid=$!",
        *(slurm_requeue.after_srun_started() if codes else []),
        "# wait returns early (status > 128) when a trap runs: wait again until srun has exited",
        'while :; do wait "$srun_pid"; rc=$?; kill -0 "$srun_pid" 2>/dev/null || break; done',
        *(slurm_requeue.after_srun_ended() if codes else []),
        *_after_stop(lead_s, saves_on_stop(job)),
        *slurm_requeue.requeue_lines(
            codes,
            spec.retry.max_restarts,
            # --output=<log_dir>/%x-%j.out, appended to across requeues: the time-limit requeues are counted there
            shlex.quote(f"{job.log_dir}/{spec.name}-") + '"$SLURM_JOB_ID".out' if lead_s else None,
        ),
    ]
    return "\n".join(lines) + "\n"


def parse_scontrol(text: str) -> dict[str, str]:
    """``scontrol show job -o`` is one line of Key=Value pairs."""
    out: dict[str, str] = {}
    for tok in text.split():
        k, sep, v = tok.partition("=")
        if sep and k not in out:
            out[k] = v
    return out


class SlurmLauncher:
    name = "slurm"

    def render(self, job: ResolvedJob) -> str:
        return render_sbatch(job)

    def submit(self, job: ResolvedJob, *, dry_run: bool = False) -> Submission:
        text = self.render(job)
        if dry_run:
            return Submission(job_id="slurm:DRY-RUN", rendered=text, dry_run=True)
        if slurm_gb200.SEGMENT_DIRECTIVE in text:  # an sbatch before 24.05 fails on --segment: say why first
            slurm_gb200.check_sbatch(text, shell.run(["sbatch", "--version"]))
        _make_log_dir(job.log_dir)
        out = shell.run(["sbatch", "--parsable"], input_text=text)
        native = out.strip().split(";")[0]
        if not native.isdigit():
            raise InputError("launcher", f"sbatch printed {out.strip()!r}, expected a job id")
        return Submission(job_id=f"slurm:{native}", rendered=text, dry_run=False)

    def _check(self, native_id: str) -> None:
        if not native_id.replace("_", "").isdigit():
            raise InputError("ID", f"slurm:{native_id}: a Slurm job id is digits (array tasks: 12_3)")

    def status(self, native_id: str) -> JobStatus:
        """One job, or every task of an array (``scontrol show job -o`` prints one line per task record, pending
        tasks folded into one record such as ``ArrayTaskId=2-3``). A job slurmctld has already forgotten
        (``MinJobAge``, 300 s by default, after it ended) is looked up in accounting (``sacct``)."""
        self._check(native_id)
        records = self._records(native_id)
        return self._status_from_sacct(native_id) if records is None else _status_of(native_id, records)

    def _records(self, native_id: str) -> list[dict[str, str]] | None:
        """The job's ``scontrol show job -o`` records, one per task record; None when slurmctld has forgotten it."""
        try:
            text = shell.run(["scontrol", "show", "job", "-o", native_id])
        except InputError as exc:
            if "Invalid job id" not in str(exc):
                raise
            return None
        return [parse_scontrol(line) for line in text.splitlines() if line.strip()]

    def _status_from_sacct(self, native_id: str) -> JobStatus:
        try:
            text = shell.run(["sacct", "-j", native_id, "-X", "-n", "-P", "-o", "JobID,State,ExitCode"])
        except InputError as exc:
            raise InputError(
                "ID",
                f"slurm:{native_id} is not known to slurmctld (it forgets ended jobs after MinJobAge, 300 s by "
                f"default) and accounting could not say: {exc.message}",
            ) from None
        rows = [line.split("|") for line in text.splitlines() if line.count("|") >= 2]
        if not rows:
            raise InputError("ID", f"slurm:{native_id} is known neither to slurmctld nor to accounting (sacct)")
        # sacct writes "CANCELLED by 1000": the state is the first word
        tasks = [(r[0], (r[1].split() or ["UNKNOWN"])[0], r[2]) for r in rows]
        if len(tasks) == 1:
            _, raw, code = tasks[0]
            detail = f"{raw} ExitCode={code} (from sacct)"
        else:
            detail = "array tasks " + " ".join(f"{t}:{raw}" for t, raw, _ in tasks) + " (from sacct)"
        return JobStatus(job_id=f"slurm:{native_id}", state=_combined([raw for _, raw, _ in tasks]), detail=detail)

    def cancel(self, native_id: str, *, checkpoint: bool = True) -> str:
        """Cancel a job that is pending or running; returns what was done, in words. One that has already ended
        raises :class:`AlreadyEnded`, as the local launcher does: scancel of a finished job exits 0 and says nothing,
        so the CLI used to print "cancel requested" for a job that had completed long before.

        A running job whose script traps SIGUSR2 (:data:`GRACEFUL_CANCEL_MARK`) gets it in its batch shell only: its
        steps checkpoint the step they are at and exit, then the script cancels the job; an array's pending tasks
        are cancelled first (``scancel --state=PENDING``: a signal does not reach them). ``checkpoint=False``, a
        pending job, or a script without the trap: plain ``scancel`` (SIGTERM to every step and the shell, SIGKILL
        KillWait later; srun kills its tasks at once)."""
        self._check(native_id)
        records = self._records(native_id)
        st = self._status_from_sacct(native_id) if records is None else _status_of(native_id, records)
        if st.state in ENDED:
            raise AlreadyEnded(st.state)
        if checkpoint and st.state == "RUNNING" and self._traps_cancel(native_id):
            # an array's pending tasks: slurmctld delivers no signal but SIGKILL to a pending job (job_mgr.c
            # job_signal: "can't be sent signal ... from state=PENDING"), so the USR2 below would leave them queued
            # and they would start later. Cancelled first, so none starts on the nodes the running tasks free.
            pending = [r.get("ArrayTaskId", r.get("JobId", "?")) for r in records or () if _queued(r)]
            if pending:
                shell.run(["scancel", "--state=PENDING", native_id])
            shell.run(["scancel", "--batch", "--signal=USR2", native_id])
            if not pending:
                return "the job checkpoints the step it is at, then ends CANCELLED"
            return (
                f"pending array tasks {','.join(pending)} removed from the queue; the running tasks checkpoint the step "
                "they are at, then end CANCELLED"
            )
        shell.run(["scancel", native_id])
        return "scancel sent" if st.state == "RUNNING" else "removed from the queue"

    def _traps_cancel(self, native_id: str) -> bool:
        """Whether the job's stored batch script traps SIGUSR2 as a cancel with a checkpoint (False when Slurm cannot
        show the script: an array task's, or one gone from slurmctld's state)."""
        try:
            script = shell.run(["scontrol", "write", "batch_script", native_id, "-"])
        except InputError:
            return False
        return GRACEFUL_CANCEL_MARK in script

    def requeue(self, native_id: str) -> None:
        self._check(native_id)
        shell.run(["scontrol", "requeue", native_id])

    def drain(self, node: str, reason: str) -> None:
        """Take a node out of scheduling (running jobs finish; a requeued job lands elsewhere)."""
        _check_node(node)
        shell.run(["scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}"])

    def resume_node(self, node: str) -> None:
        _check_node(node)
        shell.run(["scontrol", "update", f"nodename={node}", "state=resume"])

    def apply_health_action(self, node: str, action: Action, why: str) -> bool:
        """Act on the node-health engine's decision before a retry: anything beyond restarting the job (reset GPU,
        reboot, replace) drains the node so the requeued job avoids it. Returns whether the node was drained."""
        if action <= Action.RESTART_JOB:
            return False
        self.drain(node, f"fmstack-health:{action.name}:{why}")
        return True


def _queued(record: dict[str, str]) -> bool:
    """A task record whose base state is PENDING (REQUEUE_HOLD and REQUEUED are PENDING with a flag), the ones
    ``scancel --state=PENDING`` cancels; CONFIGURING is a RUNNING job whose nodes boot."""
    return record.get("JobState") in ("PENDING", "REQUEUED", "REQUEUE_HOLD")


def _status_of(native_id: str, records: list[dict[str, str]]) -> JobStatus:
    """A job's status from its ``scontrol show job -o`` records (an array: one per task record)."""
    if len(records) <= 1:
        info = records[0] if records else {}
        raw = info.get("JobState", "UNKNOWN")
        detail = (
            f"{raw} ExitCode={info.get('ExitCode', '?')} Reason={info.get('Reason', '?')} log={info.get('StdOut', '?')}"
        )
        restarts = _int(info.get("Restarts", "0"))
        return JobStatus(
            job_id=f"slurm:{native_id}", state=_STATES.get(raw, "UNKNOWN"), detail=detail, restarts=restarts
        )
    tasks = [(r.get("ArrayTaskId", r.get("JobId", "?")), r.get("JobState", "UNKNOWN")) for r in records]
    return JobStatus(
        job_id=f"slurm:{native_id}",
        state=_combined([raw for _, raw in tasks]),
        detail="array tasks " + " ".join(f"{t}:{raw}" for t, raw in tasks),
        restarts=max(_int(r.get("Restarts", "0")) for r in records),
    )


def _int(text: str) -> int:
    return int(text) if text.isdigit() else 0


def _combined(raw_states: list[str]) -> str:
    """One state for several tasks: running while any runs, else pending while any waits, else the worst ending
    (FAILED before CANCELLED before UNKNOWN); COMPLETED only when every task completed."""
    states = {_STATES.get(raw, "UNKNOWN") for raw in raw_states}
    for state in ("RUNNING", "PENDING", "FAILED", "CANCELLED", "UNKNOWN"):
        if state in states:
            return state
    return "COMPLETED"


def _make_log_dir(log_dir: str) -> None:
    """Slurm opens ``--output`` in ``log_dir`` and does not create the directory: without it the batch job fails
    at start and its log is lost. Created here, on the submit host (the login node shares the cluster's file
    systems), as the local launcher does."""
    try:
        os.makedirs(log_dir, exist_ok=True)
    except OSError as exc:
        raise InputError("log_dir", f"{log_dir!r}: cannot create it: {exc.strerror or exc}") from None


def _check_node(node: str) -> None:
    if not node or not all(c.isalnum() or c in "-_.[]," for c in node):
        raise InputError("node", f"{node!r} is not a Slurm node name")
