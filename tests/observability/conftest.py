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
    from fmstack.observability.fake import clone_efa_devices
    from fmstack.observability.sysfs import DictFs

    return clone_efa_devices(DictFs.from_tree(FIXTURES / "p5-node").files, "rdmap16s27", 32)
