"""What one RL post-training step is: :class:`RLConfig` (algorithm, batch shape, placement, the two engines'
layouts) and :func:`check_rl_config`, which names the ``fmstack estimate rl`` flag of a bad field. The step model
is :mod:`fmstack.perfmodel.rl`, which re-exports both."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from fmstack.catalog.schema import ModelArch
from fmstack.catalog.topology import Cluster
from fmstack.errors import InputError
from fmstack.perfmodel.batch_limits import check_batch
from fmstack.perfmodel.config import (
    SHARDING_CHOICES,
    GradDtype,
    MasterWeights,
    OptimizerStateDtype,
    TrainConfig,
    validate_layout,
    wire_fields,
)
from fmstack.perfmodel.rl_lengths import LogNormalLengths, from_clip_ratio, from_cv

Algorithm = Literal["ppo", "grpo"]
Placement = Literal["colocated", "split"]
LengthDist = Literal["uniform", "lognormal"]
COLOCATED_GPU_MEMORY_UTILIZATION = 0.5
"""Colocated: the rollout engine's weights + KV pool take this share of *total* HBM, the rest stays for the
trainer's state (veRL examples: rollout gpu_memory_utilization 0.5; veRL docs/faq/resolving_oom.rst: a fraction of
total GPU memory for vLLM >= 0.7, 0.5-0.7 without offload)."""
SPLIT_KV_FRACTION = 0.9
"""Split: the rollout GPUs serve only; the KV pool is this share of what the weights leave (serving default)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RLConfig:
    """One RL post-training step: algorithm, batch shape, placement and the two engines' layouts."""

    algorithm: Algorithm = "grpo"
    prompts_per_step: int = 256
    samples_per_prompt: int = 8
    """Responses per prompt (GRPO's group size; PPO usually 1)."""
    prompt_len: int = 1024
    response_len: int = 1024
    placement: Placement = "colocated"
    rollout_nodes: int | None = None
    """Split placement: nodes for rollout (the rest train); None = half."""
    async_split: bool = False
    max_trajectory_age: int = 1
    """Asynchronous split: training steps a trajectory may lag (NeMo RL ``grpo.async_grpo.max_trajectory_age_steps``):
    the generation servers holding weights v produce trajectories for steps v+1 .. v+age. With 1, each step's batch
    runs alone (its last wave and long tail included); with 2 or more the servers start the next steps' prompts while
    a step's stragglers finish, so the rollout streams at the engine's steady rate with up to age x the step's
    prompts in flight (bounded by the KV pool)."""
    rollout_tp: int = 8
    rollout_precision: str = "bf16"
    train_tp: int = 8
    train_pp: int = 1
    train_cp: int = 1
    """Context parallel degree of the trained models."""
    train_ep: int = 1
    """Expert parallel degree of the trained models (MoE; folded into data parallelism, as Megatron-Core does)."""
    train_sharding: str | None = None
    """ZeRO / FSDP stage of the trained models; None = ``fsdp`` when train_tp * train_pp = 1 (veRL's FSDP
    backend, ZeRO-3), else ``zero1`` (veRL's Megatron backend, distributed optimizer)."""
    optimizer_state_dtype: OptimizerStateDtype = "fp32"
    """Adam's m and v of the trained models (actor, critic): TrainConfig.optimizer_state_dtype."""
    master_weights: MasterWeights | None = None
    """The trained models' master copy (TrainConfig.master_weights); None = the backend's (:func:`train_master_weights`):
    fp32-params on veRL's FSDP backend (the actor loaded in fp32, FSDP ``MixedPrecision(param_dtype=bf16,
    reduce_dtype=fp32)``, ``verl/workers/fsdp_workers.py``), fp32 on its Megatron backend
    (``verl/utils/megatron/optimizer.py``: bf16 without the precision-aware optimizer); docs/inference.md "Trained
    models' storage layout"."""
    grad_dtype: GradDtype = "fp32"
    """The trained models' gradients (``--grad-dtype``): bf16 is NeMo RL's Megatron path (``grad_reduce_in_fp32:
    false`` in ``examples/configs/grpo_math_1B_megatron.yaml``)."""
    reduce_dtype: GradDtype | None = None
    """FSDP's reduce_dtype under fp32-params (``--reduce-dtype``; None: fp32, veRL's default ``mixed_precision.
    reduce_dtype``); refused with any other master (TrainConfig via :func:`~fmstack.perfmodel.config.wire_fields`)."""
    fp8_param_gather: bool = False
    """FP8 parameters (TrainConfig.fp8_param_gather): refused, the trained models compute in bf16."""
    grad_shard_buffer: bool = False
    """The separate reduce-scattered gradient shard (TrainConfig.grad_shard_buffer): zero1 only."""
    epochs: int = 1
    minibatches: int = 1
    reward_model: bool = False
    """A learned reward model (a forward pass of the critic's size); False = rule-based reward."""
    reference: bool = True
    """Keep a reference policy for the KL term."""
    old_logprob: bool = True
    """Recompute the rollout policy's log-probabilities with the trainer before the update (veRL's
    ``compute_log_prob`` "recompute old_log_probs" in ``ray_trainer.py``; NeMo RL's ``policy.get_logprobs`` in
    ``grpo.py``): one more forward pass of the actor over the batch."""
    rollout_memory_fraction: float | None = None
    """Share of each rollout GPU's *total* memory for the engine's weights + KV pool (vLLM's
    ``gpu_memory_utilization`` since 0.7); None = 0.5 colocated (veRL's examples), and split the serving default
    (``SPLIT_KV_FRACTION`` of what the weights leave)."""
    length_spread: float = 0.0
    """Prompt and response lengths uniform in mean x [1 - s, 1 + s]; > 0 simulates the rollout's long tail."""
    seed: int = 0
    """Seed of the rollout simulation (``length_spread > 0``)."""
    response_cap: int | None = None
    """The engine's token limit per response (NeMo RL: ``max_total_sequence_length`` - prompt). Uniform lengths:
    one response per replica runs to it after the others end (:func:`fmstack.perfmodel.rl_rollout.cap_tail_s`, a
    bound); log-normal lengths: the responses drawn above it stop at it (no separate tail). Not for the streamed
    rollout of ``max_trajectory_age`` > 1. None = no tail beyond ``length_spread``."""
    length_dist: LengthDist = "uniform"
    """Response lengths: ``uniform`` (``length_spread``; the default, as before) or ``lognormal``, set by
    ``response_len`` (the mean of the capped lengths, as veRL's ``response_length/mean``) and one of
    ``clip_ratio`` and ``length_cv`` (:mod:`fmstack.perfmodel.rl_lengths`). Log-normal responses are simulated;
    ``length_spread`` then spreads the prompts only."""
    clip_ratio: float | None = None
    """Log-normal: the share of responses that reach ``response_cap`` (veRL's ``response_length/clip_ratio``)."""
    length_cv: float | None = None
    """Log-normal: the coefficient of variation of the response lengths before the cap."""
    offload: bool | None = None
    """Colocated: park the trained models' weights and optimizer state in host memory during generation (NeMo RL
    does whenever it colocates: ``offload_before_refit`` / ``offload_after_refit``; veRL's ``param_offload`` /
    ``optimizer_offload``). It costs host copies (``colocated_switch``) and frees that memory for the rollout
    engine. None = off, veRL's default (its other defaults are this model's too: FSDP, a 0.5 engine share); split
    has no switch and refuses True."""


