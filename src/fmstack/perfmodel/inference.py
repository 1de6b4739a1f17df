"""`estimate_serve`: TTFT, inter-token latency and throughput of a serving replica at a concurrency.

Closed loop with ``concurrency`` clients, each sending its next request when the last one finishes (what
``--concurrency`` means in vLLM's and SGLang's ``bench_serving`` and in ``trtllm-bench``). With continuous
batching (Yu et al. 2022, Orca, sec. 3) every iteration advances each running sequence one token and, on
average, admits ``C / output_len`` new prompts (chunked prefill mixes them into decode iterations: Agrawal et al.
2024, Sarathi-Serve, sec. 4). So the mean iteration ``T`` carries ``C`` decode tokens plus ``C * input_len /
output_len`` prompt tokens, a request lives ``output_len`` iterations, and by Little's law (Little 1961)
``requests/s = C / (output_len * T)``. TTFT is the iteration in progress when the request arrives (vLLM's
scheduler takes new requests at the next step: closed loop, the request arrives as its predecessor finishes, so it
waits a whole iteration of the ``C - 1`` others; Poisson arrivals wait half one on average) plus the iteration(s)
holding its prompt, the others' decode tokens and the ``(C - 1) / output_len`` prompts that arrived with it; the inter-token latency (TPOT) is ``(latency - TTFT) / (output_len - 1)``. Static batching
(TensorRT-LLM before in-flight batching) prefills the whole batch, then decodes it. Prefix caching removes
``prefix_hit_rate`` of each prompt's prefill FLOPs (SGLang RadixAttention, Zheng et al. 2024, sec. 3), not its
KV reads. Above the memory limit ``max_concurrency`` the extra clients queue. The discrete-event simulation in
:mod:`fmstack.perfmodel.inference_sim` gives percentiles. The configuration (:class:`ServeConfig`), its checks and
the memory it implies live in :mod:`fmstack.perfmodel.inference_config`, re-exported here.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fmstack.catalog.schema import ModelArch
from fmstack.catalog.topology import Cluster
from fmstack.errors import InputError
from fmstack.perfmodel.efficiency import Efficiency

# re-exported: the serving config, its checks and the memory it implies live in inference_config
from fmstack.perfmodel.inference_config import DEFAULT_MAX_NUM_TOKENS as DEFAULT_MAX_NUM_TOKENS
from fmstack.perfmodel.inference_config import Scheduler as Scheduler
from fmstack.perfmodel.inference_config import ServeConfig as ServeConfig
from fmstack.perfmodel.inference_config import check_rate as check_rate
from fmstack.perfmodel.inference_config import deployment as deployment
from fmstack.perfmodel.inference_config import deployment_for as deployment_for
from fmstack.perfmodel.inference_config import max_concurrency as max_concurrency
from fmstack.perfmodel.inference_config import memory_of as memory_of
from fmstack.perfmodel.inference_config import validate_serve as validate_serve
from fmstack.perfmodel.inference_kv import KV_BYTES, kv_bytes_per_token
from fmstack.perfmodel.inference_mixture import PK_CUTOFF as PK_CUTOFF  # re-exported: the mixture's home
from fmstack.perfmodel.inference_mixture import budget_running, own_prompt_time
from fmstack.perfmodel.inference_mixture import mean_iteration as mean_iteration
from fmstack.perfmodel.inference_step import Deployment, bottleneck, step_time

F = NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Curve:
    """Latency and throughput at each concurrency (arrays; one replica)."""

    concurrency: F
    """Clients in the loop (may exceed ``running``: the rest queue)."""
    running: F
    """Sequences the engine runs at once."""
    ttft_s: F
    itl_s: F
    latency_s: F
    requests_per_s: F
    output_tokens_per_s: F


def running_limit(d: Deployment, cfg: ServeConfig) -> float:
    """Sequences the engine runs at most: :func:`max_concurrency` (memory, ``max_batch``), and with continuous
    batching the token budget's :func:`budget_running` (``max_num_tokens x out / (new + out)``, a mean, not whole):
    the budget admits at most ``max_num_tokens / (new + out)`` prompts an iteration next to their decodes."""
    limit = float(max_concurrency(d, cfg))
    if cfg.scheduler != "continuous":
        return limit
    new = cfg.input_len - math.floor(cfg.prefix_hit_rate * cfg.input_len)
    return min(limit, max(1.0, budget_running(d, float(new), iterations_per_request(cfg), cfg.max_num_tokens)))


def tokens_per_step(cfg: ServeConfig) -> float:
    """Mean output tokens a decode iteration emits per sequence: 1, or speculative decoding's expectation."""
    return 1.0 if cfg.speculative is None else cfg.speculative.mean_tokens_per_step


