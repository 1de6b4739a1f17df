"""Catalog behaviour: lookups, overrides, model parameter counts, topology shapes."""

from __future__ import annotations

from pathlib import Path

import pytest

from fmstack.catalog import Catalog, load_catalog
from fmstack.catalog.params import count_params
from fmstack.catalog.topology import build_cluster
from fmstack.errors import InputError

_ACTIVE_CONVENTION_DIFFERS = {"gpt-oss-120b"}  # OpenAI's 5.1B active excludes the input embedding table


def _published_tolerance(published_b: float) -> float:
    """1 %, or half a unit of the last digit the source printed (GPT '1.7B' is a rounded 1.65B)."""
    text = f"{published_b:g}"
    decimals = len(text.split(".")[1]) if "." in text else 0
    return max(0.01 * published_b, 0.5 * 10**-decimals)


def test_every_zoo_model_matches_its_published_parameter_count(catalog: Catalog) -> None:
    for model in catalog.all("model"):
        assert model.published_params_b is not None, model.name
        counts = count_params(model)
        total_b = counts.total / 1e9
        assert abs(total_b - model.published_params_b) <= _published_tolerance(model.published_params_b), (
            f"{model.name}: computed {total_b:.3f}B vs published {model.published_params_b}B"
        )
        if model.published_active_params_b and model.name not in _ACTIVE_CONVENTION_DIFFERS:
            assert counts.active / 1e9 == pytest.approx(model.published_active_params_b, rel=0.03), model.name


def test_gpt3_params_by_hand(catalog: Catalog) -> None:
    # 12 l h^2 + V h + s h with biases and norms (Narayanan et al. 2021, sec. 5.1)
    m = catalog.model("gpt3-175b")
    h, n_layers, vocab, seq = 12288, 96, 50257, 2048
    per_layer = 12 * h * h + 13 * h
    expected = n_layers * per_layer + vocab * h + seq * h + 2 * h
    assert count_params(m).total == expected


def test_llama_70b_by_hand(catalog: Catalog) -> None:
    m = catalog.model("llama3.1-70b")
    h, ffn, kv = 8192, 28672, 8 * 128
    per_layer = h * h * 2 + 2 * h * kv + 3 * h * ffn + 2 * h
    expected = 80 * per_layer + 2 * 128256 * h + h
    assert count_params(m).total == expected


def test_lookup_is_case_and_alias_insensitive(catalog: Catalog) -> None:
    assert catalog.gpu("h100-sxm").name == "H100"
    assert catalog.gpu("A100").name == "A100-80GB"
    assert catalog.model("Llama-3.1-70B").name == "llama3.1-70b"


def test_unknown_lists_known(catalog: Catalog) -> None:
    with pytest.raises(InputError, match="known: A100-40GB, A100-80GB, B200"):
        catalog.gpu("H1000")


def test_unknown_suggests_close_names(catalog: Catalog) -> None:
    # a dropped character, a wrong digit, a bare family prefix: the close names come first, all still listed
    with pytest.raises(InputError, match=r"unknown instance 'p5.48xlarg'; did you mean 'p5.48xlarge' or"):
        catalog.instance("p5.48xlarg")
    with pytest.raises(InputError, match=r"did you mean 'llama3.1-70b' or 'llama3.1-8b'\? known: deepseek-v3"):
        catalog.model("llama3.1-7b")
    with pytest.raises(InputError, match=r"unknown gpu 'h1000'; did you mean 'H100' or 'H800'\?"):
        catalog.gpu("h1000")
    # nothing close: no guess, only the list
    with pytest.raises(InputError, match=r"unknown model 'xyzzy'; known: deepseek-v3"):
        catalog.model("xyzzy")


def test_user_file_overrides_and_adds(tmp_path: Path) -> None:
    (tmp_path / "price.yaml").write_text(
        "kind: instance\nentries:\n  - name: p5.48xlarge\n    gpu: H100\n    num_gpus: 8\n    gpu_memory_gb: 640\n"
        "    vcpus: 192\n    host_memory_gib: 2048\n    nvlink_domain_gpus: 8\n    network: efa-v2\n"
        "    network_bw_gbps: 400\n    price_per_hour_usd: 40.0\n"
    )
    cat = load_catalog(tmp_path)
    assert cat.instance("p5.48xlarge").price_per_hour_usd == 40.0
    assert load_catalog().instance("p5.48xlarge").price_per_hour_usd != 40.0


def test_model_file(tmp_path: Path, catalog: Catalog) -> None:
    f = tmp_path / "tiny.yaml"
    f.write_text(
        "kind: model\nname: tiny\nfamily: llama\nnum_layers: 2\nhidden_size: 64\nffn_hidden_size: 256\n"
        "num_heads: 4\nnum_kv_heads: 2\nvocab_size: 100\nmax_seq_len: 128\n"
    )
    m = catalog.model(str(f))
    assert m.name == "tiny" and m.head_dim_eff == 16


def test_p5_cluster_topology(catalog: Catalog) -> None:
    c = build_cluster(catalog, "p5.48xlarge", 512)
    assert c.num_gpus == 4096 and c.gpus_per_domain == 8 and c.num_domains == 512
    assert c.network_bw_gbps_per_gpu == pytest.approx(50.0)
    assert c.hops(0, 7) == 0  # same node: NVLink
    assert c.hops(0, 8) == 1  # next node, same leaf
    assert c.hops(0, 16 * 8) == 3  # another leaf, same spine
    assert c.hops(0, 16 * 16 * 8 - 1) == 3  # last GPU under the first spine
    assert c.hops(0, 16 * 16 * 8) == 5  # across spines
    assert c.scale_up is not None and c.scale_up.name == "nvlink-4"
    assert c.scale_out.name == "efa-v2"


def test_nvl72_is_18_nodes_of_4(catalog: Catalog) -> None:
    c = build_cluster(catalog, "u-p6e-gb200x72", 36)
    assert c.gpus_per_node == 4 and c.nodes_per_domain == 18 and c.gpus_per_domain == 72
    assert c.num_domains == 2
    assert c.hops(0, 71) == 0 and c.hops(0, 72) > 0
    with pytest.raises(InputError, match=r"num_nodes\(20\) must be a multiple of 18"):
        build_cluster(catalog, "u-p6e-gb200x72", 20)
    x36 = build_cluster(catalog, "u-p6e-gb200x36", 9)
    assert x36.gpus_per_domain == 36


def test_cluster_rejects_bad_shapes(catalog: Catalog) -> None:
    with pytest.raises(InputError, match="nodes"):
        build_cluster(catalog, "p5.48xlarge", 0)
    with pytest.raises(InputError, match="unknown instance"):
        build_cluster(catalog, "p5.96xlarge", 2)


def test_network_bandwidth_may_be_given_in_gbit_per_s() -> None:
    """AWS quotes p5's EFA as 3,200 Gbps: the same node written either way is one node (400 GB/s)."""
    from fmstack.catalog.schema import Instance

    base = {
        "name": "n", "gpu": "H100", "num_gpus": 8, "gpu_memory_gb": 640, "vcpus": 192, "host_memory_gib": 2048,
        "nvlink_domain_gpus": 8, "network": "efa-v2",
    }  # fmt: skip
    assert Instance(**base, network_gbit_per_s=3200) == Instance(**base, network_bw_gbps=400)