def check_rl_config(cfg: RLConfig, cluster: Cluster) -> None:
    """Ranges and combinations of ``cfg`` on ``cluster``; InputError names the flag and what is allowed."""
    # field -> the CLI flag that sets it (fmstack estimate rl)
    flags = {"prompts_per_step": "prompts", "samples_per_prompt": "samples", "prompt_len": "prompt-len",
             "response_len": "response-len", "epochs": "epochs", "minibatches": "minibatches",
             "rollout_tp": "rollout-tp", "train_tp": "train-tp", "train_pp": "train-pp", "train_cp": "train-cp",
             "train_ep": "train-ep"}  # fmt: skip
    for name, flag in flags.items():
        if getattr(cfg, name) < 1:
            raise InputError(flag, f"must be >= 1, got {getattr(cfg, name)}")
    check_batch("prompts", cfg.prompts_per_step, "prompts per step")
    check_batch("samples", cfg.samples_per_prompt, "samples per prompt")
    seqs = cfg.prompts_per_step * cfg.samples_per_prompt
    check_batch("samples", seqs, f"sequences per step (--prompts {cfg.prompts_per_step:,} x --samples "
                f"{cfg.samples_per_prompt:,})")  # fmt: skip
    if seqs % cfg.minibatches:  # veRL and NeMo RL both require whole minibatches of the step's sequences
        allowed = [d for d in range(1, min(seqs, 64) + 1) if seqs % d == 0]
        raise InputError(
            "minibatches", f"{cfg.minibatches} does not divide the step's {cfg.prompts_per_step} prompts x "
            f"{cfg.samples_per_prompt} samples = {seqs} sequences; allowed: {', '.join(map(str, allowed))}"
            + (", ..." if seqs > 64 else ""),
        )  # fmt: skip
    f = cfg.rollout_memory_fraction
    if f is not None and not (math.isfinite(f) and 0.0 < f <= 1.0):
        raise InputError("rollout-memory-fraction", f"must be in (0, 1], got {f}")
    if cfg.seed < 0:
        raise InputError("seed", f"must be >= 0, got {cfg.seed}")
    if not (math.isfinite(cfg.length_spread) and 0.0 <= cfg.length_spread < 1.0):
        raise InputError("length-spread", f"must be in [0, 1), got {cfg.length_spread}")
    if cfg.rollout_nodes is not None and cfg.rollout_nodes < 1:
        raise InputError("rollout-nodes", f"must be >= 1, got {cfg.rollout_nodes}")
    if cfg.placement not in ("colocated", "split"):
        raise InputError("placement", f"{cfg.placement!r} unknown; allowed: colocated, split")
    if cfg.placement == "split" and cfg.offload:
        raise InputError("offload", "needs --placement colocated (split GPUs never switch between the phases)")
    if cfg.response_cap is not None and cfg.response_cap < cfg.response_len:
        raise InputError("response-cap", f"must be >= --response-len ({cfg.response_len}), got {cfg.response_cap}")
    response_lengths(cfg)  # its InputError names the flag of a bad or impossible combination
    if cfg.max_trajectory_age < 1:
        raise InputError("max-trajectory-age", f"must be >= 1, got {cfg.max_trajectory_age}")
    if cfg.max_trajectory_age > 1 and not cfg.async_split:
        raise InputError(
            "max-trajectory-age", f"{cfg.max_trajectory_age} steps of lag needs --async (an on-policy step waits for "
            "its own rollout)",
        )  # fmt: skip
    if cfg.placement == "colocated":
        if cfg.async_split:
            raise InputError("async", "needs --placement split (rollout and training on their own nodes)")
        if cfg.rollout_nodes is not None:
            raise InputError("rollout-nodes", "needs --placement split (colocated generates on every node)")
    if cfg.algorithm not in ("ppo", "grpo"):
        raise InputError("algorithm", f"{cfg.algorithm!r} unknown; allowed: ppo, grpo")
    if cfg.train_sharding is not None and cfg.train_sharding not in SHARDING_CHOICES:
        raise InputError("train-sharding", f"{cfg.train_sharding!r} unknown; allowed: {', '.join(SHARDING_CHOICES)}")
    check_train_layout(cfg)
    if cfg.placement == "split":
        if cluster.num_nodes < 2:
            raise InputError("placement", f"split placement needs >= 2 nodes, got {cluster.num_nodes}")
        r = cfg.rollout_nodes if cfg.rollout_nodes is not None else cluster.num_nodes // 2
        if not 1 <= r < cluster.num_nodes:
            raise InputError("rollout-nodes", f"must be between 1 and {cluster.num_nodes - 1}, got {r}")


