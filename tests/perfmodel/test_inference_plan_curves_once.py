"""`plan serve` on short sequences (session 15): the analytic pieces that priced every concurrency up to a replica's
KV slots (10^4 to 10^6 of them for 16/4 tokens) are computed once, with the same floats: a prompt's own iteration
once per distinct running count (:func:`fmstack.perfmodel.inference_mixture.own_prompt_time`), a decode layout's
curve once per plan (:class:`fmstack.perfmodel.inference_plan_disagg.DecodePools`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from fmstack.catalog import Catalog
from fmstack.catalog.topology import Cluster, build_cluster
from fmstack.perfmodel.inference import ServeConfig, deployment, max_concurrency, running_limit, serve_curve
from fmstack.perfmodel.inference_disagg import SLO
from fmstack.perfmodel.inference_mixture import own_prompt_time
from fmstack.perfmodel.inference_plan_disagg import DecodePools, disagg_analytic


def test_own_prompt_time_is_pointwise(catalog: Catalog) -> None:
    """Each concurrency's value is the one it has alone (one-element array), float for float, whatever else the
    array holds and however often it repeats (the running count stays at the token budget's limit beyond it)."""
    cfg = ServeConfig(tp=1, precision="fp8", input_len=16, output_len=4, max_num_tokens=2048)
    d = deployment(catalog.model("llama3.1-8b"), build_cluster(catalog, "p5.48xlarge", 1), cfg)
    top = running_limit(d, cfg)  # 2,048 x 4 / 20 = 409.6 sequences
    assert top == 2048 * 4 / 20
    c = np.minimum(np.array([1.0, 7.0, 500.0, 3.0, 1000.0, 7.0, 409.0, 30_000.0]), top)
    for open_loop in (False, True):
        whole = own_prompt_time(d, c, 18.0, 16.0, 136.0, 4.0, 2048, open_loop=open_loop)
        alone = [float(own_prompt_time(d, np.array([x]), 18.0, 16.0, 136.0, 4.0, 2048, open_loop=open_loop)[0])
                 for x in c]  # fmt: skip
        assert whole.tolist() == alone
        assert whole[2] == whole[4] == whole[7]  # all at the limit


def test_the_plan_curve_over_every_slot_is_pointwise(catalog: Catalog) -> None:
    """The plan's curve over every concurrency up to the KV slots (30,961 for 16/4 tokens on one H100 in fp8): each
    point as a short curve through it gives it."""
    cfg = ServeConfig(tp=1, precision="fp8", input_len=16, output_len=4)
    d = deployment(catalog.model("llama3.1-8b"), build_cluster(catalog, "p5.48xlarge", 1), cfg)
    n = max_concurrency(d, cfg)
    assert n == 30_961
    conc = np.arange(1, n + 1, dtype=np.float64)
    full = serve_curve(d, cfg, conc)
    picks = np.array([0, 1, 408, 409, 410, 5000, n - 1])
    part = serve_curve(d, cfg, conc[picks])
    for f in ("ttft_s", "itl_s", "latency_s", "requests_per_s"):
        assert getattr(full, f)[picks].tolist() == getattr(part, f).tolist()


def test_shared_decode_pools_give_the_same_splits(catalog: Catalog) -> None:
    """Every ordered pair of Llama 3.1 8B fp8 layouts on one p5.48xlarge (tp 1, 2, 4, 8), 16/4 tokens: the split
    priced with the plan's shared decode figures equals the one priced on its own, field for field, and the
    figures are computed once per decode layout (4, not 16)."""
    model = catalog.model("llama3.1-8b")
    clusters = {n: build_cluster(catalog, "p5.48xlarge", n, part_of_domain=True) for n in (1, 2)}

    def cluster_of(name: str, nodes: int) -> Cluster:
        return clusters[nodes]

    slo = SLO(ttft_s=0.5, itl_s=0.05)
    base = ServeConfig(tp=1, precision="fp8", input_len=16, output_len=4, max_num_tokens=8192)
    layouts = [replace(base, tp=tp) for tp in (1, 2, 4, 8)]
    shared = DecodePools()
    found = 0
    for pre in layouts:
        for dec in layouts:
            dc = None if dec == pre else dec
            kw = dict(decode_cfg=dc)
            alone = disagg_analytic(pre, cluster_of, model, 5.0, slo, "p5.48xlarge", 1, **kw)  # type: ignore[arg-type]
            with_shared = disagg_analytic(pre, cluster_of, model, 5.0, slo, "p5.48xlarge", 1, decode_pools=shared,
                                          **kw)  # type: ignore[arg-type]  # fmt: skip
            assert alone == with_shared
            found += alone is not None
    assert found > 0
    assert len(shared._figures) == 4