def iterations_per_request(cfg: ServeConfig) -> float:
    """Iterations a request runs: its prompt's (which emits the first token), then ``(output_len - 1) / E`` decode
    iterations of ``E`` = :func:`tokens_per_step` tokens (``output_len`` without speculation; the last iteration's
    cap at the remaining tokens is left out: a renewal mean)."""
    osl = float(cfg.output_len)
    return osl if cfg.speculative is None else 1.0 + (osl - 1.0) / tokens_per_step(cfg)


def prefill_ctx(n: float, hit: float) -> float:
    """Sum over a prompt's uncached tokens of the context each attends (causal): tokens hit*n+1 .. n."""
    cached = math.floor(hit * n)
    return (n * (n + 1.0) - cached * (cached + 1.0)) / 2.0


def no_fit(d: Deployment, cfg: ServeConfig) -> str:
    """Why not one sequence fits: the figures the KV pool is computed from (:func:`serve_memory`)."""
    mem = memory_of(d, cfg.kv_memory_fraction)
    seq = cfg.input_len + cfg.output_len
    need = math.ceil(seq / mem.block_tokens) * mem.block_tokens * mem.kv_bytes_per_token_gpu / 2**30
    left = max(0.0, mem.capacity_gib - mem.weights_gib - mem.reserve_gib)
    return (
        f"{d.model.name} does not fit at tp({d.tp}) * pp({d.pp}): of {mem.capacity_gib:.1f} GiB per GPU the "
        f"{d.precision} weights take {mem.weights_gib:.1f} GiB and the reserve {mem.reserve_gib:.1f} GiB, leaving "
        f"{left:.1f} GiB, of which the KV pool gets {cfg.kv_memory_fraction:.0%}: {mem.kv_pool_gib:.2f} GiB, less "
        f"than the {need:.2f} GiB of one {seq}-token sequence; use more GPUs or a lower precision"
    )