def train_sharding(cfg: RLConfig) -> str:
    """The ZeRO / FSDP stage the trained models use (see ``RLConfig.train_sharding``)."""
    return cfg.train_sharding or ("fsdp" if cfg.train_tp * cfg.train_pp == 1 else "zero1")


def train_master_weights(cfg: RLConfig) -> MasterWeights:
    """The trained models' master copy: the one given, else the backend's (``RLConfig.master_weights``): fp32-params
    under FSDP / HSDP (veRL's FSDP backend keeps the actor's and critic's parameters in fp32 and gathers them in bf16),
    fp32 otherwise (Megatron-Core's distributed optimizer)."""
    if cfg.master_weights is not None:
        return cfg.master_weights
    return "fp32-params" if train_sharding(cfg) in ("fsdp", "hsdp") else "fp32"


def check_train_layout(cfg: RLConfig) -> None:
    """The trained models' storage layout, as ``estimate train`` checks it (:func:`validate_layout`), with the RL flags
    named: the trainer computes in bf16 (no FP8 parameters) at ``train_sharding``."""
    if cfg.fp8_param_gather:
        raise InputError(
            "fp8-param-gather", "keeps the weights as FP8 parameters, which needs FP8 training; the RL trainer "
            "computes in bf16 (estimate train --precision fp8 prices FP8 training)",
        )  # fmt: skip
    sharding = train_sharding(cfg)
    if cfg.grad_shard_buffer and sharding != "zero1":
        given = f"--train-sharding {sharding}" if cfg.train_sharding else "the default at train tp = pp = 1"
        raise InputError(
            "grad-shard-buffer", f"adds a gradient shard next to zero1's full gradient buffer; the trained models use "
            f"{sharding} ({given}): give --train-sharding zero1",
        )  # fmt: skip
    master = train_master_weights(cfg)
    if master == "fp32-params" and cfg.grad_dtype != "fp32":
        given = "--master-weights fp32-params" if cfg.master_weights else f"veRL's FSDP backend ({sharding})"
        raise InputError(
            "grad-dtype", f"{given} keeps the gradients in the fp32 parameters' dtype; bf16 gradients need "
            "--train-sharding zero1 (Megatron grad_reduce_in_fp32=False) or --master-weights fp32",
        )  # fmt: skip
    if cfg.reduce_dtype is not None and master != "fp32-params":
        megatron = f"veRL's Megatron backend ({sharding}, fp32 master)"
        given = f"--master-weights {master}" if cfg.master_weights else megatron
        raise InputError(
            "reduce-dtype", f"is FSDP's reduce_dtype under fp32-params (veRL's FSDP backend); the trained models use "
            f"{given}: give --train-sharding fsdp, or --grad-dtype for Megatron's gradient buffer",
        )  # fmt: skip
    validate_layout(
        TrainConfig(optimizer_state_dtype=cfg.optimizer_state_dtype, master_weights=master,
                    sharding=sharding,  # type: ignore[arg-type]
                    grad_shard_buffer=cfg.grad_shard_buffer).with_(**wire_fields(cfg.grad_dtype, master, cfg.reduce_dtype))
    )  # fmt: skip


