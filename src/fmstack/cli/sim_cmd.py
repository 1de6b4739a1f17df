"""`fmstack simulate`: run the fleet twin, or compare policies / recovery modes on the same trace and seed."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import click

from fmstack.cli.common import catalog_option, console, json_option, print_json
from fmstack.errors import InputError

EPILOG = """Example:

  fmstack simulate --instance p5.48xlarge --nodes 2048 --days 30 --jobs 50000 --policy slurm-backfill
  --faults llama3 --recovery auto-resume --spares 16 --seed 1 --json --html report.html

  fmstack simulate elastic --policy pollux,tiresias,optimus

  fmstack simulate compare --nodes 64 --days 7 --jobs 2000 --policy fifo,slurm-backfill
  --recovery checkpoint-restart,auto-resume
"""


class _DaysBar:
    """A progress bar over simulated days on stderr, shown only when stderr is a terminal (transient)."""

    def __init__(self, runs: int, days: float) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        err = Console(stderr=True)
        self.bar = Progress(TextColumn("simulating {task.description}"), BarColumn(),
                            TextColumn("{task.completed:.1f}/{task.total:g} simulated days"), TimeElapsedColumn(),
                            TimeRemainingColumn(), console=err, transient=True, disable=not err.is_terminal)  # fmt: skip
        self.task = self.bar.add_task("", total=runs * days)
        self.done_days = 0.0

    def __enter__(self) -> _DaysBar:
        self.bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.__exit__(None, None, None)

    def run(self, label: str) -> Any:
        """The ``progress`` callback of one run, labelled; runs are counted one after another."""
        base = self.done_days
        self.bar.update(self.task, description=label)

        def tick(now_s: float) -> None:
            self.bar.update(self.task, completed=base + now_s / 86400.0)
            self.done_days = base + now_s / 86400.0

        return tick


def _config(opts: dict[str, Any], policy: str, recovery: str) -> Any:
    """The run's SimConfig; every name checked (a comma in one says where several go: simulate compare)."""
    from fmstack.orchestration.policies import POLICIES
    from fmstack.sim.config import SimConfig
    from fmstack.sim.recovery import RecoverySettings, parse_mode

    several = "; to compare several, use fmstack simulate compare --policy A,B --recovery C,D"
    if policy not in POLICIES:
        hint = several if "," in policy else ""
        raise InputError("policy", f"unknown policy {policy!r}; allowed: {', '.join(POLICIES)}{hint}")
    if "," in recovery:
        raise InputError("recovery", f"one recovery mode, got {recovery!r}{several}")
    settings = RecoverySettings(
        mode=parse_mode(recovery), interval=opts["ckpt_interval"], ckpt_cost_s=opts["ckpt_cost"],
        interval_rate=opts["ckpt_interval_rate"],
    )  # fmt: skip
    faults = None if opts["faults"] in ("none", "off") else opts["faults"]
    return SimConfig(
        instance=opts["instance"], nodes=opts["nodes"], days=opts["days"], jobs=opts["jobs"], trace=opts["trace"],
        load=opts["load"], policy=policy, priority=opts["priority"], faults=faults, recovery=settings,
        spares=opts["spares"], seed=opts["seed"], bf_window_min=opts["bf_window"],
        health_window_h=opts["health_window_h"],
    )  # fmt: skip


def _run(
    opts: dict[str, Any], policy: str, recovery: str, bar: _DaysBar | None = None, *, label: bool = False
) -> tuple[Any, dict[str, Any]]:
    """One run; ``label``: prefix its warnings with the run's policy and recovery mode (``compare``, where the same
    warning of two recovery modes read alike)."""
    from fmstack.catalog import load_catalog
    from fmstack.sim.metrics import summarise
    from fmstack.sim.simulator import Simulator

    cfg = _config(opts, policy, recovery)
    sim = Simulator(cfg, load_catalog(opts["catalog_dir"])).run(bar.run(f"{policy}, {recovery}") if bar else None)
    summary = summarise(sim)
    for w in summary["warnings"]:
        click.echo(f"fmstack: warning: {f'[{policy}, {recovery}] ' if label else ''}{w}", err=True)
    return sim, summary


def _check_output(path: Path | None, option: str) -> None:
    """Refuse an output path that cannot be written before the (possibly long) run, not after it."""
    if path is None:
        return
    path = path.expanduser()
    if path.is_dir():
        raise InputError(option, f"{path} is a directory; give a file name, e.g. {path / 'report.html'}")
    if not path.parent.is_dir():
        raise InputError(option, f"directory {path.parent} does not exist")


def _write(path: Path, text: str, option: str) -> None:
    """Write atomically: a bad run never leaves a half-written file over the user's, nor a temporary file."""
    path = path.expanduser()
    _check_output(path, option)
    tmp: Path | None = None
    try:
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, encoding="utf-8", suffix=".tmp") as f:
            tmp = Path(f.name)
            f.write(text)
        tmp.chmod(0o644)
        tmp.replace(path)
    except OSError as exc:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        raise InputError(option, f"cannot write {path}: {exc.strerror}") from None


