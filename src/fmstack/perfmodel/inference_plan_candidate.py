"""A `plan serve` candidate (:class:`Candidate`) and the helpers that price and rebuild one."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from fmstack.catalog.topology import Cluster
from fmstack.perfmodel.inference import ServeConfig
from fmstack.perfmodel.inference_speculative import SpecDecode

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
    """Simulated p99 within the SLO (None when not simulated; False with ``sim`` None and a ``sim_note`` when the
    rate has no steady state to simulate)."""
    sim_note: str = ""
    """Why a candidate was not simulated although checked: its replicas run too near their capacity for a run to
    reach the steady state (:mod:`fmstack.perfmodel.inference_open_loop`), or a split's pool cannot take the rate
    (:func:`fmstack.perfmodel.inference_plan_disagg.check_split_load`); a miss either way."""
    mode: str = "colocated"
    """"colocated" (every replica runs prefill and decode) or "disaggregated" (separate prefill and decode pools,
    :mod:`fmstack.perfmodel.inference_plan_disagg`)."""
    prefill_replicas: int = 0
    """Disaggregated: replicas of the prefill pool (0 when colocated); ``replicas`` is both pools together."""
    decode_replicas: int = 0
    """Disaggregated: replicas of the decode pool (0 when colocated)."""
    kv_transfer_s: float = 0.0
    """Disaggregated: moving one prompt's KV cache from a prefill to a decode replica (0 when colocated)."""
    decode_tp: int = 0
    """Disaggregated: TP of a decode replica (0 when colocated). ``tp`` / ``pp`` / ``ep`` / ``nodes_per_replica``
    are the prefill pool's layout; the decode pool may differ (heterogeneous pools, DistServe sec. 4)."""
    decode_pp: int = 0
    """Disaggregated: pipeline stages of a decode replica (0 when colocated)."""
    decode_ep: int = 0
    """Disaggregated: EP of a decode replica (0 when colocated)."""
    decode_attention_dp: bool = False
    """Disaggregated: the decode pool runs attention DP (False when colocated; ``attention_dp`` is the prefill
    pool's)."""
    prefix_hit_rate: float = 0.0
    """With a shared-prefix workload: the share of prompt tokens the analytic screening took from the prefix cache
    at ``concurrency`` (``estimate serve --prefix-hit-rate``; :mod:`fmstack.perfmodel.inference_plan_analytic`);
    0 without one, and for splits and attention DP, which are priced and simulated without the cache. With a multi-turn
    workload: the share of the mean turn's prompt screened as cached history
    (:mod:`fmstack.perfmodel.inference_plan_session`)."""
    prefix_request_hit_rate: float = 0.0
    """The requests' screened hit rate behind ``prefix_hit_rate`` (Che's approximation, rounded up to 0.01; with a
    multi-turn workload the share of turns that find some history cached)."""
    speculative: SpecDecode | None = None
    """Speculative decoding the replicas run (``plan serve --speculative``; None: off; a split: its decode pool
    speculates). Screened, simulated and reproduced with it (:func:`config_of`)."""

    @property
    def heterogeneous(self) -> bool:
        """A split whose decode pool has another layout than its prefill pool (attention DP in one pool only
        included)."""
        return self.mode == "disaggregated" and (
            self.decode_tp, self.decode_pp, self.decode_ep, self.decode_attention_dp) != (
            self.tp, self.pp, self.ep, self.attention_dp)  # fmt: skip

    @property
    def busy_gpus(self) -> int:
        """GPUs the replicas take: ``P x tp x pp + D x decode_tp x decode_pp`` for a split."""
        if self.mode != "disaggregated":
            return self.replicas * self.tp * self.pp
        return self.prefill_replicas * self.tp * self.pp + self.decode_replicas * self.decode_tp * self.decode_pp