def serve_curve(d: Deployment, cfg: ServeConfig, concurrency: ArrayLike) -> Curve:
    """The analytic model at every concurrency of ``concurrency`` (vectorised)."""
    clients = np.asarray(concurrency, dtype=np.float64)
    limit = float(max_concurrency(d, cfg))
    if limit < 1:
        raise InputError("tp", no_fit(d, cfg))
    isl, osl = float(cfg.input_len), float(cfg.output_len)
    hit = cfg.prefix_hit_rate
    new = isl - math.floor(hit * isl)
    c = np.minimum(clients, running_limit(d, cfg))
    pctx = prefill_ctx(isl, hit)
    ctx = isl + osl / 2.0
    per_step = tokens_per_step(cfg)
    iters = iterations_per_request(cfg)  # osl without speculation
    if cfg.scheduler == "static":
        prefill = step_time(d, 0.0, 0.0, c * new, c * pctx, c).total_s
        decode = step_time(d, c, ctx, 0.0, 0.0, 0.0).total_s
        ttft = prefill
        latency = prefill + (iters - 1.0) * decode
        itl = decode / per_step
    else:
        # attention DP: a closed loop of same-length requests started together (trtllm-bench, bench_serving) keeps
        # the ranks in step, every rank admits a prompt in the same iterations, so the busiest rank is the mean
        # one; open-loop (Poisson) arrivals are unsynchronised: price the busiest rank (docs/inference.md)
        open_loop = cfg.request_rate_per_s is not None
        mnt = cfg.max_num_tokens
        mean_iter = mean_iteration(d, c, ctx, new, pctx, iters, mnt, open_loop=open_loop).total_s
        others = np.maximum(c - 1.0, 0.0)
        # TTFT = the iteration in progress when the request arrives (vLLM schedules a new request at the next step)
        # + the iteration(s) holding its prompt, which also hold the prompts that arrived with it (others / osl)
        in_progress = mean_iteration(d, others, ctx, new, pctx, iters, mnt, open_loop=open_loop).total_s
        wait = np.where(c > 1.0, in_progress, 0.0) * (0.5 if open_loop else 1.0)
        # size-biased: the iteration that carries this request's prompt, with the others that arrived with it
        own = own_prompt_time(d, c, ctx, new, pctx, iters, mnt, open_loop=open_loop)
        ttft = wait + own
        latency = np.maximum(iters * mean_iter, ttft)
        itl = (latency - ttft) / (osl - 1.0) if osl > 1 else np.zeros_like(c)
    rps = c / latency
    # closed loop beyond the limit: each client waits for a free slot, throughput stays at the limit's
    wait = np.maximum(clients / rps - latency, 0.0)
    return Curve(
        concurrency=clients, running=c, ttft_s=ttft + wait, itl_s=np.asarray(itl, dtype=np.float64),
        latency_s=latency + wait, requests_per_s=rps, output_tokens_per_s=rps * osl,
    )  # fmt: skip


def static_parts(d: Deployment, cfg: ServeConfig, batch: float) -> dict[str, float]:
    """Static batching's mean iteration by part: a batch of ``batch`` sequences takes one prefill iteration (every
    prompt) and ``output_len - 1`` decode iterations, as :func:`serve_curve` prices its latency, so the parts
    average those ``output_len`` iterations and ``output_len x`` their sum is the batch's latency."""
    isl, osl = float(cfg.input_len), float(cfg.output_len)
    new = isl - math.floor(cfg.prefix_hit_rate * isl)
    pctx = prefill_ctx(isl, cfg.prefix_hit_rate)
    prefill = step_time(d, 0.0, 0.0, batch * new, batch * pctx, batch).parts()
    decode = step_time(d, batch, isl + osl / 2.0, 0.0, 0.0, 0.0).parts()
    steps = iterations_per_request(cfg) - 1.0  # decode iterations (osl - 1 without speculation)
    return {k: (float(prefill[k]) + steps * float(decode[k])) / osl for k in prefill}


def concurrency_for_rate(d: Deployment, cfg: ServeConfig, rate_per_s: float) -> float:
    """The concurrency at which the replica completes ``rate_per_s`` requests/s (Little's law on the curve);
    InputError when the rate exceeds what the replica serves at its limit (memory, ``max_batch``, or the token
    budget's :func:`running_limit`: above it the queue grows without bound)."""
    limit = max(max_concurrency(d, cfg), 1)
    top = max(running_limit(d, cfg), 1.0)
    conc = np.arange(1, limit + 1, dtype=np.float64)
    if top < limit:  # the budget binds: the curve is flat beyond ``top``
        conc = np.append(conc[conc < top], top)
    # the curve at every ``stride``-th point (the first and the last among them), then at every point of the one
    # stretch that brackets the rate: the interpolation over every point (requests/s rise with the concurrency) in
    # about 2 sqrt(n) evaluations, not n (short sequences fit tens of thousands: 11-22 s for 1/1 tokens on 8 H100)
    stride = max(1, math.isqrt(conc.size))
    coarse = np.unique(np.append(np.arange(0, conc.size, stride), conc.size - 1))
    rps = serve_curve(d, cfg, conc[coarse]).requests_per_s
    if rate_per_s > rps[-1] and top >= limit:
        raise InputError(
            "qps", f"{rate_per_s:g} requests/s exceeds one replica's capacity, {rps[-1]:.3g} requests/s at its "
            f"limit of {limit} sequences; add replicas or GPUs",
        )  # fmt: skip
    if rate_per_s > rps[-1]:
        raise InputError(
            "qps", f"{rate_per_s:g} requests/s exceeds one replica's capacity, {rps[-1]:.3g} requests/s: the "
            f"{cfg.max_num_tokens}-token budget per iteration (max-num-tokens) keeps {top:.1f} sequences running at "
            f"most (max_num_tokens x output / (new prompt + output)), and the queue grows without bound; raise "
            "--max-num-tokens, add replicas or GPUs",
        )  # fmt: skip
    if rate_per_s <= rps[0]:
        return 1.0  # below one client's throughput requests rarely overlap: the latencies of one at a time
    j = int(np.argmax(rps >= rate_per_s))  # the first coarse point at or above the rate (j >= 1)
    near = conc[coarse[j - 1] : coarse[j] + 1]
    return float(np.interp(rate_per_s, serve_curve(d, cfg, near).requests_per_s, near))


