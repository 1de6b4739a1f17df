"""A `plan serve` candidate (:class:`Candidate`) and the helpers that price and rebuild one."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from fmstack.catalog.topology import Cluster
from fmstack.perfmodel.inference import ServeConfig

ClusterOf = Callable[[str, int], Cluster]
"""(instance name, nodes) -> the cluster, cached by the plan."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Candidate:
    """One deployment option and what it costs."""

    instance: str
    gpu: str
    precision: str
    tp: int
    ep: int
    """Expert parallel degree inside TP (MoE: 1 or tp)."""
    attention_dp: bool = False
    """Attention data parallelism over the ``tp`` GPUs (MoE with ``ep == tp``; ``estimate serve --attention-dp``)."""
    pp: int
    """Pipeline stages of a replica (across its nodes)."""
    nodes_per_replica: int
    """Whole nodes one replica spans (1: a replica takes ``tp x pp`` GPUs of a node, replicas share nodes)."""
    replicas: int
    nodes: int
    """Nodes of the whole deployment: ``ceil(replicas x tp x pp / gpus_per_node)``."""
    num_gpus: int
    cost_per_hour_usd: float
    max_num_tokens: int
    """Prompt-token budget per iteration (chunked prefill) the deployment runs with."""
    rate_per_replica_rps: float
    """Highest request rate one replica serves within the SLO (analytic means). Disaggregated: the split's
    mean-field goodput, ``min(P x prefill rate, D x decode rate)``, over its ``P + D`` replicas."""
    concurrency: int
    """Sequences in flight at that rate (the analytic curve's point: ``estimate serve --concurrency`` reproduces it).
    Disaggregated: the sequences one decode replica runs within the ITL target."""
    mean_ttft_s: float
    mean_itl_s: float
    sim: dict[str, float] | None = None
    """Simulated p50/p90/p99 at the planned rate (None for candidates not simulated)."""
    meets_slo: bool | None = None
    """Simulated p99 within the SLO (None when not simulated)."""
    mode: str = "colocated"
    """"colocated" (every replica runs prefill and decode) or "disaggregated" (separate prefill and decode pools,
    :mod:`fmstack.perfmodel.inference_plan_disagg`)."""
    prefill_replicas: int = 0
    """Disaggregated: replicas of the prefill pool (0 when colocated); ``replicas`` is both pools together."""
    decode_replicas: int = 0
    """Disaggregated: replicas of the decode pool (0 when colocated)."""
    kv_transfer_s: float = 0.0
    """Disaggregated: moving one prompt's KV cache from a prefill to a decode replica (0 when colocated)."""


def config_of(c: Candidate, input_len: int, output_len: int) -> ServeConfig:
    return ServeConfig(tp=c.tp, pp=c.pp, ep=c.ep, precision=c.precision, input_len=input_len, output_len=output_len,
                       max_num_tokens=c.max_num_tokens, attention_dp=c.attention_dp)  # fmt: skip


def deployment_nodes(replicas: int, c: ServeConfig | Candidate, gpus_per_node: int) -> int:
    """Whole nodes for ``replicas`` replicas of ``tp x pp`` GPUs (a multi-node replica takes all of its nodes)."""
    return math.ceil(replicas * c.tp * c.pp / gpus_per_node)


def with_replicas(
    cluster_of: ClusterOf, c: Candidate, replicas: int, prefill: int | None = None, decode: int | None = None
) -> Candidate:
    """``c`` with ``replicas`` replicas, its nodes and cost (a split: ``prefill + decode == replicas``)."""
    inst = cluster_of(c.instance, 1).instance
    nodes = deployment_nodes(replicas, c, inst.num_gpus)
    return replace(c, replicas=replicas, nodes=nodes, num_gpus=nodes * inst.num_gpus,
                   cost_per_hour_usd=nodes * (inst.price_per_hour_usd or 0.0),
                   prefill_replicas=c.prefill_replicas if prefill is None else prefill,
                   decode_replicas=c.decode_replicas if decode is None else decode)  # fmt: skip
