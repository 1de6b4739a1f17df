"""Imports point one way (DESIGN.md): cli -> reports -> (sim, observability, orchestration, bench,
workloads) -> perfmodel -> catalog. Only bench and workloads import torch. Every module imports alone."""

from __future__ import annotations

import ast
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "fmstack"

ALLOWED: dict[str, set[str]] = {
    "catalog": set(),
    "perfmodel": {"catalog"},
    "observability": {"catalog", "perfmodel"},
    "orchestration": {"catalog", "perfmodel", "observability"},
    "workloads": {"catalog", "perfmodel", "observability"},
    "bench": {"catalog", "perfmodel", "observability", "workloads"},
    "sim": {"catalog", "perfmodel", "orchestration", "observability"},
    "reports": {"catalog", "perfmodel", "sim", "observability", "orchestration", "bench", "workloads"},
    "cli": {"catalog", "perfmodel", "sim", "observability", "orchestration", "bench", "workloads", "reports"},
}
ALLOWED["__main__"] = {"cli"}
ROOT_MODULES = {"errors", "__init__", "__main__", "units", "fileio"}
TORCH_OK = {"bench", "workloads"}


def _modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def _layer(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_imports_point_one_way(path: Path) -> None:
    layer = _layer(path)
    for name in _imports(path):
        parts = name.split(".")
        if parts[0] == "torch":
            assert layer in TORCH_OK, f"{path.name}: only bench and workloads may import torch"
        if parts[0] != "fmstack" or len(parts) < 2:
            continue
        target = parts[1]
        if target in ROOT_MODULES or target == layer:
            continue
        allowed = ALLOWED.get(layer, set())
        assert target in allowed, f"{path.relative_to(SRC)} imports fmstack.{target}; {layer} may import {allowed}"


def test_every_module_imports_in_a_fresh_interpreter() -> None:
    names = []
    for path in _modules():
        rel = path.relative_to(SRC.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__main__":
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names.append(".".join(parts))
    code = "import importlib, sys\nimportlib.import_module(sys.argv[1])\n"

    def run(name: str) -> tuple[str, subprocess.CompletedProcess[str]]:
        return name, subprocess.run([sys.executable, "-c", code, name], capture_output=True, text=True, timeout=300)

    # one fresh interpreter per module (so no module relies on another having been imported first), several at once
    with ThreadPoolExecutor(max_workers=4) as pool:
        for name, proc in pool.map(run, names):
            assert proc.returncode == 0, f"{name}: {proc.stderr[-2000:]}"


def test_core_imports_no_torch() -> None:
    code = (
        "import sys, fmstack.catalog, fmstack.perfmodel, fmstack.cli.main\n"
        "assert 'torch' not in sys.modules, 'torch imported by the core'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
