"""How fast a job trains on the GPUs it gets: the :class:`JobSpeedModel` protocol and its default,
:class:`PerfModelSpeed`, which asks the training performance model (:func:`fmstack.perfmodel.training.
estimate_training`) once per (model, GPUs, packed) and caches the answer on the instance.

Configuration it asks about ([D]): tensor parallel inside the node (tp = min(8, GPUs)), data parallel across
nodes, FSDP sharding, selective recomputation, sequence 8,192, micro-batch 1, 4 micro-batches per data-parallel
rank. Jobs smaller than a node run at the one-node speed scaled by GPUs / GPUs per node. A job split across leaf
switches ("not packed") is estimated on a cluster whose leaves hold half its nodes, and runs at most
``split_factor`` (0.9, [D]) of its packed speed when the model sees no difference.

On UltraServer nodes (GB200 NVL72: 18 nodes of 4 GPUs per NVLink domain) a job of more than one domain that is not
a whole number of domains (32 nodes = 18 + 14) spans as many domains as the next whole number would; it runs at that
size's speed per GPU (the model sizes its collectives by whole domains), times its own GPUs.
"""

from __future__ import annotations

from typing import Protocol

from fmstack.catalog.loader import Catalog
from fmstack.catalog.topology import build_cluster, resolve_instance
from fmstack.errors import InputError
from fmstack.perfmodel.config import TrainConfig
from fmstack.perfmodel.training import estimate_training

SEQ_LEN = 8192
MICRO_BATCHES = 4
"""Micro-batches (of one sequence) per data-parallel rank in a step."""


def step_tokens(num_gpus: int, gpus_per_node: int) -> float:
    """Tokens in one step of a job of ``num_gpus`` as :class:`PerfModelSpeed` configures it: 4 sequences of 8,192
    per data-parallel rank, tp = min(GPUs per node, GPUs), so a job of at most one node has one rank."""
    tp = min(gpus_per_node, num_gpus)
    return float(MICRO_BATCHES * max(1, num_gpus // tp) * SEQ_LEN)


class JobSpeedModel(Protocol):
    """Training throughput of ``model`` on ``num_gpus``, packed in one leaf block or split across blocks."""

    def tokens_per_s(self, model: str, num_gpus: int, packed: bool) -> float: ...


class PerfModelSpeed:
    """:class:`JobSpeedModel` from :func:`estimate_training`, cached per (model, GPUs, packed)."""

    def __init__(self, catalog: Catalog, instance: str, *, split_factor: float = 0.9) -> None:
        if not 0 < split_factor <= 1:
            raise InputError("split_factor", f"must be in (0, 1], got {split_factor}")
        self.catalog = catalog
        self.instance = instance
        self.split_factor = split_factor
        inst = resolve_instance(catalog, instance)
        self.gpn = inst.num_gpus
        self.nodes_per_domain = max(1, inst.nvlink_domain_gpus // inst.num_gpus) if inst.ultraserver else 1
        self._cache: dict[tuple[str, int, bool], float] = {}

    def tokens_per_s(self, model: str, num_gpus: int, packed: bool) -> float:
        key = (model, num_gpus, packed)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._estimate(model, num_gpus, packed)
            self._cache[key] = hit
        return hit

    def _estimate(self, model: str, num_gpus: int, packed: bool) -> float:
        if num_gpus < self.gpn:
            return self.tokens_per_s(model, self.gpn, True) * num_gpus / self.gpn
        nodes = num_gpus // self.gpn
        npd = self.nodes_per_domain
        if nodes > npd and nodes % npd:
            whole_gpus = -(-nodes // npd) * npd * self.gpn
            return self.tokens_per_s(model, whole_gpus, packed) * num_gpus / whole_gpus
        per_leaf = nodes if packed or nodes < 2 else max(1, nodes // 2)
        cluster = build_cluster(
            self.catalog, self.instance, nodes, nodes_per_leaf=max(per_leaf, 1), part_of_domain=True
        )
        tp = min(self.gpn, num_gpus)
        dp = num_gpus // tp
        cfg = TrainConfig(
            tp=tp, dp=dp, micro_batch=1, global_batch=MICRO_BATCHES * dp, seq_len=SEQ_LEN, sharding="fsdp",
            recompute="selective", sequence_parallel=tp > 1,
        )  # fmt: skip
        tps = estimate_training(self.catalog.model(model), cluster, cfg).tokens_per_s
        if not packed and nodes >= 2:
            tps = min(tps, self.split_factor * self.tokens_per_s(model, num_gpus, True))
        return float(tps)
