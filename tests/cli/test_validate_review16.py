"""Session 16 review of `fmstack validate`: every row says what is compared (which GPU, which metric in which
unit, from which source, with what the source left out), and the summary lines follow from the printed rows."""

from __future__ import annotations

import json
import re
import statistics

from click.testing import CliRunner

from fmstack.cli.main import cli


def _invoke(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.split("│")[1:-1]]


def _rows(table: str) -> dict[str, list[str]]:
    """Each row's cells, a wrapped cell's lines joined (a row's continuation lines have an empty id)."""
    rows: dict[str, list[str]] = {}
    last: list[str] = []
    for line in table.splitlines():
        if not line.startswith("│"):
            continue
        cells = _cells(line)
        if cells[0]:
            last = rows[cells[0]] = cells
        elif last:
            last[:] = [f"{a} {b}".strip() for a, b in zip(last, cells, strict=True)]
    return rows


def test_training_rows_say_gpu_metric_unit_source_and_assumptions() -> None:
    out = _invoke("validate", "--only", "training")
    table, _, below = out.partition("training: not expressible")
    rows = _rows(table)
    # the GPU kind beside the count ("32" said nothing of A100 vs H100 vs B200), the metric with its unit
    assert rows["T001"][2] == "32 A100" and rows["T001"][3] == "TFLOP/s/GPU"
    assert rows["T022"][3] == "s/step" and rows["T024"][3] == "MFU %"
    assert rows["T072"][2] == "8 B200" and rows["T075"][2] == "8 GB200" and rows["T072"][3] == "tokens/s/GPU"
    # every reference in the notes column is printed once under the table; sources and assumptions were --json only
    notes = dict(re.findall(r"^\[(\d+)\] (.*)$", table, flags=re.M))
    refs = {n for c in rows.values() for n in re.findall(r"\[(\d+)\]", c[8])}
    assert refs == set(notes)
    assert any(t.startswith("source: Narayanan et al. 2021") for t in notes.values())
    assert any(t == "assumed: recompute not stated: none" for t in notes.values())
    # the model's memory verdict on a compared row is said (T064 is compared at 82 GiB per GPU on 80 GB H100s with
    # NeMo 24.07's Apex DistributedFusedAdam layout; T063, 90 GiB before that layout, now fits)
    assert any(t.startswith("model memory: the configuration does not fit (82 GiB") for t in notes.values())
    # a known miss: marked in its row, its reason once under the table (it filled 40 wrapped lines of a cell)
    assert "miss" in rows["T070"][8] and "T070 known miss" in table
    assert max(len(ln) for ln in table.splitlines() if ln.startswith("│")) <= 140
    # the rows apart: each reason once, numbered, no "(see next reason)" pointing at another row
    apart = [_cells(ln) for ln in below.split("training dense:")[0].splitlines() if ln.startswith("│ T")]
    assert apart and all(re.fullmatch(r"\(\d+\)", c[5]) for c in apart)
    assert "see next reason" not in out


def test_training_summary_lines_follow_from_the_printed_rows() -> None:
    out = _invoke("validate", "--only", "training")
    scope = {c["id"]: (c["scope"], bool(c["miss_reason"])) for c in
             json.loads(_invoke("validate", "--only", "training", "--json"))["training"]["cases"]}  # fmt: skip
    table = out.split("training: not expressible")[0]
    errors = {i: abs(float(c[6].split()[0])) for i, c in _rows(table).items()}
    for name, keep in (("dense", lambda i: scope[i][0] == "dense"), ("moe", lambda i: scope[i][0] == "moe"),
                       ("without the 2 known misses", lambda i: not scope[i][1])):  # fmt: skip
        chosen = [e for i, e in errors.items() if keep(i)]
        line = re.search(rf"training {name}: (\d+) cases, median \|error\| ([\d.]+) %, worst ([\d.]+) %", out)
        assert line, name
        assert int(line[1]) == len(chosen)
        assert abs(float(line[2]) - statistics.median(chosen)) <= 0.051  # printed rows carry one decimal
        assert float(line[3]) == max(chosen)
