"""`fmstack exporter` (serve node metrics, write rules / dashboards) and `fmstack health` (signals -> action)."""

from __future__ import annotations

import ipaddress
import json
import math
import os
import socket
import tempfile
import time
from importlib import resources
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from fmstack.cli.common import console, json_option, print_json
from fmstack.errors import InputError


def _check_bind(bind: str) -> str:
    try:
        ipaddress.ip_address(bind)
    except ValueError:
        raise InputError("--bind", f"{bind!r} is not an IP address; e.g. 127.0.0.1 (default) or 0.0.0.0") from None
    return bind


class _FiniteRange(click.FloatRange):
    """click's FloatRange lets NaN through (every comparison with NaN is false): --app-max-age nan was accepted."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        out = super().convert(value, param, ctx)
        if math.isnan(out):
            self.fail(f"{value!r} is not a number; allowed: {self._describe_range()}", param, ctx)
        return out


class _GivenPath(click.Path):
    """A path that is not empty: click turns '' into Path('.'), so ``--dashboards ''`` wrote into the current folder
    (and ``--sysfs-root ''`` read it as /)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.strip():
            name = param.opts[0] if param is not None else "path"
            raise InputError(
                name, f"an empty path ({value!r}) names the current folder; give one, e.g. {name} {_EXAMPLES[name]}"
            )
        return super().convert(value, param, ctx)


_EXAMPLES = {"--dashboards": "grafana/", "--sysfs-root": "/", "--app-dir": "/run/fmstack/app",
             "--fake-script": "nvml.json"}  # fmt: skip


def _check_hostname(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """The Hostname label names the node for ``fmstack health --alerts``, so it must be a valid node name: before
    session 20 an empty value and one with a newline were accepted."""
    if value is None:
        return None
    from fmstack.observability.health_io import check_node_name

    return check_node_name(value, "--hostname")


def _write_new_files(directory: Path, files: dict[str, str], force: bool) -> list[Path]:
    """Write files into ``directory`` all or nothing; refuse to overwrite unless ``force``."""
    if directory.exists() and not directory.is_dir():
        raise InputError("--dashboards", f"{directory} exists and is not a directory")
    clash = [n for n in files if (directory / n).exists()]
    if clash and not force:
        raise InputError("--dashboards", f"{directory / clash[0]} exists; pass --force to overwrite")
    try:  # a parent that is a file (/dev/null/x), a read-only folder: OSError, a traceback before
        directory.mkdir(parents=True, exist_ok=True)
        for name in files:  # every file in place before any is replaced: all or nothing
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=directory)
            os.close(fd)
            os.unlink(tmp)
    except OSError as exc:
        raise InputError("--dashboards", f"cannot write in {directory}: {exc.strerror}") from None
    written = []
    for name, text in files.items():
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=directory)
        os.fchmod(fd, 0o644)  # mkstemp makes 0600; dashboards are for Grafana (another user) to read
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, directory / name)
        written.append(directory / name)
    return written


