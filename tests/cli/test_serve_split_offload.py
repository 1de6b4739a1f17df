"""A host-memory KV tier under a split's prefill caches (session 20; ``estimate serve --prefill-replicas P
--decode-replicas D --kv-offload-gib X``): a prefill replica's evicted prefixes go to its host tier, a hit there is
copied back before the prompt's first chunk (docs/inference.md, Disaggregation)."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from click.testing import CliRunner

from fmstack.cli.main import cli

# Llama 3.1 70B fp8 at TP 1 on H100: a prefill replica's pool holds ~46k tokens, so 64 prefixes of 1,536 tokens
# (98k) do not fit it; 32 GiB of host memory holds 209,715 tokens of fp8 KV (163,840 bytes a token) more.
_SPLIT = ["estimate", "serve", "--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--tp", "1", "--precision",
          "fp8", "--input-len", "2048", "--output-len", "128", "--qps", "4", "--prefix-groups", "64", "--prefix-len",
          "1536", "--prefill-replicas", "2", "--decode-replicas", "6", "--json"]  # fmt: skip


@cache
def _split(*extra: str) -> dict[str, Any]:
    out = CliRunner().invoke(cli, [*_SPLIT, *extra])
    assert out.exit_code == 0, out.output
    data: dict[str, Any] = json.loads(out.output)["disaggregated_simulation"]
    return data


def test_off_is_the_split_of_before() -> None:
    assert _split("--kv-offload-gib", "0") == _split() and "kv_offload" not in _split()


def test_host_hits_raise_the_prefill_hits_and_each_copy_takes_its_bytes_over_the_link() -> None:
    plain, tier = _split(), _split("--kv-offload-gib", "32")
    k = tier["kv_offload"]
    assert k["capacity_tokens"] == 32 * 2**30 / 163_840
    assert k["host_hit_rate"] > 0.2  # measured 0.418 (seed 0)
    # a host hit copies the whole 1,536-token prefix: 1,536 x 163,840 bytes over one GPU's PCIe Gen4 x16 (31.5 GB/s)
    assert abs(k["added_ttft_s_mean_host_hits"] - 1536 * 163_840 / 31.5e9) <= 1e-12
    assert abs(k["copied_bytes_per_request"] - k["host_hit_rate"] * 1536 * 163_840) <= 1e-3
    # what the GPU cache lost the host tier gives back (hits 0.499 -> 0.903), and the prompts computed fall with it
    assert tier["prefix_hit_rate_simulated"] > plain["prefix_hit_rate_simulated"]
    assert tier["prefill_utilisation"] < plain["prefill_utilisation"]
    assert tier["ttft_p50_s"] < plain["ttft_p50_s"]


def test_same_seed_same_output() -> None:
    first = _split("--kv-offload-gib", "32")
    out = CliRunner().invoke(cli, [*_SPLIT, "--kv-offload-gib", "32"])
    assert json.loads(out.output)["disaggregated_simulation"] == first
