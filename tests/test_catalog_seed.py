"""The seed's tables, parsed from the seed text itself, must appear in the catalog exactly."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fmstack.catalog import Catalog


def _tables(text: str) -> list[list[list[str]]]:
    tables: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(set(c) <= {"-", ":"} for c in cells):
                current.append(cells)
        elif current:
            tables.append(current)
            current = []
    if current:
        tables.append(current)
    return tables


def _num(cell: str) -> float:
    match = re.search(r"[\d,]*\.?\d+", cell)
    assert match, cell
    return float(match.group(0).replace(",", ""))


@pytest.fixture(scope="module")
def seed_tables(shared_dir: Path) -> list[list[list[str]]]:
    text = next((shared_dir / "seed").glob("*.txt")).read_text(encoding="utf-8")
    tables = _tables(text)
    assert len(tables) == 4, "the seed has a GPU table, an instance table, a GB200 table, an UltraServer table"
    return tables


def test_gpu_table(seed_tables: list[list[list[str]]], catalog: Catalog) -> None:
    header, *rows = seed_tables[0]
    assert header[1].startswith("BF16")
    for row in rows:
        gpu = catalog.gpu(row[0].split()[0])
        assert gpu.bf16_dense_tflops == pytest.approx(_num(row[1]) * 1000)
        assert gpu.fp8_dense_tflops == pytest.approx(_num(row[2]) * 1000)
        if row[3] == "—":
            assert gpu.fp4_dense_tflops is None
        else:
            assert gpu.fp4_dense_tflops == pytest.approx(_num(row[3]) * 1000)
        assert gpu.hbm_gb == _num(row[4])
        assert gpu.hbm_type == row[4].split()[-1]
        assert gpu.hbm_bw_tbps == _num(row[5])
    assert len(rows) == 4


def test_instance_table(seed_tables: list[list[list[str]]], catalog: Catalog) -> None:
    header, *rows = seed_tables[1]
    assert header[0] == "Instance Type"
    assert [r[0] for r in rows] == [
        "p5.4xlarge", "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge", "p6-b200.48xlarge", "p6-b300.48xlarge",
    ]  # fmt: skip
    for name, gpu, n, mem, nvl, nvl_bw, efa, efa_bw in rows:
        inst = catalog.instance(name)
        assert inst.gpu == gpu
        assert inst.num_gpus == int(n)
        assert inst.gpu_memory_gb == _num(mem)
        if nvl == "—":
            assert inst.nvlink_generation is None
            assert inst.nvlink_bw_aggregate_tbps is None
        else:
            assert inst.nvlink_generation == _num(nvl)
            assert inst.nvlink_bw_aggregate_tbps == _num(nvl_bw)
        assert inst.network == f"efa-{efa}"
        assert inst.network_bw_gbps == _num(efa_bw)


def test_gb200_tables(seed_tables: list[list[list[str]]], catalog: Catalog) -> None:
    (_, row) = seed_tables[2]
    inst = catalog.instance(row[0])
    assert inst.gpu == "GB200" and inst.num_gpus == int(row[2])
    assert inst.gpu_memory_gb == _num(row[3])
    assert inst.network == f"efa-{row[7]}" and inst.network_bw_gbps == _num(row[8])
    _, *rows = seed_tables[3]
    for name, component, gpus, hbm, efa, efa_bw in rows:
        us = catalog.ultraserver(name)
        assert us.instance == component
        assert us.num_gpus == int(gpus)
        assert us.hbm_aggregate_tb == _num(hbm)
        assert us.network == f"efa-{efa}" and us.network_bw_gbps == _num(efa_bw)
        assert us.num_instances * inst.num_gpus == us.num_gpus


def test_efa_generations_as_stated(catalog: Catalog) -> None:
    v2, v3, v4 = (catalog.fabric(f"efa-v{i}") for i in (2, 3, 4))
    assert v3.latency_us == pytest.approx(v2.latency_us * (1 - 0.35), rel=0.03)
    assert v4.collective_speedup == pytest.approx(1.18)


def test_every_number_has_a_source(catalog: Catalog) -> None:
    skip = {"num_kv_heads"}
    for kind in catalog.entries:
        for entry in catalog.all(kind):
            for field in entry.model_fields_set:
                value = getattr(entry, field)
                numeric = isinstance(value, int | float) and not isinstance(value, bool)
                if numeric and field not in skip and field not in entry.sources:
                    raise AssertionError(f"{kind} {entry.name}: field {field}={value} has no source")
