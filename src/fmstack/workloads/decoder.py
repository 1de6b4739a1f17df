"""A Llama-shaped decoder with a KV cache: the inference reference workload (prefill and decode steps).

The serving model (:mod:`fmstack.perfmodel.inference_step`) prices an engine iteration by roofline: the linear
layers read every weight once per iteration, decode attention reads each sequence's KV cache, prefill attention is
causal. This module runs those iterations for real, in plain PyTorch, so `benchmarks/bench_decode_loop_cuda.py`
can put a measured step next to the model's prediction on the same GPU. The architecture is the catalog's dense
models' (Llama 2/3, Touvron et al. 2023; Grattafiori et al. 2024): RMSNorm, grouped-query attention with rotary
positions, a SwiGLU MLP, an untied LM head; random weights (speed does not depend on their values).

The cache is contiguous per layer, ``[batch, kv_heads, context, head_dim]`` for K and for V (a static cache, as
Hugging Face's ``StaticCache`` and the engines' CUDA-graph paths use), not paged: paging changes where blocks lie,
not the bytes a decode step reads. ``DecoderConfig`` and its arithmetic need no torch; ``build_decoder`` imports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, cast

from fmstack.catalog.schema import ModelArch
from fmstack.errors import InputError

if TYPE_CHECKING:
    from collections.abc import Iterator

    import torch

DecodeAttention = Literal["sdpa", "matmul"]
"""How a decode step attends: ``sdpa`` is ``torch.nn.functional.scaled_dot_product_attention`` (what plain PyTorch
code calls), ``matmul`` two batched matrix products around a softmax (the K and V reads, nothing fused)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DecoderConfig:
    """Shape of the decoder (the catalog's dense-model fields, under their catalog names)."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    ffn_hidden_size: int
    rope_theta: float = 500_000.0
    """Rotary base (Llama 3: 500,000); affects values only, not speed."""

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim",
                     "ffn_hidden_size"):  # fmt: skip
            if getattr(self, name) <= 0:
                raise InputError(name, f"must be > 0, got {getattr(self, name)}")
        if self.num_heads % self.num_kv_heads:
            raise InputError(
                "num_kv_heads",
                f"must divide num_heads: {self.num_heads} % {self.num_kv_heads} = {self.num_heads % self.num_kv_heads}",
            )
        if self.head_dim % 2:
            raise InputError("head_dim", f"rotary positions rotate pairs: must be even, got {self.head_dim}")

    @classmethod
    def from_arch(cls, arch: ModelArch) -> DecoderConfig:
        """The decoder of a catalog model; refused where the model is not what this decoder builds."""
        unlike = [
            f"{what} ({value})"
            for what, value, ok in (
                ("moe", "experts", arch.moe is None),
                ("mla", "latent attention", arch.mla is None),
                ("mlp", arch.mlp, arch.mlp == "swiglu"),
                ("position", arch.position, arch.position == "rope"),
                ("biases", "true", not arch.biases),
                ("tied_embeddings", "true", not arch.tied_embeddings),
            )
            if not ok
        ]
        if unlike:
            raise InputError(
                "model",
                f"{arch.name}: the reference decoder is a dense Llama-shaped model (SwiGLU, rotary positions, no "
                f"biases, untied head); this one has {', '.join(unlike)}; pick a dense Llama-family model",
            )
        return cls(
            vocab_size=arch.vocab_size,
            hidden_size=arch.hidden_size,
            num_layers=arch.num_layers,
            num_heads=arch.num_heads,
            num_kv_heads=arch.num_kv_heads,
            head_dim=arch.head_dim_eff,
            ffn_hidden_size=arch.ffn_hidden_size,
        )

    @property
    def q_width(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.num_kv_heads * self.head_dim

    def params(self) -> int:
        """Parameters of ``build_decoder(cfg)``: embedding, per layer QKV, output, gate/up, down and two norms,
        the final norm and the LM head."""
        h = self.hidden_size
        per_layer = h * (self.q_width + 2 * self.kv_width) + self.q_width * h + 3 * h * self.ffn_hidden_size + 2 * h
        return 2 * self.vocab_size * h + self.num_layers * per_layer + h

    def kv_cache_bytes(self, batch: int, context: int, bytes_per_value: int = 2) -> int:
        """K and V of ``batch`` sequences of ``context`` tokens over every layer."""
        return 2 * self.num_layers * batch * context * self.kv_width * bytes_per_value


KVCache = list[tuple["torch.Tensor", "torch.Tensor"]]
"""Per layer (K, V), each ``[batch, kv_heads, context, head_dim]``."""


class ReferenceDecoder(Protocol):
    """What :func:`build_decoder` returns (a ``torch.nn.Module``)."""

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor: ...
    def new_cache(self, batch: int, context: int) -> KVCache: ...
    def prefill(self, tokens: torch.Tensor, cache: KVCache) -> torch.Tensor: ...
    def decode(
        self, tokens: torch.Tensor, pos: int, cache: KVCache, attention: DecodeAttention = "sdpa"
    ) -> torch.Tensor: ...
    def parameters(self) -> Iterator[torch.nn.Parameter]: ...
    def requires_grad_(self, requires_grad: bool = True) -> ReferenceDecoder: ...


def build_decoder(cfg: DecoderConfig, *, device: str = "cpu", dtype: torch.dtype | None = None) -> ReferenceDecoder:
    """The decoder as a ``torch.nn.Module`` with three entry points (token ids are int64):

    - ``forward(tokens [B, T]) -> logits [B, T, V]``: no cache, causal (the reference for the other two);
    - ``prefill(tokens [B, T], cache) -> logits [B, V]``: fills ``cache`` positions 0..T-1, logits of the last
      position only (the LM head runs on one token per sequence, as serving engines do);
    - ``decode(tokens [B], pos, cache, attention) -> logits [B, V]``: one token per sequence at position ``pos``
      (every sequence at the same position), attending positions 0..pos.

    ``new_cache(batch, context)`` allocates a cache for up to ``context`` positions.
    """
    import torch
    import torch.nn.functional as F
    from torch import nn

    dt = dtype or torch.float32
    h, hd, nh, nkv = cfg.hidden_size, cfg.head_dim, cfg.num_heads, cfg.num_kv_heads

    def rope_tables(positions: int) -> tuple[torch.Tensor, torch.Tensor]:
        inv = 1.0 / cfg.rope_theta ** (torch.arange(0, hd, 2, device=device, dtype=torch.float32) / hd)
        ang = torch.outer(torch.arange(positions, device=device, dtype=torch.float32), inv)
        ang = torch.cat([ang, ang], dim=-1)  # [T, hd], the rotate-half layout
        return ang.cos().to(dt), ang.sin().to(dt)

    def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn_norm = nn.RMSNorm(h, device=device, dtype=dt)
            self.qkv = nn.Linear(h, cfg.q_width + 2 * cfg.kv_width, bias=False, device=device, dtype=dt)
            self.out = nn.Linear(cfg.q_width, h, bias=False, device=device, dtype=dt)
            self.mlp_norm = nn.RMSNorm(h, device=device, dtype=dt)
            self.gate_up = nn.Linear(h, 2 * cfg.ffn_hidden_size, bias=False, device=device, dtype=dt)
            self.down = nn.Linear(cfg.ffn_hidden_size, h, bias=False, device=device, dtype=dt)

        def project(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, ...]:
            b, t, _ = x.shape
            q, k, v = self.qkv(self.attn_norm(x)).split([cfg.q_width, cfg.kv_width, cfg.kv_width], dim=-1)
            q = rotate(q.view(b, t, nh, hd).transpose(1, 2), cos, sin)
            k = rotate(k.view(b, t, nkv, hd).transpose(1, 2), cos, sin)
            return q, k, v.view(b, t, nkv, hd).transpose(1, 2)

        def finish(self, x: torch.Tensor, att: torch.Tensor) -> torch.Tensor:
            b, _, t, _ = att.shape
            x = x + self.out(att.transpose(1, 2).reshape(b, t, cfg.q_width))
            gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
            out: torch.Tensor = x + self.down(F.silu(gate) * up)
            return out

    def decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, how: DecodeAttention) -> torch.Tensor:
        """q [B, H, 1, D] against k, v [B, Hkv, ctx, D]: every cached position is visible."""
        if how == "sdpa":
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=nh != nkv)
        if how != "matmul":
            raise InputError("attention", f"unknown {how!r}; allowed: sdpa, matmul")
        b = q.shape[0]
        g = q.view(b, nkv, nh // nkv, hd)  # the query heads that share one KV head
        p = torch.softmax((g @ k.transpose(-1, -2)).float() * hd**-0.5, dim=-1).to(v.dtype)
        return (p @ v).view(b, nh, 1, hd)

    class Decoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(cfg.vocab_size, h, device=device, dtype=dt)
            self.layers = nn.ModuleList([Layer() for _ in range(cfg.num_layers)])
            self.blocks: list[Layer] = list(self.layers)  # type: ignore[arg-type]  # the same modules, typed
            self.norm = nn.RMSNorm(h, device=device, dtype=dt)
            self.head = nn.Linear(h, cfg.vocab_size, bias=False, device=device, dtype=dt)
            self.context = 0
            self.cos, self.sin = rope_tables(1)

        def tables(self, positions: int) -> None:
            if positions > self.context:
                self.context = positions
                self.cos, self.sin = rope_tables(positions)

        def new_cache(self, batch: int, context: int) -> KVCache:
            self.tables(context)
            shape = (batch, nkv, context, hd)
            return [(torch.zeros(shape, device=device, dtype=dt), torch.zeros(shape, device=device, dtype=dt))
                    for _ in range(cfg.num_layers)]  # fmt: skip

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            t = tokens.shape[1]
            self.tables(t)
            cos, sin = self.cos[:t], self.sin[:t]
            x = self.embed(tokens)
            for layer in self.blocks:
                q, k, v = layer.project(x, cos, sin)
                att = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=nh != nkv)
                x = layer.finish(x, att)
            out: torch.Tensor = self.head(self.norm(x))
            return out

        def prefill(self, tokens: torch.Tensor, cache: KVCache) -> torch.Tensor:
            t = tokens.shape[1]
            cos, sin = self.cos[:t], self.sin[:t]
            x = self.embed(tokens)
            for layer, (kc, vc) in zip(self.blocks, cache, strict=True):
                q, k, v = layer.project(x, cos, sin)
                kc[:, :, :t].copy_(k)
                vc[:, :, :t].copy_(v)
                att = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=nh != nkv)
                x = layer.finish(x, att)
            out: torch.Tensor = self.head(self.norm(x[:, -1]))
            return out

        def decode(
            self,
            tokens: torch.Tensor,
            pos: int,
            cache: KVCache,
            attention: DecodeAttention = "sdpa",
        ) -> torch.Tensor:
            cos, sin = self.cos[pos : pos + 1], self.sin[pos : pos + 1]
            x = self.embed(tokens)[:, None]
            for layer, (kc, vc) in zip(self.blocks, cache, strict=True):
                q, k, v = layer.project(x, cos, sin)
                kc[:, :, pos : pos + 1].copy_(k)
                vc[:, :, pos : pos + 1].copy_(v)
                att = decode_attention(q, kc[:, :, : pos + 1], vc[:, :, : pos + 1], attention)
                x = layer.finish(x, att)
            out: torch.Tensor = self.head(self.norm(x[:, 0]))
            return out

    return cast(ReferenceDecoder, Decoder())