@dataclass(frozen=True, kw_only=True, slots=True)
class ServeEstimate:
    """One replica at one concurrency: latencies, throughput, memory and the bottleneck."""

    model: str
    instance: str
    num_gpus: int
    config: ServeConfig
    concurrency: float
    """Clients in the loop (with a request rate: the mean number of requests in the system, Little's law)."""
    running: int
    ttft_s: float
    itl_s: float
    latency_s: float
    requests_per_s: float
    output_tokens_per_s: float
    output_tokens_per_s_per_gpu: float
    max_concurrency: int
    kv_cache_gib: float
    """KV cache of the running sequences at full length, all GPUs of the replica: a KV head (or MLA's latent)
    held on several GPUs counts once per GPU that holds it, as it fills ``kv_pool_gib``."""
    kv_pool_gib: float
    weights_gib_per_gpu: float
    kv_bytes_per_token: float
    bottleneck: str
    iteration_parts_s: dict[str, float]
    """The mean iteration by part (they add up to it; ``output_len x`` the sum is about the latency). Static
    batching: the mean of a batch's prefill iteration and its ``output_len - 1`` decode iterations
    (:func:`static_parts`)."""
    percentiles: dict[str, float] | None = None
    """p50/p90/p99 of TTFT, ITL and latency from the batching simulation (None when not simulated)."""
    simulated: dict[str, float] | None = None
    """The same simulation's means and throughput (``ttft_mean_s_sim``, ...; None when not simulated): the
    analytic ``ttft_s`` etc. are a mean-field model, the percentiles come from the simulation."""
    speculative: dict[str, Any] | None = None
    """Speculative decoding (None: off): method, tokens, acceptance, ``mean_tokens_per_step`` and the speed-up
    against the same deployment and load without it (:func:`speculative_summary`)."""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["config"] = asdict(self.config) | {"kv_dtype": self.config.kv}
        data["config"]["speculative"] = None if self.config.speculative is None else self.config.speculative.method
        data.update(data.pop("percentiles") or {})
        data.update(data.pop("simulated") or {})
        return data


