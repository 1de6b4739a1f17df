"""`fmstack catalog show model FILE.yaml` shows a model file as every --model reads it (it said "unknown model")."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from fmstack.cli.catalog_cmd import catalog

MODEL = """kind: model
name: my-llama
family: llama
num_layers: 32
hidden_size: 4096
ffn_hidden_size: 14336
num_heads: 32
num_kv_heads: 8
vocab_size: 128256
max_seq_len: 8192
mlp: swiglu
"""


def test_show_model_reads_a_model_file(tmp_path: Path) -> None:
    path = tmp_path / "my.yaml"
    path.write_text(MODEL)
    r = CliRunner().invoke(catalog, ["show", "model", str(path), "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert (data["name"], data["num_layers"], data["num_kv_heads"]) == ("my-llama", 32, 8)


def test_list_marks_unlisted_values_instead_of_zero() -> None:
    """An instance without a catalogued NVMe size (dgx-gb200) shows "-" where it showed 0 TB; p5 keeps 30.72."""
    r = CliRunner().invoke(catalog, ["list", "instance"], terminal_width=200)
    assert r.exit_code == 0, r.output
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[1:-1]] for line in r.output.splitlines()
            if line.startswith("│")}  # fmt: skip
    assert rows["dgx-gb200"][7] == "-"
    assert rows["p5.48xlarge"][7] == "30.72"
