"""Fixtures for the observability tests: fake node backends built from the recorded trees."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


def efa_tree_32() -> dict[str, str]:
    """The recorded p5 tree with its 2 EFA devices cloned to 32 (p5.48xlarge has 32), plus Lustre."""
    from fmstack.observability.sysfs import DictFs

    base = DictFs.from_tree(FIXTURES / "p5-node").files
    files = {k: v for k, v in base.items() if not k.startswith("sys/class/infiniband/")}
    template = {k.split("/", 4)[4]: v for k, v in base.items() if k.startswith("sys/class/infiniband/rdmap16s27/")}
    for i in range(32):
        for rest, text in template.items():
            files[f"sys/class/infiniband/rdmap{16 * (i + 1)}s27/{rest}"] = text
    return files
