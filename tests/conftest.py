"""Shared fixtures: the catalog, the repository root, the shared data folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from fmstack.catalog import Catalog, load_catalog

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return load_catalog()


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} not present (CI places shared/ beside the clone)")
    return SHARED