@click.command(
    "exporter",
    epilog="Example:\n\n\b\n  fmstack exporter --port 9400 --expected-gpus 8 --expected-efa 32\n"
    "  fmstack exporter --backend fake --once     # one scrape of an 8-GPU fake node\n"
    "  fmstack exporter --dashboards grafana/     # write the Grafana JSON and exit",
)
@click.option("--port", type=click.IntRange(0, 65535), default=9400, show_default=True, help="TCP port (0: any free).")
@click.option("--bind", default="127.0.0.1", show_default=True, help="Address to bind; 0.0.0.0 exposes it to all.")
@click.option(
    "--hostname",
    default=None,
    callback=_check_hostname,
    help="Value of the Hostname label: letters, digits, '.', '_', '-' [default: this host's name].",
)
@click.option(
    "--backend",
    type=click.Choice(["nvml", "fake", "none"]),
    default="nvml",
    show_default=True,
    help="GPU source: NVML, the scripted fake, or no GPU source.",
)
@click.option("--fake-script", type=_GivenPath(path_type=Path, dir_okay=False), help="JSON of NVML answers (fake).")
@click.option(
    "--sysfs-root",
    type=_GivenPath(path_type=Path, file_okay=False),
    default=Path("/"),
    show_default=True,
    help="Root of sys/class/infiniband (EFA) and the Lustre llite stats (sys/kernel/debug or proc/fs/lustre).",
)
@click.option("--app-dir", type=_GivenPath(path_type=Path, file_okay=False), help="Directory of app snapshot files.")
@click.option(
    "--app-max-age",
    type=_FiniteRange(1, 30 * 86400),
    default=6 * 3600.0,
    show_default=True,
    help="Seconds after which an app snapshot file not rewritten is no longer served.",
)
@click.option("--expected-gpus", type=click.IntRange(0, 1024), default=None, help="GPUs the node should have.")
@click.option("--expected-efa", type=click.IntRange(0, 1024), default=None, help="EFA devices the node should have.")
@click.option(
    "--gpu-poll-interval",
    type=_FiniteRange(0.1, 3600),
    default=15.0,
    show_default=True,
    help="Seconds between background NVML reads (scrapes serve the last read; set to the scrape interval).",
)
@click.option(
    "--gpu-deadline",
    type=_FiniteRange(0.1, 3600),
    default=None,
    help="Seconds a GPU read may be late before the GPU source is reported down [default: the poll interval].",
)
@click.option("--no-efa", is_flag=True, help="No EFA source (a node without EFA; else a missing driver is an error).")
@click.option("--once", is_flag=True, help="Print one scrape to stdout and exit.")
@click.option("--print-rules", is_flag=True, help="Print the alert and recording rules (YAML) and exit.")
@click.option("--dashboards", type=_GivenPath(path_type=Path), help="Write the Grafana dashboards (JSON) here, exit.")
@click.option("--force", is_flag=True, help="With --dashboards: overwrite existing files.")
def exporter(
    port: int,
    bind: str,
    hostname: str | None,
    backend: str,
    fake_script: Path | None,
    sysfs_root: Path,
    app_dir: Path | None,
    app_max_age: float,
    expected_gpus: int | None,
    expected_efa: int | None,
    gpu_poll_interval: float,
    gpu_deadline: float | None,
    no_efa: bool,
    once: bool,
    print_rules: bool,
    dashboards: Path | None,
    force: bool,
) -> None:
    """Serve GPU (NVML), EFA, Lustre and application metrics for Prometheus on 127.0.0.1:9400."""
    modes = [
        name for name, on in (("--print-rules", print_rules), ("--dashboards", dashboards), ("--once", once)) if on
    ]
    if len(modes) > 1:  # each of them does one thing and exits: the other was silently not done
        raise InputError(modes[1], f"one of --print-rules, --dashboards, --once at a time, not {' and '.join(modes)}")
    if force and dashboards is None:
        raise InputError("--force", "only with --dashboards DIR (it overwrites dashboard files; nothing else)")
    if print_rules:
        text = resources.files("fmstack.observability").joinpath("rules/fmstack-rules.yml").read_text("utf-8")
        click.echo(text, nl=False)
        return
    if dashboards is not None:
        from fmstack.observability.dashboards import DASHBOARDS, build_dashboard

        files = {f"fmstack-{n}.json": json.dumps(build_dashboard(n), indent=2) + "\n" for n in DASHBOARDS}
        for path in _write_new_files(dashboards, files, force):
            click.echo(str(path))
        return
    _check_bind(bind)
    if fake_script is not None and backend != "fake":
        raise InputError("--fake-script", "only with --backend fake")
    if no_efa and expected_efa is not None:
        raise InputError("--expected-efa", "not with --no-efa")
    if backend == "none" and expected_gpus is not None:
        # no GPU source would export fmstack_gpus_expected: FmstackGpuMissing could never fire
        raise InputError("--expected-gpus", "not with --backend none (no GPU source to count GPUs)")
    if app_dir is not None and not app_dir.is_dir():
        raise InputError("--app-dir", f"{app_dir} is not a directory")
    if not sysfs_root.is_dir():
        raise InputError("--sysfs-root", f"{sysfs_root} is not a directory")
    from fmstack.observability.node import build_node_exporter

    notes: list[str] = []  # printed after the "serving" line, which scripts read first
    exp = build_node_exporter(
        hostname=hostname or socket.gethostname(),
        backend=backend,
        fake_script=fake_script,
        sysfs_root=sysfs_root,
        app_dir=app_dir,
        app_max_age_s=app_max_age,
        expected_gpus=expected_gpus,
        expected_efa=expected_efa,
        gpu_poll_interval_s=None if once else gpu_poll_interval,
        gpu_deadline_s=gpu_deadline,
        efa=not no_efa,
        warn=notes.append,
    )
    if once:
        for note in notes:
            click.echo(note, err=True)
        click.echo(exp.render().decode(), nl=False)
        return
    try:
        server = exp.serve(bind, port)
    except OSError as exc:
        raise InputError("--port", f"cannot listen on {bind}:{port}: {exc.strerror}") from None
    real_port = server.server_address[1]
    click.echo(f"fmstack exporter: serving http://{bind}:{real_port}/metrics (Ctrl-C to stop)", err=True)
    for note in notes:
        click.echo(note, err=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.shutdown()


class _DuplicateKey(ValueError):
    """A JSON object names the same key twice (``json`` would keep the last one silently)."""


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _read_json(path: Path, option: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=_no_duplicate_keys)
    except _DuplicateKey as exc:
        raise InputError(option, f"{path}: key {exc.args[0]!r} appears twice in one object") from None
    except OSError as exc:
        raise InputError(option, f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise InputError(option, f"{path} is not UTF-8 JSON text (byte {exc.start}); a binary file?") from None
    except RecursionError:  # json's decoder recurses per nesting level: [[[[...]]]] 100,000 deep
        raise InputError(option, f"{path} nests JSON arrays or objects too deeply to read") from None
    except json.JSONDecodeError as exc:
        raise InputError(option, f"{path} is not valid JSON at line {exc.lineno}: {exc.msg}") from None


def _load_signals(path: Path) -> list[Any]:
    from fmstack.observability.health_io import signals_from_json

    return signals_from_json(_read_json(path, "--signals"))


def _load_alerts(path: Path) -> list[Any]:
    """Firing fmstack alerts (saved ``/api/v1/alerts`` JSON) -> signals per node, sorted by node."""
    from fmstack.observability.health_io import alerts_from_json, signals_from_alerts

    by_node = signals_from_alerts(alerts_from_json(_read_json(path, "--alerts")))
    return [by_node[n] for n in sorted(by_node)]


@click.command(
    "health",
    epilog="Example:\n\n\b\n  fmstack health --xid 79 --node n1 --format slurm\n"
    "  fmstack health --signals node-signals.json --format k8s --json\n"
    "  curl -s prometheus:9090/api/v1/alerts > alerts.json && fmstack health --alerts alerts.json --format slurm",
)
@click.option("--signals", "signals_file", type=click.Path(path_type=Path), help="JSON: one node, a list, or {nodes}.")
@click.option(
    "--alerts",
    "alerts_file",
    type=click.Path(path_type=Path),
    help="JSON of Prometheus /api/v1/alerts: the firing fmstack alerts become signals per node (Hostname label).",
)
@click.option("--xid", "xids", type=click.IntRange(1, 1023), multiple=True, help="An Xid seen on the node (repeat).")
@click.option("--node", default=None, help="Node name (with --xid).")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "slurm", "k8s"]),
    default="text",
    show_default=True,
    help="text: a table; slurm: scontrol commands; k8s: kubectl commands (printed, never run).",
)
@json_option
def health(
    signals_file: Path | None,
    alerts_file: Path | None,
    xids: tuple[int, ...],
    node: str | None,
    fmt: str,
    as_json: bool,
) -> None:
    """Decide per node: none, restart job, reset GPU, reboot or replace; render as Slurm or Kubernetes actions."""
    from fmstack.observability.health import HealthEngine, NodeSignals
    from fmstack.observability.health_io import check_node_name, k8s_node_state, render_k8s, render_slurm

    given = [name for name, v in (("--signals", signals_file), ("--alerts", alerts_file), ("--xid", xids)) if v]
    if not given:
        raise InputError("--signals", "give --signals FILE.json or at least one --xid (or --alerts FILE.json)")
    if len(given) > 1:
        raise InputError(given[1], f"use one of --signals, --alerts, --xid, not {' and '.join(given)}")
    if node and not xids:
        raise InputError("--node", f"only with --xid (with {given[0]} the node names come from the file)")
    if signals_file:
        nodes = _load_signals(signals_file)
    elif alerts_file:
        nodes = _load_alerts(alerts_file)
    else:
        nodes = [NodeSignals(node=node or "", xids=list(xids))]
    if fmt != "text":
        for s in nodes:
            if not s.node:
                raise InputError("--node", f"--format {fmt} needs a node name (--node, or 'node' in the signals)")
            check_node_name(s.node, "--node" if node else "node")
    elif node:
        check_node_name(node, "--node")
    engine = HealthEngine()
    results = []
    for s in nodes:
        d = engine.decide(s)
        row: dict[str, Any] = {"node": s.node, **d.to_dict()}
        if fmt == "slurm":
            row["commands"] = render_slurm(s.node, d)
        elif fmt == "k8s":
            row["commands"] = render_k8s(s.node, d)
            row["kubernetes"] = k8s_node_state(d)
        results.append(row)
    if as_json:
        print_json(results)
        return
    if fmt != "text":
        for row in results:
            for cmd in row["commands"]:
                click.echo(cmd)
        return
    if not results:  # an empty table said nothing about why
        source = f"{alerts_file}: no firing fmstack node alert" if alerts_file else f"{signals_file}: no node"
        console().print(f"{source}; nothing to do", markup=False, highlight=False)
        return
    table = Table("node", "action", "reasons")
    for row in results:
        table.add_row(row["node"] or "-", row["action"], "\n".join(row["reasons"]) or "-")
    console().print(table)
