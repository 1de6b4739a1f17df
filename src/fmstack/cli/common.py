"""Options and helpers shared by commands: --json, --catalog, --calibration, output rendering."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.console import Console

from fmstack.errors import InputError

if TYPE_CHECKING:
    from fmstack.catalog.topology import Cluster
    from fmstack.perfmodel.efficiency import Efficiency, EfficiencyFor

F = TypeVar("F", bound=Callable[..., Any])

CATALOG_ENV = "FMSTACK_CATALOG"


def json_option(func: F) -> F:
    """Add ``--json``: print the result as JSON instead of a table."""
    return click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")(func)


def catalog_option(func: F) -> F:
    """Add ``--catalog DIR``: user catalog files that add to or override the built-in catalog."""
    return click.option(
        "--catalog",
        "catalog_dir",
        type=click.Path(path_type=Path),
        default=None,
        envvar=CATALOG_ENV,
        help=f"Directory of catalog YAML files that add or override entries (env {CATALOG_ENV}).",
    )(func)


def calibration_options(func: F) -> F:
    """Add ``--calibration PROFILE`` and ``--calibration-force`` (read them with :func:`calibration_for`)."""
    func = click.option(
        "--calibration-force",
        is_flag=True,
        help="Apply --calibration even if it was measured on a GPU other than the cluster's.",
    )(func)
    return click.option(
        "--calibration",
        type=click.Path(path_type=Path),
        default=None,
        help="Calibration profile JSON (fmstack bench --out).",
    )(func)


def calibration_for(calibration: Path | None, clusters: Sequence[Cluster], force: bool) -> EfficiencyFor | None:
    """Each cluster's efficiency from the ``--calibration`` profile (None without one: the default curves).

    Refused before anything is searched or estimated: ``--calibration-force`` without a profile; a profile measured
    on a GPU other than a cluster's (:func:`fmstack.perfmodel.efficiency.check_profile_gpu`) unless forced; a profile
    of a device the catalog does not know (a CPU) even when forced.
    """
    if calibration is None:
        if force:
            raise InputError("calibration-force", "applies a --calibration profile; none was given")
        return None
    from fmstack.perfmodel.calibration import load_profile
    from fmstack.perfmodel.efficiency import check_profile_gpu, check_profile_has_catalog_peak, efficiency_from_profile

    profile = load_profile(calibration)
    if not force:
        for cluster in clusters:
            check_profile_gpu(profile, cluster.gpu)
    check_profile_has_catalog_peak(profile)  # a CPU's profile: refused before searching, forced or not
    by_gpu: dict[str, Efficiency] = {}  # a search builds many deployments of one GPU: derive its curves once

    def efficiency(cluster: Cluster) -> Efficiency:
        if cluster.gpu.name not in by_gpu:
            by_gpu[cluster.gpu.name] = efficiency_from_profile(profile, cluster.gpu, force=force)
        return by_gpu[cluster.gpu.name]

    return efficiency


def calibrated(calibration: Path | None, cluster: Cluster, force: bool) -> Efficiency | None:
    """One cluster's efficiency from the ``--calibration`` profile (:func:`calibration_for`), None without one."""
    efficiency_for = calibration_for(calibration, [cluster], force)
    return None if efficiency_for is None else efficiency_for(cluster)


def calibration_argv(calibration: Path | None, force: bool) -> list[str]:
    """The ``--calibration`` / ``--calibration-force`` arguments that reapply the profile (a plan row's command)."""
    if calibration is None:
        return []
    return ["--calibration", str(calibration)] + (["--calibration-force"] if force else [])


def choice(values: tuple[str, ...]) -> click.Choice[str]:
    """A click choice that takes any letter case (``--precision FP8``)."""
    return click.Choice(values, case_sensitive=False)


def print_json(data: Any) -> None:
    """``data`` as strict JSON (RFC 8259): a NaN or infinite float is written null, not ``NaN`` / ``Infinity``,
    which jq and most parsers refuse."""
    click.echo(json.dumps(_finite(data), indent=2, sort_keys=False, default=_json_default, allow_nan=False))


def _finite(data: Any) -> Any:
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_finite(v) for v in data]
    return data


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "model_dump"):
        return _finite(obj.model_dump(mode="json"))
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item"):
        return _finite(obj.item())
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def console() -> Console:
    """A console for tables; width fixed when not a terminal so output is stable in pipes and tests."""
    width = None if os.isatty(1) else 140
    return Console(width=width, highlight=False, soft_wrap=False)


