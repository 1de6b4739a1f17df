"""The inference reference workload: a Llama-shaped decoder whose cached steps reproduce its uncached forward."""

from __future__ import annotations

import pytest

from fmstack.catalog import load_catalog
from fmstack.errors import InputError
from fmstack.perfmodel.modelconsts import model_consts
from fmstack.workloads.decoder import DecoderConfig, build_decoder

torch = pytest.importorskip("torch")

SMALL = DecoderConfig(vocab_size=97, hidden_size=64, num_layers=2, num_heads=8, num_kv_heads=2, head_dim=16,
                      ffn_hidden_size=96)  # fmt: skip


@pytest.mark.parametrize("attention", ["sdpa", "matmul"])
def test_prefill_then_decode_equals_the_uncached_forward(attention: str) -> None:
    """Invariant: logits of a token decoded against the cache equal the causal forward's logits at its position
    (fp32; the cache holds exactly what the forward recomputes)."""
    torch.manual_seed(0)
    model = build_decoder(SMALL)
    tokens = torch.randint(0, SMALL.vocab_size, (3, 12))
    with torch.no_grad():
        full = model(tokens)
        cache = model.new_cache(3, 12)
        assert torch.allclose(model.prefill(tokens[:, :8], cache), full[:, 7], atol=1e-5)
        for pos in range(8, 12):
            got = model.decode(tokens[:, pos], pos, cache, attention)  # type: ignore[arg-type]
            assert torch.allclose(got, full[:, pos], atol=1e-5), (pos, (got - full[:, pos]).abs().max())


def test_param_count_matches_the_module_and_the_catalog() -> None:
    model = build_decoder(SMALL)
    assert sum(p.numel() for p in model.parameters()) == SMALL.params()
    arch = load_catalog().model("llama3.1-8b")
    cfg = DecoderConfig.from_arch(arch)
    # the perfmodel counts Llama 3.1 8B the same way (8.03 B, Grattafiori et al. 2024, table 3)
    assert cfg.params() == model_consts(arch).params_total == 8_030_261_248


def test_kv_cache_bytes_by_hand() -> None:
    """Llama 3.1 8B, one sequence of 131,072 tokens, bf16: 2 (K, V) x 32 layers x 131,072 x 8 heads x 128 x 2 B
    = 16 GiB."""
    cfg = DecoderConfig.from_arch(load_catalog().model("llama3.1-8b"))
    assert cfg.kv_cache_bytes(1, 131_072) == 16 * 2**30


def test_a_moe_model_is_refused_with_what_differs() -> None:
    with pytest.raises(InputError, match=r"^model: deepseek-v3: .* this one has moe \(experts\), mla"):
        DecoderConfig.from_arch(load_catalog().model("deepseek-v3"))


def test_impossible_shapes_name_the_field() -> None:
    with pytest.raises(InputError, match=r"^num_kv_heads: must divide num_heads: 8 % 3 = 2$"):
        DecoderConfig(vocab_size=8, hidden_size=8, num_layers=1, num_heads=8, num_kv_heads=3, head_dim=2,
                      ffn_hidden_size=8)  # fmt: skip
    with pytest.raises(InputError, match=r"^hidden_size: must be > 0, got 0$"):
        DecoderConfig(vocab_size=8, hidden_size=0, num_layers=1, num_heads=1, num_kv_heads=1, head_dim=2,
                      ffn_hidden_size=8)  # fmt: skip