def _refuse_group_options(ctx: click.Context, sub: str) -> None:
    """An option of `simulate` itself typed before a subcommand (`simulate --nodes 4 compare`) belongs to that
    subcommand; click would drop it silently and run the defaults (a 64-node, 7-day compare), so say where it goes."""
    group = ctx.command
    sub_cmd = group.get_command(ctx, sub) if isinstance(group, click.Group) else None
    sub_flags = {o for p in (sub_cmd.params if sub_cmd else []) for o in p.opts}
    for param in group.params:
        if param.name and ctx.get_parameter_source(param.name) is click.core.ParameterSource.COMMANDLINE:
            flag = max(param.opts, key=len)
            fix = f"put it after: fmstack simulate {sub} {flag} ..." if flag in sub_flags else f"{sub} has no {flag}"
            raise InputError(flag, f"given before '{sub}', where it is not read; {fix}")


def _options(func: Any) -> Any:
    opts = [
        click.option("--instance", default="p5.48xlarge", show_default=True, help="Instance type or UltraServer."),
        click.option("--nodes", type=int, default=64, show_default=True, help="Schedulable nodes (1 to 100,000)."),
        click.option("--days", type=float, default=7.0, show_default=True, help="Simulated days (at most 366)."),
        click.option(
            "--jobs",
            type=int,
            default=1000,
            show_default=True,
            help="Synthetic jobs (without --trace; 1 to 1,000,000).",
        ),
        click.option(
            "--trace",
            type=click.Path(path_type=Path),
            default=None,
            help="CSV trace instead (docs/simulate.md, Trace CSV).",
        ),
        click.option(
            "--load",
            type=float,
            default=0.85,
            show_default=True,
            help="Offered load of the generator: GPU-seconds asked / GPU-seconds of the pool, (0, 2].",
        ),
        click.option(
            "--priority",
            default="fifo",
            show_default=True,
            help="Pending order: fifo (Slurm's default weights: submit order), multifactor "
            "(fair share, age, size; Slurm-like policies only) or fairtree (multifactor with Fair Tree fair share, "
            "accounts = queues).",
        ),
        click.option(
            "--faults",
            default="llama3",
            show_default=True,
            help="Failure model: llama3 (Llama 3 405B pre-training rates), meta-rsc1, meta-rsc2, or none.",
        ),
        click.option(
            "--spares",
            type=int,
            default=0,
            show_default=True,
            help="Spare nodes on standby outside the pool (at most --nodes).",
        ),
        click.option(
            "--ckpt-interval",
            default="young",
            show_default=True,
            help="Checkpoint interval: young or daly (optimum for the job's MTBF, at least one training step) or "
            "minutes.",
        ),
        click.option(
            "--ckpt-cost",
            type=float,
            default=60.0,
            show_default=True,
            help="Seconds one checkpoint stalls training (0: young/daly checkpoint every step).",
        ),
        click.option(
            "--ckpt-interval-rate",
            default="failures",
            show_default=True,
            help="Interrupts young/daly count: failures (the failure model's rate) or failures+preemptions (plus "
            "the preemptions per job-hour the run has seen so far for the job's queue and priority).",
        ),
        click.option(
            "--bf-window",
            type=int,
            default=1440,
            show_default=True,
            help="Backfill look-ahead in minutes (Slurm's bf_window, 1 to 43,200; slurm-backfill and easy-backfill). "
            "Slurm advises at least the longest time limit: a job that cannot start within it gets no reservation.",
        ),
        click.option(
            "--health-window-h",
            type=float,
            default=24.0,
            show_default=True,
            help="Health engine's recurrence window in hours: a fault escalates (restart -> reset -> reboot -> "
            "replace) by the node's restarts, resets and reboots within it (NVIDIA NVSentinel's repeated-Xid rules: "
            "24 h); planned maintenance is not counted; inf: the whole run.",
        ),
        click.option("--seed", type=int, default=1, show_default=True, help="Random seed: same seed, same output."),
        catalog_option,
        json_option,
    ]
    for o in reversed(opts):
        func = o(func)
    return func


@click.group("simulate", invoke_without_command=True, epilog=EPILOG)
@click.option(
    "--policy",
    default="slurm-backfill",
    show_default=True,
    help="Scheduling policy: fifo, sjf, slurm-backfill (conservative), easy-backfill, kueue, kueue-strict "
    "(Kueue with queueingStrategy StrictFIFO).",
)
@click.option(
    "--recovery",
    default="auto-resume",
    show_default=True,
    help="Recovery mode: checkpoint-restart, auto-resume, checkpointless, elastic.",
)
@click.option("--html", "html_path", type=click.Path(path_type=Path), default=None, help="Write an HTML report.")
@click.option("--metrics", "metrics_path", type=click.Path(path_type=Path), default=None,
              help="Write the time series as OpenMetrics (promtool tsdb create-blocks-from openmetrics).")  # fmt: skip
@click.option("--chrome-trace", "trace_path", type=click.Path(path_type=Path), default=None,
              help="Write a Chrome-trace JSON of job segments (small runs).")  # fmt: skip
