"""Hand-checked formulas: nccl-tests busbw, GEMM FLOPs, model layer shapes, step GEMM count, DDP buckets."""

from __future__ import annotations

from pathlib import Path

import pytest

from fmstack.bench.collectives import algbw_gbps, bus_factor, busbw_gbps
from fmstack.bench.device import match_catalog_gpu
from fmstack.bench.gemm import GemmShape, model_shapes
from fmstack.bench.predict_step import ddp_buckets, step_gemms
from fmstack.catalog import Catalog, load_catalog
from fmstack.errors import InputError
from fmstack.workloads.gpt import GPTConfig, flops_per_step


def test_busbw_hand_worked_allreduce_8_ranks() -> None:
    # 1 GiB (1073741824 B) all-reduce on 8 ranks in 10 ms: algbw = 1073741824 / 0.01 / 1e9 = 107.3741824 GB/s,
    # busbw = algbw * 2 * 7 / 8 = 187.9048192 GB/s (nccl-tests doc/PERFORMANCE.md, all-reduce factor 2(n-1)/n)
    assert algbw_gbps(1073741824, 0.01) == pytest.approx(107.3741824)
    assert busbw_gbps("all_reduce", 1073741824, 0.01, 8) == pytest.approx(187.9048192)


def test_busbw_reproduces_published_nccl_tests_row() -> None:
    # shared/data/collective-measurements.csv COL-003: all_reduce, 16 ranks, 16777216 B, 298.1 us ->
    # algbw 56.28, busbw 105.52 GB/s as printed by nccl-tests
    assert algbw_gbps(16777216, 298.1e-6) == pytest.approx(56.28, abs=0.01)
    assert busbw_gbps("all_reduce", 16777216, 298.1e-6, 16) == pytest.approx(105.52, abs=0.01)


@pytest.mark.parametrize(
    ("op", "n", "factor"),
    [
        ("all_reduce", 2, 1.0),
        ("all_reduce", 4, 1.5),
        ("all_gather", 4, 0.75),
        ("reduce_scatter", 8, 0.875),
        ("all_to_all", 2, 0.5),
        ("broadcast", 8, 1.0),
    ],
)
def test_bus_factors(op: str, n: int, factor: float) -> None:
    assert bus_factor(op, n) == factor


def test_bus_factor_rejects_unknown_op() -> None:
    with pytest.raises(InputError, match="allowed: all_reduce"):
        bus_factor("all_sum", 2)


def test_gemm_flops() -> None:
    assert GemmShape(m=2, n=3, k=4).flops == 48.0


def test_model_shapes_llama_8b_unscaled(catalog: Catalog) -> None:
    # Llama 3.1 8B: h=4096, 32 heads, 8 KV heads, head_dim 128, ffn 14336, SwiGLU
    shapes = {s.label.split()[-1]: (s.m, s.n, s.k) for s in model_shapes(catalog.model("llama3.1-8b"),
                                                                         tokens=4096, max_dim=1 << 20)}  # fmt: skip
    assert shapes == {
        "qkv": (4096, (32 + 2 * 8) * 128, 4096),
        "attn_out": (4096, 4096, 4096),
        "mlp_up": (4096, 2 * 14336, 4096),
        "mlp_down": (4096, 4096, 14336),
    }


def test_model_shapes_moe_time_one_experts_share_of_the_tokens(catalog: Catalog) -> None:
    # Mixtral 8x7B: 8 experts, top-2, expert ffn 14336, SwiGLU; 4096 tokens -> 4096 x 2 / 8 = 1024 per expert (the
    # attention GEMMs keep all 4096); before, the expert GEMMs were timed 4x taller than any the layer runs
    shapes = {s.label.split()[-1]: (s.m, s.n, s.k) for s in model_shapes(catalog.model("mixtral-8x7b"),
                                                                         tokens=4096, max_dim=1 << 20)}  # fmt: skip
    assert shapes["qkv"][0] == 4096
    assert shapes["expert_up"] == (1024, 2 * 14336, 4096)
    assert shapes["expert_down"] == (1024, 4096, 14336)
    # DeepSeek-V3: 256 experts, top-8: 4096 x 8 / 256 = 128 tokens per expert
    ds = {s.label.split()[-1]: s.m for s in model_shapes(catalog.model("deepseek-v3"), tokens=4096, max_dim=1 << 20)}
    assert ds["expert_up"] == ds["expert_down"] == 128


def test_model_shapes_scaled_down_keep_the_limit(catalog: Catalog) -> None:
    shapes = model_shapes(catalog.model("llama3.1-70b"), tokens=4096, max_dim=512)
    assert all(max(s.m, s.n, s.k) <= 512 and s.m % 8 == 0 for s in shapes)
    assert all("(x" in s.label for s in shapes)


def test_step_gemm_flops_equal_the_workload_count() -> None:
    # bench's GEMM list (forward + two backward GEMMs per Linear, attention as batched GEMMs) must add up to
    # the workload's PaLM-appendix-B model FLOPs: 6 N_matmul + 12 L T d per token
    cfg = GPTConfig(vocab_size=512, seq_len=32, d_model=64, n_layers=3, n_heads=4)
    total = sum(s.flops * c for s, c in step_gemms(cfg, micro_batch=5))
    assert total == flops_per_step(cfg, global_batch_size=5)


def test_ddp_buckets() -> None:
    assert ddp_buckets(1000) == [1000]
    assert ddp_buckets((1 << 20) + (30 << 20)) == [1 << 20, 25 << 20, 5 << 20]


@pytest.mark.parametrize(
    ("driver_name", "expected"),
    [
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA GeForce RTX 4090", None),
        # other boards of a catalog model are not its SXM module: H100 PCIe has 756 bf16 dense TFLOP/s and 2.0 TB/s,
        # the catalog's H100 (SXM5) 989.5 and 3.35 (NVIDIA H100 datasheet); H100 NVL 835 and 3.9; A100 80GB PCIe
        # 1,935 GB/s against the SXM4's 2,039 (NVIDIA A100 datasheet). They matched H100 / A100-80GB before.
        ("NVIDIA H100 PCIe", None),
        ("NVIDIA H100 NVL", None),
        ("NVIDIA H200 NVL", None),
        ("NVIDIA A100 80GB PCIe", None),
        ("NVIDIA A100-PCIE-40GB", None),
    ],
)
def test_catalog_match_of_cuda_device_names(catalog: Catalog, driver_name: str, expected: str | None) -> None:
    gpu = match_catalog_gpu(driver_name, catalog)
    assert (gpu.name if gpu else None) == expected


def test_another_board_matches_a_catalog_entry_of_its_own(tmp_path: Path) -> None:
    (tmp_path / "h100_pcie.yaml").write_text(
        "kind: gpu\nentries:\n  - name: H100-PCIe\n    architecture: hopper\n    bf16_dense_tflops: 756\n"
        "    fp16_dense_tflops: 756\n    hbm_gb: 80\n    hbm_type: HBM2e\n    hbm_bw_tbps: 2.0\n    tdp_w: 350\n"
    )
    gpu = match_catalog_gpu("NVIDIA H100 PCIe", load_catalog(tmp_path))
    assert gpu is not None and gpu.name == "H100-PCIe" and gpu.bf16_dense_tflops == 756
