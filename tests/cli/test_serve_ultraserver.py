"""A serving replica on part of an UltraServer (session 14): ``estimate serve --instance u-p6e-gb200x72`` with its
default one node was refused ("num_nodes(1) must be a multiple of 18"), though a replica of a few GB200 nodes inside
one NVL72 rack is how such racks serve. It now prices as the component instance does (same NVLink domain, and the
UltraServer's per-instance network and price equal the instance's: tests/test_catalog_ultraserver.py)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from fmstack.cli.main import cli

ARGS = ["estimate", "serve", "--model", "llama3.1-8b", "--input-len", "1000", "--output-len", "200", "--json"]


def _serve(instance: str, *extra: str) -> dict[str, object]:
    res = CliRunner().invoke(cli, [*ARGS, "--instance", instance, *extra])
    assert res.exit_code == 0, res.output
    out: dict[str, object] = json.loads(res.output)
    return out


# two nodes at 256 clients: the default (every client the KV holds, 8,806) simulates the same deployment with 34x the
# clients, each iteration a pass over all of them (13 s); the one-node case keeps the default
@pytest.mark.parametrize("extra", [(), ("--tp", "8", "--nodes", "2", "--concurrency", "256")])
def test_a_replica_on_part_of_an_ultraserver_prices_as_its_instance(extra: tuple[str, ...]) -> None:
    us = _serve("u-p6e-gb200x72", *extra)
    inst = _serve("p6e-gb200.36xlarge", *extra)
    for key in ("output_tokens_per_s", "ttft_s", "itl_s", "max_concurrency", "ttft_p99_s"):
        assert us[key] == inst[key], key
