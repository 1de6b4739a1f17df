"""The serving model's decode and prefill steps against the same steps measured on a real H100 (2026-11-24).

Measured by `benchmarks/bench_decode_loop_cuda.py` (benchmarks/results/decode-loop-h100-2026-11-24.md): the reference
decoder with Llama 3.1 8B's shape, and with 20 of Llama 3.1 70B's layers, bf16, each step replayed from a CUDA
graph. The model is recomputed here with today's code and the catalog's defaults, so a change to the serving model
that moves it away from these kernels fails this test (the files' own model column is history, not checked). Bounds: every torch.compile'd step (fused elementwise, as
vLLM runs a model) within 10 % (measured on 2026-11-24: -8.4 % .. +5.8 %); every eager step slower than the model
(eager PyTorch adds ~21 unfused kernels per layer that no serving engine runs).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fmstack.bench.predict_decode import StepPrice, price_decode, price_prefill
from fmstack.catalog import Catalog
from fmstack.catalog.topology import build_cluster

RESULTS = Path(__file__).parents[2] / "benchmarks" / "results" / "decode-loop-h100-2026-11-24"
COMPILED = (
    "decode-loop-compiled.json",
    "decode-loop-compiled-2.json",
    "decode-loop-compiled-regrouped.json",
    "decode-loop-70b-20l-compiled.json",
)
EAGER = ("decode-loop-gemv-calibrated.json",)


def _rows(files: tuple[str, ...], catalog: Catalog) -> list[tuple[str, float, float]]:
    """(label, model seconds now, measured seconds) for every SDPA step of ``files``."""
    cluster = build_cluster(catalog, "p5.48xlarge", 1)
    out = []
    for name in files:
        data: dict[str, Any] = json.loads((RESULTS / name).read_text(encoding="utf-8"))
        assert data["device"] == "NVIDIA H100 80GB HBM3" and data["catalog_gpu"] == "H100"
        arch = catalog.model(data["model"]).model_copy(update={"num_layers": data["decoder"]["num_layers"]})
        for p in data["points"]:
            if p["attention"] != "sdpa":
                continue
            price: StepPrice = (
                price_decode(arch, cluster, None, batch=p["batch"], attended=p["attended"])
                if p["kind"] == "decode"
                else price_prefill(arch, cluster, None, batch=p["batch"], prompt_len=p["context"])
            )
            out.append((f"{data['model']} {p['kind']} {p['batch']}x{p['context']}", price.gpu_s, p["kernel_s"]))
    return out


def test_compiled_steps_within_ten_percent(catalog: Catalog) -> None:
    rows = _rows(COMPILED, catalog)
    assert len(rows) == 17  # 8B: 8 decode + 5 prefill over three leases; 70B x 20 layers: 3 decode + 1 prefill
    worst = max(rows, key=lambda r: abs(r[1] / r[2] - 1.0))
    assert abs(worst[1] / worst[2] - 1.0) <= 0.10, worst


def test_eager_steps_are_slower_than_the_model(catalog: Catalog) -> None:
    rows = _rows(EAGER, catalog)
    assert len(rows) == 12
    assert all(model < measured for _, model, measured in rows), [r for r in rows if r[1] >= r[2]]