def check_critic(cfg: RLConfig, critic_given: bool) -> None:
    """A critic architecture (``--critic``) is used by PPO's critic and by a learned reward model (which takes its
    architecture); GRPO with a rule-based reward has neither: InputError ``critic`` rather than ignore it."""
    if critic_given and cfg.algorithm == "grpo" and not cfg.reward_model:
        raise InputError("critic", "GRPO has no critic (group-relative advantages) and a rule-based reward has no "
                         "model: --critic needs --algorithm ppo (or --reward-model, whose architecture it sets)")  # fmt: skip


def check_context(cfg: RLConfig, actor: ModelArch) -> None:
    """Prompt + response (and + the response cap, the longest a response may run) within ``actor``'s context: an
    engine refuses a request past ``max_model_len`` (vLLM), so InputError names the flag that went over: the prompt
    when it alone fills the context, else the response length or the cap."""
    for flag, tokens in (("response-len", cfg.response_len), ("response-cap", cfg.response_cap)):
        if tokens is not None and cfg.prompt_len + tokens > actor.max_seq_len:
            raise InputError(
                "prompt-len" if cfg.prompt_len >= actor.max_seq_len else flag,
                f"prompt-len({cfg.prompt_len}) + {flag}({tokens}) = {cfg.prompt_len + tokens} tokens > "
                f"{actor.name}'s context of {actor.max_seq_len}",
            )  # fmt: skip


def response_lengths(cfg: RLConfig) -> LogNormalLengths | None:
    """The log-normal response lengths of ``cfg`` (None: uniform); InputError names the flag of a bad or impossible
    combination (:mod:`fmstack.perfmodel.rl_lengths`)."""
    r, cv, cap = cfg.clip_ratio, cfg.length_cv, cfg.response_cap
    if cfg.length_dist not in ("uniform", "lognormal"):
        raise InputError("length-dist", f"{cfg.length_dist!r} unknown; allowed: uniform, lognormal")
    if r is not None and not (math.isfinite(r) and 0.0 < r < 1.0):
        raise InputError("clip-ratio", f"must be in (0, 1), got {r}")
    if cv is not None and not (math.isfinite(cv) and cv >= 0.0):
        raise InputError("length-cv", f"must be >= 0, got {cv}")
    if cfg.length_dist == "uniform":
        for flag, value in (("clip-ratio", r), ("length-cv", cv)):
            if value is not None:
                raise InputError(flag, "sets a log-normal; needs --length-dist lognormal")
        return None
    if (r is None) == (cv is None):
        raise InputError(
            "length-dist", "lognormal needs exactly one of --clip-ratio (with --response-cap) and --length-cv, got "
            + ("both" if r is not None else "neither"),
        )  # fmt: skip
    if cv is not None:
        return from_cv(cfg.response_len, cv, cap)
    if r is None or cap is None:
        raise InputError("clip-ratio", "is the share of responses reaching the cap: needs --response-cap")
    return from_clip_ratio(cfg.response_len, cap, r)