def estimate_serve(
    model: ModelArch, cluster: Cluster, cfg: ServeConfig, *, efficiency: Efficiency | None = None
) -> ServeEstimate:
    """Predict one replica of ``model`` on ``cluster`` serving ``cfg`` (analytic means)."""
    validate_serve(cfg, model, cluster)
    d = deployment(model, cluster, cfg, efficiency)
    mem = memory_of(d, cfg.kv_memory_fraction)
    limit = max_concurrency(d, cfg)
    clients: float = float(cfg.concurrency if cfg.concurrency is not None else max(limit, 1))
    if cfg.request_rate_per_s is not None:
        clients = concurrency_for_rate(d, cfg, cfg.request_rate_per_s)
    curve = serve_curve(d, cfg, np.array([clients], dtype=np.float64))
    running = max(1, round(float(curve.running[0])))
    isl, osl = cfg.input_len, cfg.output_len
    new = isl - math.floor(cfg.prefix_hit_rate * isl)
    pctx = prefill_ctx(isl, cfg.prefix_hit_rate)
    if cfg.scheduler == "static":
        parts = static_parts(d, cfg, float(curve.running[0]))
    else:
        run = np.array([float(running)])
        parts_arr = mean_iteration(
            d,
            run,
            isl + osl / 2,
            new,
            pctx,
            iterations_per_request(cfg),
            cfg.max_num_tokens,
            open_loop=cfg.request_rate_per_s is not None,
        )
        parts = {k: float(v[0]) for k, v in parts_arr.parts().items()}
    link = f"NVLink ({cluster.scale_up.name})" if cluster.scale_up is not None else cluster.scale_out.name
    if cfg.tp > cluster.gpus_per_domain and cluster.scale_up is not None:  # the inter-domain step on the fabric
        link = f"{link} and {cluster.scale_out.name}"
    kv_tok = kv_bytes_per_token(model, KV_BYTES[cfg.kv])
    holders = cfg.pp if cfg.attention_dp else d.num_gpus  # GPUs that hold a share of one token's KV
    rps = float(curve.requests_per_s[0]) if cfg.request_rate_per_s is None else cfg.request_rate_per_s
    out = rps * osl
    return ServeEstimate(
        model=model.name, instance=cluster.name or cluster.instance.name, num_gpus=d.num_gpus, config=cfg,
        concurrency=clients, running=running, ttft_s=float(curve.ttft_s[0]), itl_s=float(curve.itl_s[0]),
        latency_s=float(curve.latency_s[0]), requests_per_s=rps,
        output_tokens_per_s=out, output_tokens_per_s_per_gpu=out / d.num_gpus, max_concurrency=limit,
        kv_cache_gib=running * _kv_tokens_per_seq(cfg, mem.block_tokens) * mem.kv_bytes_per_token_gpu * holders / 2**30,
        kv_pool_gib=mem.kv_pool_gib * d.num_gpus,
        weights_gib_per_gpu=mem.weights_gib, kv_bytes_per_token=kv_tok, bottleneck=bottleneck(parts, link),
        iteration_parts_s=parts, speculative=speculative_summary(model, cluster, cfg, efficiency, clients, curve),
    )  # fmt: skip


def speculative_summary(
    model: ModelArch, cluster: Cluster, cfg: ServeConfig, efficiency: Efficiency | None, clients: float, curve: Curve
) -> dict[str, Any] | None:
    """The speculation and its speed-up at ``clients`` against the same deployment without it: per user (the
    inter-token latency's ratio, off / on) and in output tokens/s (on / off; closed loop: the same clients). None
    without speculation. The baseline holds no draft, so its KV pool (and its concurrency limit) is a little larger."""
    spec = cfg.speculative
    if spec is None:
        return None
    base_cfg = replace(cfg, speculative=None)
    d0 = deployment(model, cluster, base_cfg, efficiency)
    base = serve_curve(d0, base_cfg, np.array([clients], dtype=np.float64))
    itl, itl0 = float(curve.itl_s[0]), float(base.itl_s[0])
    return {
        "method": spec.method, "tokens": spec.tokens, "acceptance": list(spec.acceptance),
        "draft_model": spec.draft.name if spec.draft is not None else None,
        "mean_tokens_per_step": spec.mean_tokens_per_step,
        "itl_s_without": itl0, "output_tokens_per_s_without": float(base.output_tokens_per_s[0]),
        "speedup_per_user": itl0 / itl if itl > 0 else float("nan"),
        "speedup_output_tokens_per_s": float(curve.output_tokens_per_s[0] / base.output_tokens_per_s[0]),
    }  # fmt: skip


def _kv_tokens_per_seq(cfg: ServeConfig, block_tokens: int) -> float:
    """KV tokens one running sequence holds at full length: its prompt and output, less its share of the prompt's
    full blocks held once by the ``samples_per_prompt`` samples."""
    n = cfg.samples_per_prompt
    shared = cfg.input_len // block_tokens * block_tokens
    return cfg.input_len + cfg.output_len - shared * (n - 1) / n