def parts_table(title: str, first_column: str, parts: dict[str, float], total_s: float, *, digits: int = 4) -> Any:
    """A rich table of the additive parts of a time (step, iteration, RL step) with their shares."""
    from rich.table import Table

    table = Table(first_column, "seconds", "share", title=title, title_justify="left")
    for name, value in parts.items():
        if value > 0:
            table.add_row(name, f"{value:.{digits}f}", f"{100 * value / total_s:5.1f} %")
    table.add_row("[bold]total", f"[bold]{total_s:.{digits}f}", "100.0 %")
    return table


def duration_text(seconds: float) -> str:
    """A duration in the unit that shows it: ``4.2 s``, ``13 min``, ``2.5 h``, ``1,234 h`` (never ``0 h`` for 13 min)."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    hours = seconds / 3600
    return f"{hours:.1f} h" if hours < 10 else f"{hours:,.0f} h"


def number_text(value: float) -> str:
    """A predicted value: thousands with separators (``13,552``, never ``1.355e+04``), smaller values with four
    significant digits (``146.8``, ``0.0002199``). Measured values print as published (``:,g``)."""
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    text = f"{value:.4g}"
    return positional(value, 4) if "e" in text else text


def published_text(value: float) -> str:
    """A measured value as published (``:,g``: ``479.28``, ``0.000217014``), never in exponent form (``9.12964e-05``
    prints ``0.0000912964``)."""
    text = f"{value:,g}"
    return positional(value, 6) if "e" in text else text


def positional(value: float, digits: int) -> str:
    """``value`` with ``digits`` significant digits and no exponent (trailing zeros dropped)."""
    import numpy as np

    return str(np.format_float_positional(value, precision=digits, unique=False, fractional=False, trim="-"))


def no_wrap(table: Any, *headers: str) -> None:
    """Keep these columns on one line (an id or ``+156.9 %`` split over two lines reads as two values)."""
    for column in table.columns:
        if column.header in headers:
            column.no_wrap = True


def whole_nodes_hint(gpus: int, per_node: int) -> str:
    """The whole-node GPU counts either side of ``gpus``: ``"; nearest: 496 (62 nodes) or 504 (63 nodes)"``."""
    below, above = gpus // per_node, gpus // per_node + 1
    options = [f"{n * per_node} ({n} node{'s' if n > 1 else ''})" for n in (below, above) if n >= 1]
    return f"; nearest: {' or '.join(options)}"


class SubcommandGroup(click.Group):
    """A group whose options all belong to its subcommands (plan, estimate): ``fmstack plan --model X`` says to put
    the options after ``train`` or ``serve`` instead of click's "No such option '--model'. Did you mean '--help'?"."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as exc:
            subs = list(self.commands)  # in the order they were added: the main one first
            names = " or ".join(f"'{ctx.command_path} {name}'" for name in subs)
            message = (
                f"no option {exc.option_name} on {ctx.command_path} itself: choose what to do first, {names}, and "
                f"give the options after it (for example: {ctx.command_path} {subs[0]} "
                f"{exc.option_name} ...)"
            )
            raise click.NoSuchOption(exc.option_name, message=message, ctx=ctx) from None


class SearchCommand(click.Command):
    """A command that searches the parallel layout (plan train, scale): an option that fixes one degree (``--tp``)
    says where it belongs instead of click's "Did you mean '--top'?"."""

    FIXED = ("--tp", "--pp", "--dp", "--cp", "--ep", "--etp", "--vpp", "--micro-batch", "--sharding")

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as exc:
            # a new exception rather than editing this one: click >= 8.5 marks its fields Final
            if exc.option_name in self.FIXED:
                message = (
                    f"no option {exc.option_name}: {ctx.command_path} searches every layout; to price one layout, "
                    "give it to fmstack estimate train (plan train prints that command for its rows)"
                )
            elif exc.option_name == "--nodes":
                message = f"no option --nodes: {ctx.command_path} takes the GPU count, --gpus (nodes x GPUs per node)"
            else:
                raise
            raise click.NoSuchOption(exc.option_name, message=message, ctx=ctx) from None