@_options
@click.pass_context
def simulate(ctx: click.Context, /, policy: str, recovery: str, html_path: Path | None, metrics_path: Path | None,
             trace_path: Path | None, **opts: Any) -> None:  # fmt: skip
    """Simulate a GPU fleet: jobs, queues, scheduling policy, failures and recovery."""
    if ctx.invoked_subcommand is not None:
        _refuse_group_options(ctx, ctx.invoked_subcommand)
        return
    from fmstack.sim.export import to_chrome_trace, to_openmetrics
    from fmstack.sim.report_html import render_html

    for path, option in ((html_path, "--html"), (metrics_path, "--metrics"), (trace_path, "--chrome-trace")):
        _check_output(path, option)
    with _DaysBar(1, opts["days"]) as bar:
        sim, summary = _run(opts, policy, recovery, bar)
    if html_path is not None:
        _write(html_path, render_html(sim, summary), "--html")
    if metrics_path is not None:
        _write(metrics_path, to_openmetrics(sim, summary), "--metrics")
    if trace_path is not None:
        _write(trace_path, to_chrome_trace(sim), "--chrome-trace")
    if opts["as_json"]:
        print_json(summary)
        return
    _table([summary])


@simulate.command("compare", epilog=EPILOG)
@click.option(
    "--policy",
    "policies",
    default="fifo,slurm-backfill",
    show_default=True,
    help="Comma-separated policies (see simulate --help).",
)
@click.option("--recovery", "recoveries", default="auto-resume", show_default=True,
              help="Comma-separated recovery modes.")  # fmt: skip
@_options
def compare(policies: str, recoveries: str, **opts: Any) -> None:
    """Run several policies x recovery modes on the same trace and seed."""
    combos = [(p.strip(), r.strip()) for p in policies.split(",") for r in recoveries.split(",")]
    for p, r in combos:  # every name checked before the first (possibly long) run
        _config(opts, p, r)
    with _DaysBar(len(combos), opts["days"]) as bar:
        rows = [_run(opts, p, r, bar, label=True)[1] for p, r in combos]
    if opts["as_json"]:
        print_json(rows)
        return
    _table(rows)


@simulate.command("elastic", epilog=EPILOG)
@click.option("--policy", "policies", default="pollux,tiresias,optimus", show_default=True,
              help="Comma-separated: pollux (goodput-adaptive), tiresias (2D-LAS), optimus.")  # fmt: skip
@click.option("--workload", type=click.Path(path_type=Path), default=None,
              help="Pollux-simulator workload CSV (name,time,application,num_replicas,batch_size); "
              "default: its workload 6 (scheduling oracle 15).")  # fmt: skip
@click.option("--nodes", type=int, default=16, show_default=True, help="Nodes (1 to 1,024).")
@click.option("--gpus-per-node", type=int, default=4, show_default=True, help="GPUs per node (1 to 16).")
@click.option(
    "--interval",
    "interval_s",
    type=float,
    default=60.0,
    show_default=True,
    help="Seconds between scheduling decisions (1 to 86,400).",
)
@json_option
def elastic(policies: str, workload: Path | None, nodes: int, gpus_per_node: int, interval_s: float,
            as_json: bool) -> None:  # fmt: skip
    """Replay a deep-learning training workload with elastic jobs (Pollux simulator's experiment)."""
    from rich.table import Table

    from fmstack.orchestration.policies.elastic import make_elastic_policy
    from fmstack.sim.elastic import PUBLISHED_AVG_JCT_S, PUBLISHED_INTERVAL_S, read_workload, replay

    names = [p.strip() for p in policies.split(",")]
    for p in names:  # every name checked before the first (long) replay
        make_elastic_policy(p)
    rows = read_workload(workload)
    as_published = workload is None and (nodes, gpus_per_node, interval_s) == (16, 4, PUBLISHED_INTERVAL_S)
    out: list[dict[str, Any]] = []
    for p in names:
        r = replay(p, rows, nodes=nodes, gpus_per_node=gpus_per_node, interval_s=interval_s)
        published = PUBLISHED_AVG_JCT_S.get(p) if as_published else None
        avg = r.avg_jct_s if r.jct_s else None  # no job finished: null in JSON, not NaN
        out.append({"policy": p, "avg_jct_s": avg, "published_avg_jct_s": published,
                    "completed": len(r.jct_s), "unfinished": list(r.unfinished), "restarts": r.restarts,
                    "end_s": r.end_s})  # fmt: skip
    if as_json:
        print_json(out)
        return
    t = Table(title="elastic twin: average job completion time")
    for col in ("policy", "avg JCT s", "published s", "completed", "restarts", "last interval s"):
        t.add_column(col)
    for o in out:
        pub = "-" if o["published_avg_jct_s"] is None else f"{o['published_avg_jct_s']:.0f}"
        t.add_row(
            o["policy"],
            "-" if o["avg_jct_s"] is None else f"{o['avg_jct_s']:.0f}",
            pub,
            str(o["completed"]),
            str(o["restarts"]),
            f"{o['end_s']:.0f}",
        )
    console().print(t)


def _table(rows: list[dict[str, Any]]) -> None:
    from fmstack.cli.sim_render import render

    for part in render(rows):
        console().print(part)
