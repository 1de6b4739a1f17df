"""A small decoder-only GPT for the reference workload, and its model-FLOPs count.

``GPTConfig`` + ``build_model(cfg)`` is the API other layers use (bench predicts this workload's step time
from ``flops_per_step``). torch is imported lazily by ``build_model`` so that configs and FLOP counts work
without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, kw_only=True, slots=True)
class GPTConfig:
    """Shape of the reference GPT (pre-LayerNorm blocks, causal attention, GELU MLP, untied LM head)."""

    vocab_size: int = 256
    """Tokens in the vocabulary."""
    seq_len: int = 32
    """Context length in tokens (learned positional embeddings of this length)."""
    d_model: int = 64
    """Hidden size."""
    n_layers: int = 2
    """Transformer blocks."""
    n_heads: int = 4
    """Attention heads; must divide d_model."""
    ffn_mult: int = 4
    """MLP hidden size = ffn_mult * d_model."""
    dropout: float = 0.0
    """Dropout on the residual branches (uses the torch RNG, so resume must restore it)."""

    def __post_init__(self) -> None:
        for name in ("vocab_size", "seq_len", "d_model", "n_layers", "n_heads", "ffn_mult"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}({getattr(self, name)}) must be > 0")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model({self.d_model}) % n_heads({self.n_heads}) = {self.d_model % self.n_heads} != 0")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout({self.dropout}) must be in [0, 1)")


PRESETS: dict[str, GPTConfig] = {
    "tiny": GPTConfig(),
    "small": GPTConfig(vocab_size=4096, seq_len=128, d_model=256, n_layers=4, n_heads=8),
    "medium": GPTConfig(vocab_size=32768, seq_len=1024, d_model=1024, n_layers=12, n_heads=16),
}


def matmul_params(cfg: GPTConfig) -> int:
    """Weights that take part in matrix multiplies: per block Wqkv (3d^2), Wo (d^2), MLP (2*f*d^2), plus the head (d*V).

    Embedding lookups, biases and LayerNorms do no matmul FLOPs and are left out, as in Kaplan et al. 2020 (Sec. 2.1)."""
    d, f = cfg.d_model, cfg.ffn_mult
    per_block = 3 * d * d + d * d + 2 * f * d * d
    return cfg.n_layers * per_block + d * cfg.vocab_size


def total_params(cfg: GPTConfig) -> int:
    """All parameters of ``build_model(cfg)`` (embeddings, biases and LayerNorms included)."""
    d, f, v, t = cfg.d_model, cfg.ffn_mult, cfg.vocab_size, cfg.seq_len
    per_block = (3 * d * d + 3 * d) + (d * d + d) + (f * d * d + f * d) + (f * d * d + d) + 4 * d
    return v * d + t * d + cfg.n_layers * per_block + 2 * d + (d * v + v)


def flops_per_token(cfg: GPTConfig) -> int:
    """Training model FLOPs per token: 6 * N_matmul + 12 * n_layers * seq_len * d_model.

    Source: Chowdhery et al. 2022 (PaLM), Appendix B: 6N for the forward and backward matmuls plus
    12 * L * H * Q * T for attention scores and values (H * Q = d_model); recomputation is not counted (MFU, not HFU).
    """
    return 6 * matmul_params(cfg) + 12 * cfg.n_layers * cfg.seq_len * cfg.d_model


def flops_per_step(cfg: GPTConfig, *, global_batch_size: int) -> int:
    """Model FLOPs of one optimizer step over ``global_batch_size`` sequences of ``cfg.seq_len`` tokens."""
    if global_batch_size <= 0:
        raise ValueError(f"global_batch_size({global_batch_size}) must be > 0")
    return flops_per_token(cfg) * global_batch_size * cfg.seq_len


def build_model(cfg: GPTConfig) -> torch.nn.Module:
    """Build the GPT as a ``torch.nn.Module`` mapping token ids [B, T] to logits [B, T, V]."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            d = cfg.d_model
            self.ln1 = nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.ln2 = nn.LayerNorm(d)
            self.fc1 = nn.Linear(d, cfg.ffn_mult * d)
            self.fc2 = nn.Linear(cfg.ffn_mult * d, d)
            self.drop = nn.Dropout(cfg.dropout)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
            shape = (b, t, cfg.n_heads, d // cfg.n_heads)
            q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
            att = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
            x = x + self.drop(self.proj(att))
            out: torch.Tensor = x + self.drop(self.fc2(F.gelu(self.fc1(self.ln2(x)))))
            return out

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
            self.pos = nn.Embedding(cfg.seq_len, cfg.d_model)
            self.blocks = nn.ModuleList([Block() for _ in range(cfg.n_layers)])
            self.ln = nn.LayerNorm(cfg.d_model)
            self.head = nn.Linear(cfg.d_model, cfg.vocab_size)

        def forward(self, idx: torch.Tensor) -> torch.Tensor:
            pos = torch.arange(idx.size(1), device=idx.device)
            x = self.tok(idx) + self.pos(pos)
            for block in self.blocks:
                x = block(x)
            out: torch.Tensor = self.head(self.ln(x))
            return out

    return GPT()


def synthetic_batch(cfg: GPTConfig, *, seed: int, step: int, rank: int, batch_size: int) -> tuple[Any, Any]:
    """Deterministic tokens for (seed, step, rank): the data position is just the step, so resume needs no data state.

    The stream is a fixed pseudo-random sequence with a learnable rule (next token = token + 1 mod V with noise),
    so the loss falls and a wrong resume shows up in the loss curve.
    """
    import torch

    g = torch.Generator().manual_seed(((seed * 1_000_003 + step) * 65_537 + rank) % (2**63))
    start = torch.randint(0, cfg.vocab_size, (batch_size, 1), generator=g)
    ramp = (start + torch.arange(cfg.seq_len + 1)) % cfg.vocab_size
    noise = torch.randint(0, cfg.vocab_size, ramp.shape, generator=g)
    keep = torch.rand(ramp.shape, generator=g) < 0.8
    tokens = torch.where(keep, ramp, noise)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
