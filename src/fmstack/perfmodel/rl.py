"""`estimate_rl`: one PPO or GRPO step, split into rollout, forward passes, training and weight sync.

One step (PPO: Ouyang et al. 2022, sec. 3.5 and Schulman et al. 2017; GRPO: Shao et al. 2024, DeepSeekMath,
sec. 4.1; the phases as veRL's HybridFlow runs them, Sheng et al. 2025, EuroSys, sec. 2.1 and 5):
1. rollout: ``prompts x samples`` responses from the inference model (:func:`fmstack.perfmodel.inference.
   estimate_serve`), the replicas running at the concurrency their KV pool allows; the ``samples`` sequences of
   a prompt share its full KV blocks (vLLM ``SamplingParams.n`` forks them copy-on-write; ServeConfig
   ``samples_per_prompt``) and its prefill runs once: the ``samples - 1`` extra copies hit the prefix cache, so
   the ``samples`` sequences together compute the prompt's tokens once (vLLM / SGLang). The phase lasts until each
   replica's last response ends: same-length waves, or the simulated long tail with ``length_spread``
   (:mod:`fmstack.perfmodel.rl_rollout`);
2. forward passes over prompt + response: reference policy (KL term), reward model (unless the reward is a rule),
   critic (PPO only). A forward pass is a third of the training model's compute (backward = 2 x forward,
   Narayanan et al. 2021, sec. 5.1) plus half its TP / EP / PP communication, with no optimizer;
3. training: ``epochs x minibatches`` optimizer steps of the actor (and the critic, PPO) with the training model
   (:func:`fmstack.perfmodel.training.estimate_training`);
4. weight sync: colocated (HybridFlow's 3D-HybridEngine, Sheng et al. 2025, sec. 5.4), each generation GPU
   all-gathers its TP shard of the bf16 weights from the training layout's ``pp x tp_train / tp_rollout`` ranks;
   split placement adds the broadcast of those shards from the trainer nodes to every rollout replica over the
   scale-out fabric (phases 2 to 4: :mod:`fmstack.perfmodel.rl_train`);
5. colocated switch (colocated only): the host <-> device copies when the GPUs change from training to generation
   and back, vLLM sleep / wake_up of the rollout engine's weights and, with host offload (``offload``: off by
   default as in veRL, always on in NeMo RL), the trained models' weights and optimizer state
   (:mod:`fmstack.perfmodel.rl_switch`).
Colocated time-shares all GPUs between the phases; split gives rollout and training their own nodes and runs the
phases one after another (on-policy) or overlapped one step apart (``async_split``, one-step off-policy).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from typing import Any

from fmstack.catalog.schema import ModelArch
from fmstack.catalog.topology import Cluster
from fmstack.errors import InputError
from fmstack.perfmodel.config import reduce_bytes_of
from fmstack.perfmodel.efficiency import Efficiency
from fmstack.perfmodel.inference import ServeConfig, deployment, estimate_serve, memory_of, validate_serve
from fmstack.perfmodel.inference_kv import DEFAULT_RESERVE_GIB as SERVE_RESERVE_GIB
from fmstack.perfmodel.rl_config import COLOCATED_GPU_MEMORY_UTILIZATION as COLOCATED_GPU_MEMORY_UTILIZATION
from fmstack.perfmodel.rl_config import SPLIT_KV_FRACTION as SPLIT_KV_FRACTION
from fmstack.perfmodel.rl_config import Algorithm as Algorithm
from fmstack.perfmodel.rl_config import Placement as Placement
from fmstack.perfmodel.rl_config import RLConfig as RLConfig
from fmstack.perfmodel.rl_config import check_context, check_critic, check_rl_config, response_lengths
from fmstack.perfmodel.rl_memory import rl_memory
from fmstack.perfmodel.rl_rollout import RolloutTime, rollout_time
from fmstack.perfmodel.rl_switch import colocated_switch
from fmstack.perfmodel.rl_train import forward_gathers_s, sync_s
from fmstack.perfmodel.rl_train import forward_s as forward_s
from fmstack.perfmodel.rl_train import train_step as _train


@dataclass(frozen=True, kw_only=True, slots=True)
class RLEstimate:
    """One RL step and where its time goes."""

    model: str
    instance: str
    num_gpus: int
    config: RLConfig
    step_time_s: float
    parts_s: dict[str, float]
    rollout_gpus: int
    train_gpus: int
    rollout_concurrency: int
    rollout_tokens_per_s: float
    rollout: dict[str, float]
    """One replica's batch (:class:`fmstack.perfmodel.rl_rollout.RolloutTime`): ``time_s``, ``steady_s``,
    ``drain_s`` (the finite batch's last wave and long tail), ``waves``, ``simulated_requests``; ``streamed_s``: with
    ``max_trajectory_age`` > 1 the step's rollout as streamed instead (the ``rollout`` part), else 0."""
    train_step: dict[str, Any]
    bottleneck: str
    fits: bool
    """Every phase of the step fits in GPU memory (see :mod:`fmstack.perfmodel.rl_memory`)."""
    memory: dict[str, Any]
    """GiB per GPU by part (``parts_gib``) and by phase (``phases_gib``), ``usable_gib`` and the ``verdict``."""
    switch: dict[str, float]
    """Colocated: what one GPU copies to and from the host per step (:class:`fmstack.perfmodel.rl_switch.Switch`);
    empty for split placement."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def phases_s(self) -> dict[str, float]:
        """The step by phase, as `estimate rl --compare` and `plan rl` print it: ``rollout_s``; ``train_s``, the
        training side (the forward passes and the updates: every part but the rollout, the weight sync and the
        colocated switch; what a split ``--async`` step overlaps with the rollout); ``sync_s`` (weight sync) and
        ``switch_s`` (colocated switch). Colocated and split in sequence, they add up to ``step_time_s``."""
        p = self.parts_s
        return {"rollout_s": p["rollout"], "train_s": sum(v for k, v in p.items() if k not in NOT_TRAINING),
                "sync_s": p["weight_sync"], "switch_s": p["colocated_switch"]}  # fmt: skip


NOT_TRAINING = ("rollout", "weight_sync", "colocated_switch")
"""The parts of a step that are not its training side (:meth:`RLEstimate.phases_s`)."""

_SERVE_FLAGS = {"tp": "rollout-tp", "precision": "rollout-precision", "input-len": "prompt-len",
                "output-len": "response-len"}  # fmt: skip
"""estimate_serve's field names -> this command's flags, so a rollout engine's error names what the user set."""


@contextmanager
def _as_rollout(tp: int) -> Iterator[None]:
    """Re-raise the rollout engine's InputError under this command's flag names."""
    try:
        yield
    except InputError as err:
        flag = _SERVE_FLAGS.get(err.field, err.field)
        raise InputError(flag, re.sub(rf"\btp\({tp}\)", f"rollout_tp({tp})", err.message)) from err


def _spread_lengths(cfg: RLConfig) -> bool:
    """Whether responses differ in length (a spread, a log-normal, or the cap bound's one long response)."""
    return cfg.length_spread > 0 or cfg.response_cap is not None or cfg.length_dist == "lognormal"


def _longest_response_tokens(cfg: RLConfig, batch: RolloutTime) -> float:
    """The longest response a streamed rollout must finish within ``max_trajectory_age`` steps: the cap when set
    (equal or uniform lengths: one response runs to it; log-normal: the capped share), else the longest uniform
    length, ``mean x (1 + spread)``, or, log-normal without a cap, the draws' 99th percentile."""
    if cfg.response_cap is not None:
        return float(cfg.response_cap)
    if cfg.length_dist == "lognormal":
        return batch.length_p99
    return cfg.response_len * (1.0 + cfg.length_spread)


def estimate_rl(
    actor: ModelArch, cluster: Cluster, cfg: RLConfig, *, critic: ModelArch | None = None,
    efficiency: Efficiency | None = None,
) -> RLEstimate:  # fmt: skip
    """Predict one PPO / GRPO step of ``actor`` on ``cluster`` (critic and reward model default to the actor).
    ``efficiency`` (a calibration profile's; None: the GPU's default curves) prices both the rollout engine and the
    training steps and forward passes: rollout and training run on the same GPUs (colocated) or the same instance
    (split)."""
    check_rl_config(cfg, cluster)
    check_critic(cfg, critic is not None)
    check_context(cfg, actor)
    critic_arch = critic or actor
    seqs = cfg.prompts_per_step * cfg.samples_per_prompt
    if cfg.placement == "split":
        r_nodes = cfg.rollout_nodes if cfg.rollout_nodes is not None else cluster.num_nodes // 2
        rollout_cl = replace(cluster, num_nodes=r_nodes)
        train_cl = replace(cluster, num_nodes=cluster.num_nodes - r_nodes)
    else:
        rollout_cl = train_cl = cluster
    replicas = rollout_cl.num_gpus // cfg.rollout_tp
    if replicas < 1 or rollout_cl.num_gpus % cfg.rollout_tp:
        raise InputError(
            "rollout-tp", f"rollout_tp({cfg.rollout_tp}) must divide the {rollout_cl.num_gpus} rollout GPUs"
        )
    per_replica = math.ceil(seqs / replicas)
    hit = (cfg.samples_per_prompt - 1) / cfg.samples_per_prompt
    serve = ServeConfig(
        tp=cfg.rollout_tp, precision=cfg.rollout_precision, input_len=cfg.prompt_len, output_len=cfg.response_len,
        prefix_hit_rate=hit, kv_memory_fraction=SPLIT_KV_FRACTION, samples_per_prompt=cfg.samples_per_prompt,
    )  # fmt: skip
    with _as_rollout(cfg.rollout_tp):
        util = cfg.rollout_memory_fraction
        if util is None and cfg.placement == "colocated":
            util = COLOCATED_GPU_MEMORY_UTILIZATION
        if util is not None:
            # pool = utilization x HBM - weights, as a share of what weights + reserve leave
            validate_serve(serve, actor, rollout_cl)
            hbm, w = rollout_cl.gpu.hbm_gib, memory_of(deployment(actor, rollout_cl, serve, efficiency)).weights_gib
            budget = util * hbm
            if w >= budget:
                colocated = cfg.placement == "colocated"
                where, note = ("colocated, ", "; the rest stays for training") if colocated else ("", "")
                raise InputError(
                    "rollout-tp", f"{where}the rollout engine may take {util:.0%} of the {hbm:.1f} GiB per GPU ({budget:.1f} "
                    f"GiB{note}) but {actor.name}'s {cfg.rollout_precision} weights take {w:.1f} GiB per GPU at "
                    f"rollout_tp({cfg.rollout_tp}); raise --rollout-tp or --rollout-memory-fraction, lower "
                    "--rollout-precision or use --placement split",
                )  # fmt: skip
            free = hbm - w - SERVE_RESERVE_GIB
            share = (budget - w) / free if free > 0 else 0.0
            serve = replace(serve, kv_memory_fraction=min(1.0, max(share, 1e-9)))
        first = estimate_serve(actor, rollout_cl, serve, efficiency=efficiency)
        conc = max(1, min(per_replica, first.max_concurrency))
        gen = estimate_serve(actor, rollout_cl, replace(serve, concurrency=conc), efficiency=efficiency)
        batch = rollout_time(
            actor,
            rollout_cl,
            serve,
            per_replica,
            conc,
            length_spread=cfg.length_spread,
            seed=cfg.seed,
            at_concurrency=gen,
            response_cap=cfg.response_cap,
            lengths=response_lengths(cfg),
            replicas=replicas,
            efficiency=efficiency,
        )
    rollout = batch.time_s
    streamed_s = longest_s = 0.0
    if cfg.async_split and cfg.max_trajectory_age > 1:
        # streamed: the engine keeps up to age x its per-step share in flight; a step costs its share at that rate
        conc = max(1, min(cfg.max_trajectory_age * per_replica, first.max_concurrency))
        streamed = estimate_serve(actor, rollout_cl, replace(serve, concurrency=conc), efficiency=efficiency)
        rollout = streamed_s = per_replica / streamed.requests_per_s
        gen = streamed
        # ... but a trajectory may lag at most `age` steps: the longest response, decoding at the stream's ITL, must
        # finish within that many steps, so a step is at least its time over the age
        longest_s = _longest_response_tokens(cfg, batch) * streamed.itl_s
        rollout = max(rollout, longest_s / cfg.max_trajectory_age)

    actor_step = _train(actor, train_cl, cfg, seqs, efficiency)
    ppo = cfg.algorithm == "ppo"
    # the critic's architecture in the training layout: the critic (PPO) and the learned reward model
    value_step = _train(critic_arch, train_cl, cfg, seqs, efficiency) if ppo or cfg.reward_model else None
    critic_step = value_step if ppo else None
    reward_step = value_step if cfg.reward_model else None
    mb = cfg.minibatches
    # forward passes of sharded models gather their weights (the reference in the actor's layout, the reward model in
    # the critic's)
    actor_fwd = forward_s(actor_step, forward_gathers_s(actor, train_cl, cfg, actor_step))
    value_fwd = forward_s(value_step, forward_gathers_s(critic_arch, train_cl, cfg, value_step)) if value_step else 0.0
    parts = {
        "rollout": rollout,
        "old_logprob_forward": actor_fwd * mb if cfg.old_logprob else 0.0,
        "reference_forward": actor_fwd * mb if cfg.reference else 0.0,
        "reward_forward": value_fwd * mb if reward_step else 0.0,
        "critic_forward": value_fwd * mb if critic_step else 0.0,
        "actor_train": cfg.epochs * mb * actor_step.step_time_s,
        "critic_train": cfg.epochs * mb * critic_step.step_time_s if critic_step else 0.0,
        "weight_sync": sync_s(actor, train_cl, cluster if cfg.placement == "split" else None, cfg, replicas),
        "colocated_switch": 0.0,
    }
    colocated = cfg.placement == "colocated"
    offload = colocated and bool(cfg.offload)
    switch = None
    if colocated:
        trained = [e for e in (actor_step, critic_step) if e is not None]
        state = sum(e.memory.weights_gib + e.memory.optimizer_gib for e in trained)
        switch = colocated_switch(cluster, rollout_weights_gib=gen.weights_gib_per_gpu, train_state_gib=state,
                                  offload=offload)  # fmt: skip
        parts["colocated_switch"] = switch.time_s
    if cfg.placement == "split" and cfg.async_split:
        rest = sum(v for k, v in parts.items() if k not in ("rollout", "weight_sync"))
        step = max(rollout, rest) + parts["weight_sync"]
    else:
        step = sum(parts.values())
    top = max(parts, key=lambda k: parts[k])
    details: list[str] = []
    if cfg.placement == "split" and cfg.async_split:  # max(rollout, training side) + sync: name the side that paces
        if rest > rollout:
            top = max((k for k in parts if k not in ("rollout", "weight_sync")), key=lambda k: parts[k])
            details.append(f"the training side sets the pace; the rollout, {rollout:.1f} s, runs beside it")
        else:
            top = "rollout"
            details.append(f"the training side, {rest:.1f} s, runs beside it")
    if top == "rollout":
        decode = f"decode {gen.bottleneck}"
        if batch.drain_s > 0.05 * rollout and cfg.max_trajectory_age == 1:
            tail = "last wave and longest responses" if _spread_lengths(cfg) else "last wave"
            decode += f"; the batch's {tail} add {100 * batch.drain_s / rollout:.0f} %"
        if longest_s / cfg.max_trajectory_age > streamed_s > 0:
            decode += (f"; the longest response takes {longest_s:.1f} s and may lag at most {cfg.max_trajectory_age} "
                       "steps")  # fmt: skip
        details.insert(0, decode)
    bottleneck = f"{top.replace('_', ' ')}: {100 * parts[top] / step:.0f} % of the step"
    if details:
        bottleneck += f" ({'; '.join(details)})"
    mem = rl_memory(actor=actor_step, critic=critic_step, reward=reward_step, reference=cfg.reference, rollout=gen,
                    rollout_max_sequences=first.max_concurrency, colocated=colocated, offload=offload)  # fmt: skip
    return RLEstimate(
        model=actor.name, instance=cluster.name or cluster.instance.name, num_gpus=cluster.num_gpus, config=cfg,
        step_time_s=step, parts_s=parts, rollout_gpus=rollout_cl.num_gpus, train_gpus=train_cl.num_gpus,
        rollout_concurrency=conc, rollout_tokens_per_s=seqs * cfg.response_len / rollout,
        rollout={**{k: float(v) for k, v in asdict(batch).items()}, "streamed_s": streamed_s,
                 "streamed_longest_s": longest_s},
        train_step={"step_time_s": actor_step.step_time_s, "mfu": actor_step.mfu, "fits": actor_step.fits,
                    "config": asdict(actor_step.config) | {"reduce_bytes": reduce_bytes_of(actor_step.config)}},
        bottleneck=bottleneck, fits=mem.fits, memory=mem.to_json(),
        switch={} if switch is None else {k: float(v) for k, v in asdict(switch).items()},
    )  # fmt: skip


def compare_placements(
    actor: ModelArch, cluster: Cluster, cfg: RLConfig, *, critic: ModelArch | None = None,
    efficiency: Efficiency | None = None,
) -> dict[str, RLEstimate]:  # fmt: skip
    """The same step colocated (HybridFlow time sharing), split in sequence and split overlapped (split needs two
    nodes or more; overlapped with ``cfg``'s ``max_trajectory_age``, one step apart by default)."""
    on_policy = replace(cfg, async_split=False, max_trajectory_age=1)
    colocated = replace(on_policy, placement="colocated", rollout_nodes=None)
    out = {"colocated": estimate_rl(actor, cluster, colocated, critic=critic, efficiency=efficiency)}
    if cluster.num_nodes >= 2:
        split = replace(on_policy, placement="split", offload=None)
        out["split"] = estimate_rl(actor, cluster, split, critic=critic, efficiency=efficiency)
        age = cfg.max_trajectory_age
        out["split_async"] = estimate_rl(actor, cluster, replace(split, async_split=True, max_trajectory_age=age),
                                         critic=critic, efficiency=efficiency)  # fmt: skip
    return out