def config_of(c: Candidate, input_len: int, output_len: int) -> ServeConfig:
    return ServeConfig(tp=c.tp, pp=c.pp, ep=c.ep, precision=c.precision, input_len=input_len, output_len=output_len,
                       max_num_tokens=c.max_num_tokens, attention_dp=c.attention_dp,
                       speculative=c.speculative)  # fmt: skip


def layout_text(c: Candidate | ServeConfig) -> str:
    """A replica's layout in words, as the plan's notes and ``estimate serve --disagg`` name it:
    ``tp 8 pp 1 ep 8 attention DP`` (a split row: its prefill pool's)."""
    return f"tp {c.tp} pp {c.pp}" + (f" ep {c.ep}" if c.ep > 1 else "") + (" attention DP" if c.attention_dp else "")


def split_label(c: Candidate) -> str:
    """``4P:1D`` (``4P:1D attn-dp`` when both pools run attention DP), or with heterogeneous pools each pool's
    layout: ``4P(tp2):1D(tp8)`` (pp and ep where > 1, ``attn-dp`` where the pool runs attention DP)."""
    if not c.heterogeneous:
        return f"{c.prefill_replicas}P:{c.decode_replicas}D" + (" attn-dp" if c.attention_dp else "")

    def lay(tp: int, pp: int, ep: int, adp: bool) -> str:
        return f"tp{tp}" + (f" pp{pp}" if pp > 1 else "") + (f" ep{ep}" if ep > 1 else "") + (" attn-dp" if adp else "")

    return (f"{c.prefill_replicas}P({lay(c.tp, c.pp, c.ep, c.attention_dp)}):"
            f"{c.decode_replicas}D({lay(c.decode_tp, c.decode_pp, c.decode_ep, c.decode_attention_dp)})")  # fmt: skip


def decode_config_of(c: Candidate, input_len: int, output_len: int) -> ServeConfig:
    """The decode pool's configuration of a split (its layout; the same prompt budget and lengths)."""
    return replace(config_of(c, input_len, output_len), tp=c.decode_tp or c.tp, pp=c.decode_pp or c.pp,
                   ep=c.decode_ep or c.ep, attention_dp=c.decode_attention_dp)  # fmt: skip


def split_nodes(prefill: int, decode: int, p: ServeConfig, dc: ServeConfig, gpus_per_node: int) -> int:
    """Whole nodes for ``prefill`` replicas of ``p`` and ``decode`` of ``dc``: the GPUs together over a node (a
    replica within one node takes a divisor of it, a larger one whole nodes: the replicas pack without gaps)."""
    return math.ceil((prefill * p.tp * p.pp + decode * dc.tp * dc.pp) / gpus_per_node)


def deployment_nodes(replicas: int, c: ServeConfig | Candidate, gpus_per_node: int) -> int:
    """Whole nodes for ``replicas`` replicas of ``tp x pp`` GPUs (a multi-node replica takes all of its nodes)."""
    return math.ceil(replicas * c.tp * c.pp / gpus_per_node)


def with_replicas(
    cluster_of: ClusterOf, c: Candidate, replicas: int, prefill: int | None = None, decode: int | None = None
) -> Candidate:
    """``c`` with ``replicas`` replicas, its nodes and cost (a split: ``prefill + decode == replicas``)."""
    inst = cluster_of(c.instance, 1).instance
    nodes = deployment_nodes(replicas, c, inst.num_gpus)
    if c.mode == "disaggregated" and prefill is not None and decode is not None:
        gpus = prefill * c.tp * c.pp + decode * (c.decode_tp or c.tp) * (c.decode_pp or c.pp)
        nodes = math.ceil(gpus / inst.num_gpus)
    return replace(c, replicas=replicas, nodes=nodes, num_gpus=nodes * inst.num_gpus,
                   cost_per_hour_usd=nodes * (inst.price_per_hour_usd or 0.0),
                   prefill_replicas=c.prefill_replicas if prefill is None else prefill,
                   decode_replicas=c.decode_replicas if decode is None else decode)  # fmt: skip
