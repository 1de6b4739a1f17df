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
