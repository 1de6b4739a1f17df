"""The `fmstack` command: a lazy click group whose subcommands live in their own modules.

Subcommands are imported only when used, so `fmstack catalog ...` never pays for torch or
prometheus-client. Adding a command is one line in ``_COMMANDS``.
"""

from __future__ import annotations

import difflib
import importlib
import sys
from typing import Any

import click

from fmstack import __version__
from fmstack.errors import InputError

# name -> "module:attribute" of a click command or group
_COMMANDS: dict[str, str] = {
    "simulate": "fmstack.cli.sim_cmd:simulate",
    "catalog": "fmstack.cli.catalog_cmd:catalog",
    "launch": "fmstack.cli.launch_cmd:launch",
    "status": "fmstack.cli.launch_cmd:status",
    "cancel": "fmstack.cli.launch_cmd:cancel",
    "estimate": "fmstack.cli.estimate_cmd:estimate",
    "plan": "fmstack.cli.plan_cmd:plan",
    "scale": "fmstack.cli.scale_cmd:scale",
    "validate": "fmstack.cli.validate_cmd:validate",
    "exporter": "fmstack.cli.observe_cmd:exporter",
    "health": "fmstack.cli.observe_cmd:health",
    "bench": "fmstack.cli.bench_cmd:bench",
}


def register(name: str, target: str) -> None:
    """Register a subcommand before `main` runs (for plug-ins and tests)."""
    _COMMANDS[name] = target


# the README's verbs that are not commands themselves -> the commands that do them
_VERBS: dict[str, str] = {
    "observe": "fmstack exporter (serve metrics; --print-rules, --dashboards) and fmstack health (node actions)",
    "measure": "fmstack bench (gemm, memory, collectives, storage, all)",
}


class LazyGroup(click.Group):
    """A click group that imports each subcommand's module on first use."""

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] in _VERBS and args[0] not in _COMMANDS:
            raise click.UsageError(f"No such command '{args[0]}': to {args[0]}, use {_VERBS[args[0]]}", ctx)
        if args and not args[0].startswith("-") and args[0] not in _COMMANDS:
            close = difflib.get_close_matches(args[0], list(_COMMANDS), n=2, cutoff=0.6)
            if close:
                hint = " or ".join(f"'{c}'" for c in close)
                raise click.UsageError(f"No such command '{args[0]}'; did you mean {hint}?", ctx)
        return super().resolve_command(ctx, args)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = _COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        command = getattr(importlib.import_module(module_name), attr)
        assert isinstance(command, click.Command)
        return command


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110},
    epilog="Example:\n\n  fmstack plan train --model llama3.1-70b --instance p5.48xlarge --gpus 512 --tokens 2e12",
)
@click.version_option(__version__, prog_name="fmstack")
def cli() -> None:
    """fmstack: plan, measure, launch, observe and simulate FM training and inference on GPU clusters."""


def _one_line(text: str) -> str:
    return " ".join(text.split())


def main(argv: list[str] | None = None) -> Any:
    """Entry point: bad input becomes one line on stderr and exit code 2, never a traceback."""
    try:
        return cli.main(args=argv, prog_name="fmstack", standalone_mode=False)
    except InputError as exc:
        click.echo(f"fmstack: error: {_one_line(str(exc))}", err=True)
        sys.exit(2)
    except click.exceptions.Abort:
        click.echo("fmstack: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # click >= 8.2: `fmstack` or `fmstack plan` alone
            click.echo(exc.format_message(), err=True)  # the help as --help prints it, not flattened into one line
            sys.exit(2)
        click.echo(f"fmstack: error: {_one_line(exc.format_message())}", err=True)
        sys.exit(2)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        sys.exit(0)
