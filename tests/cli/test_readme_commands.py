"""The README's command table names every command `fmstack --help` lists (session 14 docs drift review).

`fmstack catalog` and the subcommands of groups (`simulate compare`, `simulate elastic`, ...) were missing from the
table although `fmstack --help` lists them; this keeps the two in step as commands are added.
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from fmstack.cli.main import cli

README = Path(__file__).resolve().parents[2] / "README.md"


def _command_table() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("| verb | commands | docs |")
    end = text.index("\n\n", start)
    return text[start:end].replace("\\|", "|")


def _lists(table: str, group: str, sub: str) -> bool:
    # `fmstack plan train|serve|rl` names each of its alternatives; `fmstack simulate compare` one subcommand
    alternatives = re.findall(rf"fmstack {re.escape(group)} ([\w-]+(?:\|[\w-]+)*)", table)
    return any(sub in found.split("|") for found in alternatives)


def test_every_top_level_command_is_in_the_readme_table() -> None:
    table = _command_table()
    ctx = click.Context(cli)
    missing = [name for name in cli.list_commands(ctx) if f"fmstack {name}" not in table]
    assert missing == [], f"README command table lacks: {missing}"


def test_every_subcommand_of_a_group_is_in_the_readme_table() -> None:
    table = _command_table()
    ctx = click.Context(cli)
    missing: list[str] = []
    for name in cli.list_commands(ctx):
        command = cli.get_command(ctx, name)
        if not isinstance(command, click.Group):
            continue
        subs = command.list_commands(click.Context(command))
        missing += [f"{name} {sub}" for sub in subs if not _lists(table, name, sub)]
    assert missing == [], f"README command table lacks: {missing}"
