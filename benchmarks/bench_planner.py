"""Planner and estimate speed: configurations per second, vectorised vs the scalar model, same run.

    python benchmarks/bench_planner.py

Prints (1) the time of one `estimate_training` call (goal <= 1 ms), (2) the whole search space of
Llama 3.1 405B on 16,384 H100 and of GPT-3 175B on 1,024 H100 (goal <= 1 s each, one core), and of the MoE
DeepSeek-V3 on 2,048 H100 (FP8, with expert all-to-all overlap and selective module sets), and
(3) configurations per second of the vectorised path against the scalar model evaluating the same
configurations in this process, with the ratio.
"""

from __future__ import annotations

import os
import platform
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

from fmstack.catalog import load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.perfmodel.config import TrainConfig
from fmstack.perfmodel.planner import SearchSpace, enumerate_space, evaluate, plan_training
from fmstack.perfmodel.training import estimate_training


def best_of(fn, repeat: int = 5) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    cat = load_catalog()
    print(
        f"machine: {platform.machine()} {platform.processor() or ''} python {platform.python_version()}, numpy {np.__version__}"
    )

    m70 = cat.model("llama3.1-70b")
    c70 = build_cluster(cat, "p5.48xlarge", 64)
    cfg = TrainConfig(tp=8, pp=4, dp=16, sequence_parallel=True, global_batch=1024, seq_len=8192)
    estimate_training(m70, c70, cfg)
    one = best_of(lambda: [estimate_training(m70, c70, cfg) for _ in range(100)]) / 100
    print(f"one estimate_training (llama3.1-70b, 512 GPUs): {one * 1e3:.2f} ms (goal <= 1 ms)")

    for name, instance, nodes, space in (
        ("llama3.1-405b", "p5.48xlarge", 2048, SearchSpace(seq_len=8192, global_batch=2048)),
        ("gpt3-175b", "p5.48xlarge", 128, SearchSpace(seq_len=2048, global_batch=1536)),
        ("deepseek-v3", "p5.48xlarge", 256, SearchSpace(seq_len=4096, global_batch=15360, precisions=("fp8",))),
    ):
        model = cat.model(name)
        cluster = build_cluster(cat, instance, nodes)
        plan_training(model, [cluster], tokens=1e12, space=space)
        whole = best_of(lambda: plan_training(model, [cluster], tokens=1e12, space=space), repeat=3)  # noqa: B023
        cols, considered = enumerate_space(model, cluster, space)
        vec = best_of(lambda: evaluate(model, cluster, cols), repeat=3)  # noqa: B023
        sample = np.random.default_rng(0).choice(len(cols), size=min(200, len(cols)), replace=False)
        rows = [cols.row(int(i)) for i in sample]
        scalar = best_of(lambda: [estimate_training(model, cluster, r) for r in rows], repeat=1)  # noqa: B023
        scalar_per_cfg = scalar / len(rows)
        vec_per_cfg = vec / len(cols)
        print(
            f"{name} on {cluster.num_gpus} GPUs: whole search {whole:.3f} s ({considered:,} considered, "
            f"{len(cols):,} shape-valid evaluated) | vectorised {1 / vec_per_cfg:,.0f} configs/s, "
            f"scalar {1 / scalar_per_cfg:,.0f} configs/s, ratio {scalar_per_cfg / vec_per_cfg:,.0f}x"
        )


if __name__ == "__main__":
    main()
