"""The host-memory KV tier under the prefix / session caches (``estimate serve --kv-offload-gib``)."""

from __future__ import annotations

import functools
import json
from functools import cache
from typing import Any

import pytest
from click.testing import CliRunner

from fmstack.catalog import load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.cli.main import cli
from fmstack.cli.serve_offload import kv_offload
from fmstack.perfmodel import inference_sim_session as sessions_sim
from fmstack.perfmodel.inference import ServeConfig, deployment
from fmstack.perfmodel.inference_prefix import PrefixCache
from fmstack.perfmodel.inference_prefix_offload import HostTier, KvOffload
from fmstack.perfmodel.inference_sim import BatchingSim

_SERVE = ["estimate", "serve", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--tp", "4", "--precision",
          "fp8", "--kv-dtype", "fp8", "--input-len", "1024", "--output-len", "256", "--json"]  # fmt: skip
_SESSIONS = [*_SERVE, "--turns", "8", "--think-time-s", "60", "--qps", "5"]
"""A qps whose histories overflow the GPU pool's free part (later turns hit 78 % without the tier)."""


@cache
def _serve(*extra: str) -> dict[str, Any]:
    out = CliRunner().invoke(cli, list(extra))
    assert out.exit_code == 0, out.output
    data: dict[str, Any] = json.loads(out.output)
    return data


def _tier(gib: float = 1.0) -> KvOffload:
    return KvOffload(capacity_gib=gib, kv_bytes_per_token=1024.0, kv_bytes_per_token_gpu=256.0, gpus=4,
                     host_to_device_gbps=1.0)  # fmt: skip


def test_copy_time_by_hand() -> None:
    """llama3.1-70b, fp8 KV, tp 4 on p5.48xlarge: 2 x 80 layers x 8 KV heads x 128 x 1 byte = 163,840 bytes per
    token, 40,960 per GPU (2 of the 8 heads); 5,000 tokens over PCIe Gen4 x16 (31.5 GB/s per GPU, in parallel):
    5,000 x 40,960 / 31.5e9 = 6.5016 ms, 4 x 204.8 MB = 819.2 MB over the four links; 256 GiB hold
    256 x 2^30 / 163,840 = 1,677,721.6 tokens."""
    cat = load_catalog(None)
    cluster = build_cluster(cat, "p5.48xlarge", 1, part_of_domain=True)
    cfg = ServeConfig(tp=4, precision="fp8", kv_dtype="fp8", input_len=1024, output_len=256)
    off = kv_offload(256.0, deployment(cat.model("llama3.1-70b"), cluster, cfg), cluster)
    assert off is not None
    assert off.kv_bytes_per_token == 163_840 and off.kv_bytes_per_token_gpu == 40_960
    assert abs(off.copy_s(5000) - 5000 * 40_960 / 31.5e9) < 1e-15
    assert abs(off.copy_s(5000) - 6.5016e-3) < 1e-7
    assert off.copy_bytes(5000) == 4 * 5000 * 40_960
    assert abs(off.capacity_tokens - 1_677_721.6) < 1e-6
    assert kv_offload(0.0, deployment(cat.model("llama3.1-70b"), cluster, cfg), cluster) is None


def test_gpu_eviction_moves_to_host_and_a_host_hit_copies_back() -> None:
    """LRU on both tiers: the GPU evicts to the host; a hit there reports the tokens to copy and leaves the host."""
    tier = HostTier(_tier(gib=3000 / 2**30 * 1024))  # room for 3,000 tokens
    c = PrefixCache(tier)
    c.insert(1, 1000, 2500)
    c.insert(2, 1000, 2500)
    c.insert(3, 1000, 2500)  # 1 (least recently used) evicted to the host
    assert 1 in tier and c.tokens == 2000 and 1 in c and c.size(1) == 1000
    assert c.lookup(1) and c.acquire(1) == 1000 and c.loaded_tokens == 1000 and 1 not in tier
    assert tier.hits == 1 and tier.loaded_tokens == 1000
    assert c.acquire(1) == 0 and c.loaded_tokens == 0  # referenced already: no copy
    c.fit(0)  # 2 and 3 to the host, 2 first
    assert tier.tokens == 2000
    c.release(1)
    c.release(1)
    c.fit(0)  # 1 to the host: 3,000 tokens, full
    c.insert(4, 1000, 1000)
    c.fit(0)  # 4 to the host evicts the host's least recently used, 2
    assert 2 not in c and 3 in tier and 1 in tier and 4 in tier


def test_off_is_bit_identical() -> None:
    """``--kv-offload-gib 0`` (the default) changes nothing, sessions and shared prefixes alike."""
    assert _serve(*_SESSIONS) == _serve(*_SESSIONS, "--kv-offload-gib", "0")
    groups = [*_SERVE, "--qps", "4", "--replicas", "2", "--router", "cache-aware", "--prefix-groups", "32",
              "--prefix-len", "768"]  # fmt: skip
    assert _serve(*groups) == _serve(*groups, "--kv-offload-gib", "0")
    assert "kv_offload" not in _serve(*_SESSIONS)


def test_offload_raises_later_turns_hits_and_lowers_their_ttft() -> None:
    """Think times of 60 s evict histories from the GPU pool at 5 req/s; a 256 GiB host tier keeps them: later turns
    hit more (requests and tokens) and their TTFT p50 and p99 fall, the host hits paying their copies."""
    off, on = _serve(*_SESSIONS)["sessions"], _serve(*_SESSIONS, "--kv-offload-gib", "256")
    s = on["sessions"]
    assert off["hit_rate_later_turns"] < 0.9 < s["hit_rate_later_turns"]
    assert s["token_hit_rate_later_turns"] > off["token_hit_rate_later_turns"] + 0.1
    assert s["ttft_p50_s_later_turns"] < off["ttft_p50_s_later_turns"]
    assert s["ttft_p99_s_later_turns"] < off["ttft_p99_s_later_turns"]
    k = on["kv_offload"]
    assert 0 < k["host_hit_rate"] < 1 and 0 < k["host_token_hit_rate"] < s["token_hit_rate"]
    # every host hit's copy: its tokens x 40,960 bytes per GPU / 31.5 GB/s; the mean copy over bytes per GPU
    per_gpu = k["copied_bytes_per_request"] / 4
    assert abs(k["added_ttft_s_mean"] - per_gpu / 31.5e9) < 1e-12


def test_same_seed_same_output() -> None:
    run = [*_SESSIONS, "--kv-offload-gib", "256"]
    first = CliRunner().invoke(cli, run).output
    assert first == CliRunner().invoke(cli, run).output


def test_skip_ahead_gives_the_same_floats_with_the_tier(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stretch fast path stops where a host copy finishes: the session run with the tier gives the same JSON,
    float for float, as one iteration at a time (``skip_ahead=False``)."""
    argv = [*_SESSIONS, "--kv-offload-gib", "256"]
    fast = _serve(*argv)
    assert fast["kv_offload"]["host_hit_rate"] > 0.1  # the tier is used
    monkeypatch.setattr(sessions_sim, "BatchingSim", functools.partial(BatchingSim, skip_ahead=False))
    out = CliRunner().invoke(cli, argv)
    assert out.exit_code == 0, out.output
    assert json.loads(out.output) == fast
