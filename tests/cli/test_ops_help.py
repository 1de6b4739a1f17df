"""Every option of the operations commands says what it does in --help (session 9 review: exporter --sysfs-root
and health --format had no help text at all)."""

from __future__ import annotations

import importlib

import click
import pytest

from fmstack.cli.main import _COMMANDS

OPS = ["exporter", "health", "simulate", "launch", "status", "cancel", "catalog"]


def _commands(cmd: click.Command, path: str) -> list[tuple[str, click.Command]]:
    out = [(path, cmd)]
    if isinstance(cmd, click.Group):
        for name, sub in cmd.commands.items():
            out += _commands(sub, f"{path} {name}")
    return out


def _all() -> list[tuple[str, click.Command]]:
    found = []
    for name in OPS:
        module, attr = _COMMANDS[name].split(":")
        found += _commands(getattr(importlib.import_module(module), attr), name)
    return found


@pytest.mark.parametrize(("path", "cmd"), _all(), ids=[p for p, _ in _all()])
def test_every_option_has_help(path: str, cmd: click.Command) -> None:
    bare = [p.opts[0] for p in cmd.params if isinstance(p, click.Option) and not (p.help or "").strip()]
    assert bare == [], f"fmstack {path}: options without help: {bare}"
