"""Jobs: a synthetic generator shaped like published GPU-cluster traces, or a user CSV trace.

Generator ([D]: documented defaults, shaped after the traces' qualitative findings, not fitted to them):
- arrivals: Poisson, ``num_jobs`` spread over the horizon;
- size in GPUs from :data:`SIZE_MIX`: most jobs use one GPU or one node while a few very large jobs use most
  GPU-hours, as reported for Microsoft Philly (Jeon et al., ATC 2019), SenseTime Helios (Hu et al., SC 2021)
  and Alibaba PAI (Weng et al., NSDI 2022); jobs larger than the fleet are dropped from the mix;
- runtime: log-normal with median :data:`MEDIAN_RUNTIME_S` growing with size and sigma :data:`RUNTIME_SIGMA`
  (heavy-tailed: minutes to days, as in all three traces), clipped to [60 s, 14 days], then scaled so that the
  offered load (GPU-seconds asked / GPU-seconds available) equals ``target_load``;
- time limit: runtime x U(1.5, 3) rounded up to the hour (users over-estimate limits: Helios, PAI);
- users: 24 with Zipf-like activity (weight 1 / rank), in 4 queues (user i in queue i mod 4);
- model by size: <= 8 GPUs llama3.1-8b, <= 256 llama3.1-70b, else llama3.1-405b; tokens = runtime x speed.

CSV trace columns: ``job_id,submit_s,num_gpus`` and one of ``duration_s`` or ``tokens`` (then ``model`` is
needed to get a speed), optional ``time_limit_s,user,queue,model,priority``; UTF-8, with or without a byte-order
mark. A job runs at least :data:`MIN_DURATION_S`. ``time_limit_s`` 0 is no limit (Slurm ``--time=0``); an empty
cell or no column: twice the runtime, at least an hour.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fmstack.errors import InputError
from fmstack.sim.config import MAX_JOBS

SIZE_MIX: dict[int, float] = {
    1: 0.45, 2: 0.07, 4: 0.08, 8: 0.20, 16: 0.06, 32: 0.05, 64: 0.04,
    128: 0.025, 256: 0.013, 512: 0.007, 1024: 0.003, 2048: 0.002,
}  # fmt: skip
MEDIAN_RUNTIME_S = 1800.0
RUNTIME_SIGMA = 1.6
NUM_USERS = 24
NUM_QUEUES = 4


@dataclass(slots=True)
class Job:
    """One job and its accounting; mutated by the simulator."""

    job_id: int
    submit_s: float
    num_gpus: int
    work_s: float
    """Compute seconds the job needs when packed at its full size (its runtime without faults)."""
    time_limit_s: float
    """Wall-time limit of an allocation; 0: not given (the simulator sets twice the runtime, at least an hour);
    inf: no limit (a trace's explicit 0, Slurm ``--time=0``): never times out, planned by backfill as a year."""
    user: str = "u0"
    queue: str = "q0"
    model: str = "llama3.1-8b"
    priority: float = 0.0
    tokens: float = 0.0
    cur_gpus: int = 0
    done_s: float = 0.0
    """Saved progress in packed compute seconds."""
    eligible_s: float = 0.0
    first_start_s: float = -1.0
    start_s: float = 0.0
    speed: float = 1.0
    """Packed compute seconds per wall second in the current segment."""
    startup_s: float = 0.0
    deadline_s: float = 0.0
    """End of the current allocation's time limit: set when the scheduler starts the job, kept by a restart in place
    (auto-resume re-runs the step inside the same Slurm job, whose end time does not move)."""
    ckpt_interval_s: float = math.inf
    ckpt_cost_s: float = 0.0
    epoch: int = 0
    restarts: int = 0
    """Requeues of any cause (failures and preemptions), as Slurm's SLURM_RESTART_COUNT."""
    restarts_in_place: int = 0
    """Restarts without a requeue: auto-resume / checkpointless on a spare, or an elastic job dropping a node."""
    fault_requeues: int = 0
    """Requeues after a failure (the Kueue backoff's exponent)."""
    preemptions: int = 0
    end_s: float = -1.0
    timed_out: bool = False
    """Ended at its time limit before completing (Slurm's TIMEOUT): ``end_s`` is then that time."""
    running: bool = False
    hung: bool = False
    alloc: list[tuple[int, int]] = field(default_factory=list)
    wait_s: float = 0.0
    alloc_gpu_s: float = 0.0
    productive_gpu_s: float = 0.0
    ckpt_gpu_s: float = 0.0
    lost_gpu_s: float = 0.0
    restart_gpu_s: float = 0.0
    hang_gpu_s: float = 0.0


def generate(
    rng: np.random.Generator,
    *,
    num_jobs: int,
    horizon_s: float,
    fleet_gpus: int,
    gpus_per_node: int,
    target_load: float = 0.85,
) -> list[Job]:
    """``num_jobs`` synthetic jobs over ``horizon_s`` (see the module docstring for the distributions)."""
    if num_jobs <= 0:
        raise InputError("jobs", f"must be a positive number of jobs, got {num_jobs}")
    if not 0 < target_load <= 2:
        raise InputError("load", f"target load must be in (0, 2], got {target_load}")
    sizes = np.array([s for s in SIZE_MIX if s <= fleet_gpus])
    probs = np.array([SIZE_MIX[int(s)] for s in sizes])
    probs /= probs.sum()
    submit = np.sort(rng.uniform(0.0, horizon_s, num_jobs))
    size = rng.choice(sizes, size=num_jobs, p=probs)
    median = MEDIAN_RUNTIME_S * (1.0 + np.log2(size) / 4.0)
    runtime = np.clip(median * np.exp(RUNTIME_SIGMA * rng.standard_normal(num_jobs)), 60.0, 14 * 86400.0)
    offered = float((runtime * size).sum()) / (fleet_gpus * horizon_s)
    runtime = np.maximum(runtime * (target_load / offered), 60.0)
    limit = np.ceil(runtime * rng.uniform(1.5, 3.0, num_jobs) / 3600.0) * 3600.0
    ranks = np.arange(1, NUM_USERS + 1)
    user = rng.choice(ranks - 1, size=num_jobs, p=(1 / ranks) / (1 / ranks).sum())
    jobs = []
    for i in range(num_jobs):
        g = int(size[i])
        model = "llama3.1-8b" if g <= gpus_per_node else "llama3.1-70b" if g <= 256 else "llama3.1-405b"
        u = int(user[i])
        jobs.append(
            Job(job_id=i, submit_s=float(submit[i]), num_gpus=g, work_s=float(runtime[i]),
                time_limit_s=float(limit[i]), user=f"u{u}", queue=f"q{u % NUM_QUEUES}", model=model)
        )  # fmt: skip
    return jobs


_REQUIRED = ("job_id", "submit_s", "num_gpus")
MIN_DURATION_S = 1.0
"""Shortest runtime a job may have (``duration_s``, or ``tokens`` at the speed model's speed): the twin's times
are seconds, and a far shorter job (``1e-300``) only makes GPU-second sums underflow (numpy's RuntimeWarning)."""
MAX_TRACE_BYTES = 256 * 2**20
"""Largest trace file read (256 bytes a row at :data:`fmstack.sim.config.MAX_JOBS` rows; a row is ~40-100)."""


def read_trace(path: Path, *, fleet_gpus: int, gpus_per_node: int, max_jobs: int = MAX_JOBS) -> list[Job]:
    """Jobs from a CSV trace, at most ``max_jobs``; a malformed row raises InputError naming its line number."""
    try:
        size = path.stat().st_size
        if size > MAX_TRACE_BYTES:
            raise InputError("trace", f"{path.name} is {size / 2**20:,.0f} MiB; at most {MAX_TRACE_BYTES // 2**20} MiB")
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark (Excel's "CSV UTF-8") is not a column name
    except OSError as exc:
        raise InputError("trace", f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise InputError("trace", f"{path.name} is not UTF-8 text (byte {exc.start}); a trace is a CSV file") from None
    reader = csv.DictReader(text.splitlines())
    cols = reader.fieldnames or []
    twice = sorted({c for c in cols if cols.count(c) > 1})
    if twice:
        raise InputError("trace", f"{path.name} line 1: column {', '.join(twice)} appears twice in the header")
    missing = [c for c in _REQUIRED if c not in cols]
    if missing or not ({"duration_s", "tokens"} & set(cols)):
        need = ", ".join(_REQUIRED) + " and duration_s or tokens"
        raise InputError("trace", f"{path.name} line 1: header {','.join(cols)!r} lacks columns; need {need}")
    jobs: list[Job] = []
    for row in reader:
        line = reader.line_num
        if None in row or None in row.values():  # DictReader keeps extra fields under None, fills missing with None
            n = len(cols) + len(row.get(None) or ()) - sum(v is None for v in row.values())
            extra = row.get(None) or []
            if n <= len(cols):
                fix = "leave an optional value empty (a,,b)"
            elif all(not v.strip() for v in extra):
                fix = "remove the trailing comma"
            else:
                fix = "quote a value that holds a comma"
            raise InputError("trace", f"{path.name} line {line}: {n} fields, the header has {len(cols)}; {fix}")
        if len(jobs) == max_jobs:
            raise InputError("trace", f"{path.name} line {line}: more than {max_jobs:,} jobs (the limit of a run)")
        try:
            jobs.append(_row(row, fleet_gpus, gpus_per_node))
        except (ValueError, TypeError) as exc:
            raise InputError("trace", f"{path.name} line {line}: {exc}") from None
    if not jobs:
        raise InputError("trace", f"{path.name} has no jobs")
    return sorted(jobs, key=lambda j: (j.submit_s, j.job_id))


def _row(row: dict[str, str], fleet_gpus: int, gpn: int) -> Job:
    def num(name: str, default: float | None = None) -> float:
        raw = (row.get(name) or "").strip()
        if not raw:
            if default is None:
                raise ValueError(f"{name} is empty")
            return default
        try:
            v = float(raw)
        except ValueError:
            raise ValueError(f"{name}={raw!r} is not a number") from None
        if not math.isfinite(v) or v < 0:
            raise ValueError(f"{name}={raw!r} must be a finite number >= 0")
        return v

    g = num("num_gpus")
    if g < 1 or g != int(g):
        raise ValueError(f"num_gpus={row.get('num_gpus')!r} must be a whole number >= 1")
    gi = int(g)
    if gi > fleet_gpus:
        raise ValueError(f"num_gpus={gi} is larger than the fleet ({fleet_gpus} GPUs)")
    if gi > gpn and gi % gpn:
        raise ValueError(f"num_gpus={gi}: jobs larger than a node take whole nodes; use a multiple of {gpn}")
    duration = num("duration_s", 0.0)
    tokens = num("tokens", 0.0)
    if duration <= 0 and tokens <= 0:
        raise ValueError("needs duration_s > 0 or tokens > 0")
    if 0 < duration < MIN_DURATION_S:
        raise ValueError(
            f"duration_s={row.get('duration_s', '').strip()} is below {MIN_DURATION_S:g} s, the shortest job"
        )
    # an empty cell or no column: the simulator sets twice the runtime, at least an hour (Job.time_limit_s 0); an
    # explicit 0 is no limit, as Slurm's --time=0 ("A time limit of zero requests that no time limit be imposed",
    # sbatch(1); slurm_opt.c arg_set_time_limit: 0 -> INFINITE)
    given = bool((row.get("time_limit_s") or "").strip())
    limit = num("time_limit_s", 0.0)
    if given and limit == 0:
        limit = math.inf
    job_id = num("job_id")
    if job_id != int(job_id):
        raise ValueError(f"job_id={row.get('job_id')!r} must be a whole number")
    model = (row.get("model") or "").strip()
    if not model and duration <= 0:
        raise ValueError("model is empty: a row with tokens and no duration_s needs the model to turn tokens into time")
    return Job(
        job_id=int(job_id),
        submit_s=num("submit_s"),
        num_gpus=gi,
        work_s=duration,
        tokens=tokens,
        time_limit_s=limit,
        user=(row.get("user") or "u0").strip(),
        queue=(row.get("queue") or "q0").strip(),
        model=model or "llama3.1-8b",
        priority=num("priority", 0.0),
    )
