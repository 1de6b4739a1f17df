"""Side check of `fmstack validate --only disaggcheck`: NVIDIA Dynamo's disaggregation claims (INF-055, INF-056).

Dynamo's architecture doc (:data:`SOURCE`) says that for "Llama 70B" (R1-Distill-Llama-70B, FP8, vLLM, H100, 3K input
/ 150 output tokens) disaggregating prefill and decode gives +30 % throughput per GPU on one node and "over 2X" on
two; the numbers are read off two scatter plots of tokens/s/GPU (y) against tokens/s/user (x), Pareto frontiers of
a closed-loop concurrency sweep (Dynamo's ``benchmarks/llm`` guide and ``plot_pareto.py``; GPUs = TP x DP of the
deployment). The doc does not say at which tokens/s/user the gains are read. Dynamo's benchmark guide runs, on
one 8-GPU H100 node, 4 prefill workers of TP 1 and 1 decode worker of TP 4 against 2 vLLM replicas of TP 4; on two
nodes, 8 prefill workers of TP 1 and 1 decode worker of TP 8 against 2 replicas of TP 8 (``max-num-batched-tokens``
3500 on the baseline and the prefill workers). Whether the plotted runs used exactly those layouts is not stated.

This check computes both frontiers with the model's own pieces, nothing fitted, at per-user speeds
:data:`SPEEDS` (ITL target ``1 / speed``), per GPU busy:
- colocated: every layout `plan serve` searches (:func:`fmstack.perfmodel.inference_plan.layouts`, one node, and
  for two nodes also the two-node replicas) and prompt budget (the plan's ``CHUNK_CHOICES`` and Dynamo's 3500), on
  the analytic closed-loop curve (:func:`fmstack.perfmodel.inference.serve_curve`): the most output tokens/s/GPU
  at a concurrency whose mean ITL meets the target;
- disaggregated: every pair of one-node layouts (same and heterogeneous) and every ``P:D`` whose GPUs fit the
  nodes, on the mean-field pools of `plan serve` (:func:`fmstack.perfmodel.inference_disagg.pool_rates`: decode-only
  ITL at the target caps a decode replica; no TTFT target, so a prefill replica runs saturated, as in a closed loop
  whose queue is bounded by its clients): ``min(P x prefill rate, D x decode rate)`` output tokens over the GPUs;
- the best of each side is then simulated (colocated: one replica, Poisson at :data:`SIM_LOAD` x its rate,
  :func:`fmstack.perfmodel.inference_sim.simulate`; split: :func:`fmstack.perfmodel.inference_plan_disagg.run_split`
  at :data:`SIM_LOAD` x its rate), and the simulated mean ITL is reported beside the target.
Dynamo's own layouts are reported too (:data:`DYNAMO_LAYOUTS`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from fmstack.catalog.loader import Catalog
from fmstack.catalog.schema import ModelArch
from fmstack.catalog.topology import Cluster, build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel.inference import ServeConfig, deployment, max_concurrency, serve_curve
from fmstack.perfmodel.inference_disagg import SLO, pool_rates
from fmstack.perfmodel.inference_plan import CHUNK_CHOICES, layouts
from fmstack.perfmodel.inference_plan_disagg import run_split
from fmstack.perfmodel.inference_sim import SimConfig, simulate

SOURCE = (
    "ai-dynamo/dynamo docs/architecture/architecture.md @ 274eb0eea6cf2f272d1720cfa60331db6d34bfb5, "
    "'Performance benefits of key features > Disaggregated serving' (INF-055, INF-056); layouts from "
    "examples/llm/benchmarks/disagg.yaml, disagg_multinode.yaml and the benchmarking guide"
)
CLAIMS: dict[int, tuple[float, str]] = {1: (1.3, "+30 % (INF-055)"), 2: (2.0, "over 2x (INF-056)")}
"""Nodes -> Dynamo's claimed disaggregated / colocated throughput per GPU."""
MODEL = "llama3.1-70b"
"""DeepSeek-R1-Distill-Llama-70B is a Llama 3.x 70B (same architecture) fine-tune."""
INSTANCE = "dgx-h100"
"""Dynamo's guide: 8 x H100-80GB-HBM3, NVLink 4, 8 x 400 Gb/s InfiniBand per node."""
PRECISION = "fp8"
INPUT_LEN, OUTPUT_LEN = 3000, 150
DYNAMO_CHUNK = 3500
"""Dynamo's ``max-num-batched-tokens`` (and ``max-model-len``) on the baseline and the prefill workers."""
SPEEDS = (10, 20, 30, 40, 50, 60, 70, 80, 90, 100)
"""Tokens/s/user of the sweep; ITL target = 1 / speed."""
TTFT_UNBOUNDED_S = 1e6
"""No TTFT target (Dynamo's plot has no TTFT axis): the prefill pool runs saturated."""
SIM_LOAD = 0.9
"""Simulated at this fraction of the analytic rate (a saturated Poisson queue never settles)."""
DYNAMO_LAYOUTS: dict[int, tuple[int, int, int, int, int]] = {1: (4, 1, 1, 4, 4), 2: (8, 1, 1, 8, 8)}
"""Nodes -> (prefill workers, prefill TP, decode workers, decode TP, colocated TP) of Dynamo's benchmark guide."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Point:
    """One side's best at one per-user speed (analytic), and its simulation."""

    layout: str
    tokens_per_s_per_gpu: float
    gpus: int
    itl_s: float
    """Analytic mean ITL at the point (colocated curve; split: the decode pool's decode-only ITL)."""
    rate_rps: float
    """Requests/s of the deployment (colocated: one replica)."""
    sim_itl_s: float = math.nan
    """Simulated mean ITL at ``SIM_LOAD`` x the rate (nan: not simulated)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SpeedRow:
    speed_tokens_per_s_per_user: float
    itl_target_s: float
    colocated: Point | None
    split: Point | None
    ratio: float | None
    dynamo_colocated: Point | None
    dynamo_split: Point | None
    dynamo_ratio: float | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeCheck:
    nodes: int
    claim: float
    claim_text: str
    rows: list[SpeedRow]

    @property
    def best_ratio(self) -> float:
        return max((r.ratio for r in self.rows if r.ratio is not None), default=math.nan)

    @property
    def best_dynamo_ratio(self) -> float:
        return max((r.dynamo_ratio for r in self.rows if r.dynamo_ratio is not None), default=math.nan)

    def to_json(self) -> dict[str, Any]:
        return {"nodes": self.nodes, "claim": self.claim, "claim_text": self.claim_text,
                "best_ratio": self.best_ratio, "best_dynamo_ratio": self.best_dynamo_ratio,
                "rows": [r.to_json() for r in self.rows]}  # fmt: skip


def _cfg(tp: int, pp: int, chunk: int) -> ServeConfig:
    return ServeConfig(tp=tp, pp=pp, precision=PRECISION, input_len=INPUT_LEN, output_len=OUTPUT_LEN,
                       max_num_tokens=chunk)  # fmt: skip


class _Check:
    """The clusters and deployments of one check (cached: the frontier evaluates each many times)."""

    def __init__(self, catalog: Catalog, model: ModelArch, instance: str) -> None:
        self.catalog, self.model, self.instance = catalog, model, instance
        self._clusters: dict[tuple[str, int], Cluster] = {}
        self.gpn = self.cluster_of(instance, 1).instance.num_gpus

    def cluster_of(self, name: str, nodes: int) -> Cluster:
        if (name, nodes) not in self._clusters:
            self._clusters[name, nodes] = build_cluster(self.catalog, name, nodes)
        return self._clusters[name, nodes]

    def colocated_layouts(self, nodes: int) -> list[tuple[int, int, int]]:
        """(tp, pp, nodes per replica) `plan serve` searches on up to ``nodes`` nodes (doublings)."""
        out: list[tuple[int, int, int]] = []
        n = 1
        while n <= nodes:
            c = self.cluster_of(self.instance, n)
            out += [(tp, pp, n) for tp, pp, _ in layouts(self.model, n, self.gpn, c.gpus_per_domain)]
            n *= 2
        return out

    def colocated(self, nodes: int, itl_s: float, tp_only: int | None = None) -> Point | None:
        """The most output tokens/s/GPU of one replica whose mean ITL meets ``itl_s`` (analytic closed loop).
        ``tp_only``: that TP (one stage) at Dynamo's prompt budget only (its baseline)."""
        best: Point | None = None
        for tp, pp, n in self.colocated_layouts(nodes):
            if tp_only is not None and (tp, pp) != (tp_only, 1):
                continue
            for chunk in (DYNAMO_CHUNK,) if tp_only is not None else (DYNAMO_CHUNK, *CHUNK_CHOICES):
                cfg = _cfg(tp, pp, chunk)
                d = deployment(self.model, self.cluster_of(self.instance, n), cfg)
                limit = max_concurrency(d, cfg)
                if limit < 1:
                    continue
                curve = serve_curve(d, cfg, np.arange(1, limit + 1, dtype=np.float64))
                ok = np.nonzero(curve.itl_s <= itl_s)[0]
                if not len(ok):
                    continue
                i = int(ok[np.argmax(curve.output_tokens_per_s[ok])])
                per_gpu = float(curve.output_tokens_per_s[i]) / (tp * pp)
                if best is None or per_gpu > best.tokens_per_s_per_gpu:
                    best = Point(layout=f"tp{tp}" + (f" pp{pp}" if pp > 1 else "") + f" chunk {chunk} C {i + 1}",
                                 tokens_per_s_per_gpu=per_gpu, gpus=tp * pp, itl_s=float(curve.itl_s[i]),
                                 rate_rps=float(curve.requests_per_s[i]))  # fmt: skip
        return best

    def split(self, nodes: int, itl_s: float, only: tuple[int, int, int, int] | None = None) -> Point | None:
        """The best ``P:D`` split of one-node layouts within ``nodes`` nodes at ITL target ``itl_s`` (mean field,
        no TTFT target). ``only``: (P, prefill TP, D, decode TP)."""
        gpus = nodes * self.gpn
        cluster = self.cluster_of(self.instance, nodes)
        tps = [tp for tp, _, _ in layouts(self.model, 1, self.gpn, self.cluster_of(self.instance, 1).gpus_per_domain)]
        slo = SLO(ttft_s=TTFT_UNBOUNDED_S, itl_s=itl_s)
        best: Point | None = None
        for tp_p in tps:
            for tp_d in tps:
                if only is not None and (tp_p, tp_d) != (only[1], only[3]):
                    continue
                pre, dec = _cfg(tp_p, 1, DYNAMO_CHUNK), _cfg(tp_d, 1, DYNAMO_CHUNK)
                dp = deployment(self.model, self.cluster_of(self.instance, 1), pre)
                dd = deployment(self.model, self.cluster_of(self.instance, 1), dec)
                if max_concurrency(dp, pre) < 1 or max_concurrency(dd, dec) < 1:
                    continue
                conc = np.arange(1, max_concurrency(dd, dec) + 1, dtype=np.float64)
                pools = pool_rates(self.model, cluster, pre, slo, dp, conc, None if tp_p == tp_d else dd)
                if pools.per_decode_rps <= 0 or pools.per_prefill_rps <= 0:
                    continue
                counts = [(only[0], only[2])] if only is not None else [
                    (p, d) for p in range(1, gpus // tp_p + 1) for d in range(1, (gpus - p * tp_p) // tp_d + 1)]  # fmt: skip
                for p, d in counts:
                    busy = p * tp_p + d * tp_d
                    if busy > gpus:
                        continue
                    rate = min(p * pools.per_prefill_rps, d * pools.per_decode_rps)
                    per_gpu = rate * OUTPUT_LEN / busy
                    if best is None or per_gpu > best.tokens_per_s_per_gpu:
                        best = Point(layout=f"{p}P(tp{tp_p}):{d}D(tp{tp_d})", tokens_per_s_per_gpu=per_gpu, gpus=busy,
                                     itl_s=pools.decode_itl_s, rate_rps=rate)  # fmt: skip
        return best

    def simulate_colocated(self, pt: Point, nodes: int, seed: int) -> Point:
        parts = pt.layout.split()
        tp = int(parts[0][2:])
        pp = int(parts[1][2:]) if parts[1].startswith("pp") else 1
        chunk = int(parts[parts.index("chunk") + 1])
        cfg = _cfg(tp, pp, chunk)
        d = deployment(self.model, self.cluster_of(self.instance, max(1, tp * pp // self.gpn)), cfg)
        rate = SIM_LOAD * pt.rate_rps
        r = simulate(d, cfg, SimConfig(request_rate_per_s=rate, num_requests=300, warmup_requests=30, seed=seed))
        return replace(pt, sim_itl_s=r.mean_itl_s)

    def simulate_split(self, pt: Point, seed: int) -> Point:
        pre, dec = pt.layout.split(":")
        p, tp_p = int(pre.split("P")[0]), int(pre.split("tp")[1].rstrip(")"))
        d, tp_d = int(dec.split("D")[0]), int(dec.split("tp")[1].rstrip(")"))
        run = run_split(self.cluster_of, self.model, _cfg(tp_p, 1, DYNAMO_CHUNK), self.instance, SIM_LOAD * pt.rate_rps,
                        p, d, seed, decode_cfg=None if tp_p == tp_d else _cfg(tp_d, 1, DYNAMO_CHUNK))  # fmt: skip
        return replace(pt, sim_itl_s=run.result.mean_itl_s)


def _ratio(a: Point | None, b: Point | None) -> float | None:
    if a is None or b is None or b.tokens_per_s_per_gpu <= 0:
        return None
    return a.tokens_per_s_per_gpu / b.tokens_per_s_per_gpu


def check_disagg(
    catalog: Catalog, *, speeds: tuple[float, ...] = SPEEDS, nodes: tuple[int, ...] = (1, 2), seed: int = 0,
    simulate_best: bool = True, instance: str = INSTANCE,
) -> list[NodeCheck]:  # fmt: skip
    """Colocated vs disaggregated throughput per GPU at each per-user speed on ``nodes`` nodes (module doc)."""
    if any(s <= 0 for s in speeds):
        raise InputError("speeds", f"tokens/s/user must be > 0, got {speeds}")
    chk = _Check(catalog, catalog.model(MODEL), instance)
    out: list[NodeCheck] = []
    for n in nodes:
        if n not in CLAIMS:
            raise InputError("nodes", f"Dynamo published claims for 1 and 2 nodes only, got {n}")
        p_pre, tp_pre, p_dec, tp_dec, tp_co = DYNAMO_LAYOUTS[n]
        rows: list[SpeedRow] = []
        for speed in speeds:
            itl = 1.0 / speed
            co, sp = chk.colocated(n, itl), chk.split(n, itl)
            dco, dsp = chk.colocated(n, itl, tp_only=tp_co), chk.split(n, itl, only=(p_pre, tp_pre, p_dec, tp_dec))
            if simulate_best:
                co = None if co is None else chk.simulate_colocated(co, n, seed)
                sp = None if sp is None else chk.simulate_split(sp, seed)
            rows.append(SpeedRow(speed_tokens_per_s_per_user=speed, itl_target_s=itl, colocated=co, split=sp,
                                 ratio=_ratio(sp, co), dynamo_colocated=dco, dynamo_split=dsp,
                                 dynamo_ratio=_ratio(dsp, dco)))  # fmt: skip
        claim, text = CLAIMS[n]
        out.append(NodeCheck(nodes=n, claim=claim, claim_text=text, rows=rows))
    return out


def report_lines(checks: list[NodeCheck]) -> list[str]:
    """Plain-text table of the check (the CLI prints it)."""
    out = [f"disaggregation side check (not calibration data): {MODEL} {PRECISION} on {INSTANCE}, "
           f"{INPUT_LEN}/{OUTPUT_LEN} tokens, output tokens/s/GPU at a mean ITL target; {SOURCE}"]  # fmt: skip

    def cell(p: Point | None) -> str:
        if p is None:
            return "-"
        sim = "" if math.isnan(p.sim_itl_s) else f", sim ITL {p.sim_itl_s * 1e3:.1f} ms"
        return f"{p.tokens_per_s_per_gpu:6.1f} {p.layout} (ITL {p.itl_s * 1e3:.1f} ms{sim})"

    def ratio(r: float | None) -> str:
        return "-" if r is None else f"{r:.2f}x"

    for nc in checks:
        out.append(f"{nc.nodes} node(s), {nc.nodes * 8} H100: Dynamo claims {nc.claim_text}")
        for r in nc.rows:
            out.append(f"  {r.speed_tokens_per_s_per_user:5.0f} tok/s/user (ITL <= {r.itl_target_s * 1e3:.1f} ms): "
                       f"colocated {cell(r.colocated)} | split {cell(r.split)} | {ratio(r.ratio)}; Dynamo's layouts "
                       f"{ratio(r.dynamo_ratio)} ({cell(r.dynamo_split)} vs {cell(r.dynamo_colocated)})")  # fmt: skip
        out.append(f"  best ratio {nc.best_ratio:.2f}x (Dynamo's layouts {nc.best_dynamo_ratio:.2f}x) "
                   f"against Dynamo's {nc.claim_text}")  # fmt: skip
    return out
