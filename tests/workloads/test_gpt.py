"""GPT config, parameter count and model FLOPs, checked by hand."""

from __future__ import annotations

import pytest

from fmstack.workloads.gpt import GPTConfig, flops_per_step, flops_per_token, matmul_params, total_params


def test_flops_per_token_by_hand() -> None:
    cfg = GPTConfig(vocab_size=256, seq_len=32, d_model=64, n_layers=2, n_heads=4)
    # per block: Wqkv 3*64^2 = 12288, Wo 4096, MLP 2*4*64^2 = 32768 -> 49152; 2 blocks 98304; head 64*256 = 16384
    assert matmul_params(cfg) == 114_688
    # 6 * 114688 = 688128; attention 12 * 2 * 32 * 64 = 49152
    assert flops_per_token(cfg) == 737_280
    # 8 sequences of 32 tokens: 256 tokens
    assert flops_per_step(cfg, global_batch_size=8) == 188_743_680


def test_bad_config_shows_the_arithmetic() -> None:
    with pytest.raises(ValueError, match=r"d_model\(64\) % n_heads\(6\) = 4 != 0"):
        GPTConfig(n_heads=6)
    with pytest.raises(ValueError, match="global_batch_size"):
        flops_per_step(GPTConfig(), global_batch_size=0)


@pytest.mark.torch
def test_total_params_matches_torch() -> None:
    pytest.importorskip("torch")
    from fmstack.workloads.gpt import build_model

    for cfg in (GPTConfig(), GPTConfig(vocab_size=100, seq_len=16, d_model=48, n_layers=3, n_heads=6, ffn_mult=2)):
        model = build_model(cfg)
        assert sum(p.numel() for p in model.parameters()) == total_params(cfg)
