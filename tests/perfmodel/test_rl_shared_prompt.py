"""The ``n`` samples of an RL prompt share its KV blocks and its prefill (session 16, helper N): vLLM
``SamplingParams.n`` prefills the prompt once and forks its blocks copy-on-write (Kwon et al. 2023, sec. 4.4), so a
rollout replica holds more sequences than independent requests of the same lengths (docs/inference.md, RL)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest

import fmstack.perfmodel.rl as rl_module
from fmstack.catalog import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.perfmodel.inference import ServeConfig, ServeEstimate, deployment, estimate_serve, memory_of
from fmstack.perfmodel.inference_kv import ServeMemory
from fmstack.perfmodel.rl import RLConfig, estimate_rl

REVIEW = {"algorithm": "grpo", "prompts_per_step": 256, "samples_per_prompt": 8, "prompt_len": 1024,
          "response_len": 1024, "rollout_tp": 1, "train_tp": 1}  # fmt: skip
"""Llama 3.1 8B GRPO on 2 x p5.48xlarge, colocated, TP 1 (the RL review's case; docs/inference.md's --compare)."""


def _memory(kv_tokens: int) -> ServeMemory:
    return ServeMemory(weights_gib=0.0, reserve_gib=0.0, kv_pool_gib=0.0, capacity_gib=0.0, kv_bytes_per_token_gpu=1.0,
                       kv_tokens=kv_tokens, block_tokens=16)  # fmt: skip


def test_shared_blocks_by_hand() -> None:
    """7,200 blocks of 16 tokens; 1024 + 1024 tokens = 128 blocks a sequence, 64 of them the prompt's. Alone: 7,200 //
    128 = 56. Eight samples of a prompt: 8 x 64 own + 64 shared = 576 blocks, so 7,200 x 8 // 576 = 100. A prompt
    of 1,030 tokens shares its 64 full blocks only (the partial one is each sample's): 129 blocks a sequence, 65 own,
    8 x 65 + 64 = 584 -> 98. One sampler, or nothing shared: the old count."""
    m = _memory(7200 * 16)
    assert m.max_concurrency(2048) == 56
    assert m.max_concurrency(2048, shared_tokens=1024, sharers=8) == 100
    assert m.max_concurrency(2054, shared_tokens=1030, sharers=8) == 7200 * 8 // 584 == 98
    assert m.max_concurrency(2048, shared_tokens=1024, sharers=1) == 56
    assert _memory(127 * 16).max_concurrency(2048, shared_tokens=1024, sharers=8) == 0  # not one sequence whole


def test_review_case_concurrency_and_rollout(catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    """The review's case: each TP 1 replica's pool (veRL's colocated 0.5 of HBM less the weights) holds 99
    independent 2048-token sequences (pool blocks // 128); with the prompt's 64 blocks held once per 8 samples,
    pool blocks x 8 // 576 = 176, by hand from the same pool. So each replica's 128 sequences (256 x 8 over 16 GPUs)
    run in one wave instead of 99 + 29: 24.2 s -> 17.2 s."""
    seen: list[ServeConfig] = []

    def spy(*args: Any, **kw: Any) -> ServeEstimate:
        seen.append(args[2])
        return estimate_serve(*args, **kw)

    monkeypatch.setattr(rl_module, "estimate_serve", spy)
    model, cluster = catalog.model("llama3.1-8b"), build_cluster(catalog, "p5.48xlarge", 2)
    est = estimate_rl(model, cluster, RLConfig(**REVIEW))
    d = deployment(model, cluster, ServeConfig(input_len=1024, output_len=1024))
    mem = memory_of(d, 1.0)
    share = (0.5 * cluster.gpu.hbm_gib - mem.weights_gib) / (cluster.gpu.hbm_gib - mem.weights_gib - mem.reserve_gib)
    pool_blocks = memory_of(d, share).kv_tokens // 16
    assert pool_blocks // 128 == 99
    assert pool_blocks * 8 // (8 * 64 + 64) == 176
    engine = seen[0]  # the rollout engine as estimate_rl prices it
    assert estimate_serve(model, cluster, engine).max_concurrency == 176
    assert estimate_serve(model, cluster, replace(engine, samples_per_prompt=1)).max_concurrency == 99
    assert est.rollout_concurrency == 128  # every sequence of the replica's share at once
    assert est.rollout["waves"] == 1.0 and est.rollout["drain_s"] == 0.0
    assert est.rollout["time_s"] == pytest.approx(17.23, abs=0.01)


def test_prefill_once_per_prompt(catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rollout engine is priced with the prompt's blocks shared by its samples and its prefill computed once:
    the 8 samples' uncached prompt tokens add up to one 1024-token prompt (the other 7/8 hit the prefix cache)."""
    seen: list[ServeConfig] = []

    def spy(*args: Any, **kw: Any) -> ServeEstimate:
        seen.append(args[2])
        return estimate_serve(*args, **kw)

    monkeypatch.setattr(rl_module, "estimate_serve", spy)
    estimate_rl(catalog.model("llama3.1-8b"), build_cluster(catalog, "p5.48xlarge", 2), RLConfig(**REVIEW))
    for cfg in seen:
        assert cfg.samples_per_prompt == 8
        new = cfg.input_len - math.floor(cfg.prefix_hit_rate * cfg.input_len)
        assert 8 * new == 1024
    assert ServeConfig().samples_per_prompt == 1  # independent requests (estimate serve) keep their own prompts
