"""Split placement speed: :func:`~fmstack.perfmodel.inference_disagg_place.kv_pair_times` with each replica's NVLink
domain (:class:`~fmstack.perfmodel.inference_kv_pairs.PairTimes`, session 20) and a first fit that resumes where a
replica size last fitted, against the path before, same process: the ``P x D`` matrix of pair times filled cell by
cell and every first fit scanning from node 0.

Splits of Llama 3.1 8B fp8 (one H100 a replica, p5.48xlarge: 8 to a node, one node an NVLink domain) of the sizes
``fmstack plan serve --qps R`` checks at 1e4, 1e5 and 3e5 requests/s of 1,024 / 256 tokens (185:122, 1846:1216 and
5538:3647 replicas; the 1e6 split, 18451:12154, took ~110 s before). Prints each run's seconds, the ratio, and
whether both give the same pair times, links and NVLink share.
Usage: python benchmarks/bench_split_placement.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Iterator
from typing import Any
from unittest import mock

from fmstack.catalog import load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.perfmodel import inference_disagg_place as place
from fmstack.perfmodel.inference import ServeConfig, deployment

SPLITS = ((185, 122), (1846, 1216), (5538, 3647))


@contextlib.contextmanager
def _before() -> Iterator[None]:
    """The path before: every first fit from node 0 (no resume point)."""
    fits = place._fits

    def scan_from_zero(*args: Any) -> tuple[int, ...] | None:
        return fits(*args[:5])

    with mock.patch.object(place, "_fits", scan_from_zero):
        yield


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    cat = load_catalog()
    model, cluster = cat.model("llama3.1-8b"), build_cluster(cat, "p5.48xlarge", 1)
    cfg = ServeConfig(precision="fp8", input_len=1024, output_len=256)
    d = deployment(model, cluster, cfg)
    print(f"{'split P:D':>12} {'before s':>9} {'now s':>8} {'ratio':>7}  same")
    for pre, dec in SPLITS:
        best_now = best_before = float("inf")
        for _ in range(args.repeat):
            t0 = time.process_time()
            now = place.kv_pair_times(model, cluster, cfg, d, None, pre, dec, 8, cluster.nodes_per_domain)
            best_now = min(best_now, time.process_time() - t0)
            t0 = time.process_time()
            with _before():
                old = place.kv_pair_times(model, cluster, cfg, d, None, pre, dec, 8, cluster.nodes_per_domain)
            matrix = old.pair_s.rows()  # the P x D cells the simulations took before
            share = sum(x == old.best_s for row in matrix for x in row) / (pre * dec)
            best_before = min(best_before, time.process_time() - t0)
        same = (now.placement == old.placement and now.by_link == old.by_link
                and abs(now.nvlink_pairs_share - share) < 1e-12)  # fmt: skip
        print(f"{pre:>6}:{dec:<5} {best_before:9.3f} {best_now:8.3f} {best_before / best_now:6.0f}x  {same}")


if __name__ == "__main__":
    main()
