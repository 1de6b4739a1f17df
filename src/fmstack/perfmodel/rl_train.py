"""The trained models of an RL step (:func:`fmstack.perfmodel.rl.estimate_rl`): their training step in the
trainer's layout, the forward-only passes over the step's batch, and the weight sync to the rollout engine.

A forward pass is a third of the training model's compute (backward = 2 x forward, Narayanan et al. 2021, sec. 5.1)
plus half its TP / EP / PP communication, with no optimizer; sharded models (ZeRO-3, FSDP, HSDP) gather their weights
for it. Weight sync: colocated (HybridFlow's 3D-HybridEngine, Sheng et al. 2025, sec. 5.4), each generation GPU
all-gathers its TP shard of the bf16 weights from the training layout's ``pp x tp_train / tp_rollout`` ranks; split
placement adds the broadcast of those shards from the trainer nodes to every rollout replica over the scale-out
fabric.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from contextlib import contextmanager

from fmstack.catalog.schema import ModelArch
from fmstack.catalog.topology import Cluster
from fmstack.errors import InputError
from fmstack.perfmodel.collectives import GroupPlacement, collective_time_s
from fmstack.perfmodel.config import TrainConfig, fill_defaults
from fmstack.perfmodel.efficiency import Efficiency
from fmstack.perfmodel.modelconsts import model_consts
from fmstack.perfmodel.rl_config import RLConfig, train_master_weights
from fmstack.perfmodel.rl_config import train_sharding as train_sharding  # its home is rl_config; imported from here
from fmstack.perfmodel.step_comm import comm, placement_per_domain
from fmstack.perfmodel.training import TrainingEstimate, estimate_training

_TRAIN_FLAGS = {"tp": "train-tp", "pp": "train-pp", "cp": "train-cp", "ep": "train-ep", "sharding": "train-sharding",
                "hsdp-shard-size": "train-sharding", "seq_len": "response-len"}  # fmt: skip
"""estimate_training's field names -> this command's flags, for the trained models' errors."""


@contextmanager
def _as_trainer() -> Iterator[None]:
    """Re-raise the training model's InputError under this command's flag names (``ep(3)`` -> ``train_ep(3)``)."""
    try:
        yield
    except InputError as err:
        message = re.sub(r"(?<![\w.])(tp|pp|cp|ep)\(", r"train_\1(", err.message)
        raise InputError(_TRAIN_FLAGS.get(err.field, err.field), message) from err


def train_step(
    model: ModelArch, cluster: Cluster, cfg: RLConfig, seqs: int, efficiency: Efficiency | None
) -> TrainingEstimate:
    # sequences padded to what the layout needs: a multiple of 2 cp for load-balanced ring attention (Megatron-Core)
    # and of tp for sequence parallelism (NeMo RL's make_sequence_length_divisible_by)
    multiple = (2 * cfg.train_cp if cfg.train_cp > 1 else 1) * cfg.train_tp
    seq_len = math.ceil((cfg.prompt_len + cfg.response_len) / multiple) * multiple
    mp = cfg.train_tp * cfg.train_pp * cfg.train_cp
    if cluster.num_gpus % mp:
        # name the degree the user raised (cp, then pp, then tp), not always tp
        field = next((f for f, d in (("train-cp", cfg.train_cp), ("train-pp", cfg.train_pp)) if d > 1), "train-tp")
        raise InputError(
            field, f"train_tp({cfg.train_tp}) * train_pp({cfg.train_pp}) * train_cp({cfg.train_cp}) = {mp} "
            f"does not divide {cluster.num_gpus} GPUs",
        )  # fmt: skip
    dp = cluster.num_gpus // mp
    check_batch_split(cfg, seqs, dp, cluster.num_gpus)
    per_mb = seqs // cfg.minibatches
    sharding = train_sharding(cfg)
    with _as_trainer():
        tc: TrainConfig = fill_defaults(
            cluster.num_gpus,
            {"tp": cfg.train_tp, "pp": cfg.train_pp, "cp": cfg.train_cp, "ep": cfg.train_ep, "global_batch": per_mb,
             "seq_len": seq_len, "recompute": "full", "sharding": sharding,
             # the trained models' storage layout (check_train_layout has checked it against the sharding)
             "optimizer_state_dtype": cfg.optimizer_state_dtype, "master_weights": train_master_weights(cfg),
             "fp8_param_gather": cfg.fp8_param_gather, "grad_shard_buffer": cfg.grad_shard_buffer,
             "grad_dtype": cfg.grad_dtype, "reduce_dtype": cfg.reduce_dtype},
        )  # fmt: skip
        return estimate_training(model, cluster, tc, efficiency=efficiency)


def check_batch_split(cfg: RLConfig, seqs: int, dp: int, gpus: int) -> None:
    """Every data-parallel rank of the trainer gets the same whole number of sequences per optimizer step: veRL
    refuses a step's batch that does not split (``real_train_batch_size % minimal_bsz`` in ``ray_trainer.py``, with
    ``minimal_bsz`` the GPUs under FSDP, the Megatron data-parallel ranks x micro-batch otherwise) and divides each
    minibatch by the data-parallel size (``ppo_mini_batch_size //= dp`` in ``fsdp_workers.py``)."""
    layout = f"{gpus} training GPUs / (train_tp({cfg.train_tp}) * train_pp({cfg.train_pp}) * train_cp({cfg.train_cp}))"
    if seqs % dp:
        raise InputError(
            "prompts", f"the step's {cfg.prompts_per_step} prompts x {cfg.samples_per_prompt} samples = {seqs} sequences "
            f"do not split over the trainer's {dp} data-parallel ranks ({layout}); give a batch that is a multiple of "
            f"{dp} sequences, or raise --train-tp / --train-pp",
        )  # fmt: skip
    if (seqs // cfg.minibatches) % dp:
        raise InputError(
            "minibatches", f"{seqs} sequences / {cfg.minibatches} minibatches = {seqs // cfg.minibatches} per optimizer "
            f"step do not split over the trainer's {dp} data-parallel ranks ({layout}); lower --minibatches",
        )  # fmt: skip


def forward_s(est: TrainingEstimate, gather_s: float = 0.0) -> float:
    """A forward-only pass over the training step's batch: a third of the training step's compute (backward = 2 x
    forward, Narayanan et al. 2021, sec. 5.1) plus half its TP / EP / PP communication, with no optimizer. ``gather_s``: the pass's
    all-gathers of the model's data-parallel-sharded weights (FSDP / ZeRO-3: one per micro-batch, as
    ``estimate_training`` prices the training step's forward, :func:`forward_gathers_s`), which the pass cannot do
    without; FSDP prefetches the next layer's gather behind this layer's compute, so the pass takes the longer of
    the two."""
    third = (est.gemm_s + est.attention_s + est.memory_bound_s + est.overhead_s + est.bubble_s) / 3.0
    half = (est.comm["tp"].exposed_s + est.comm["ep"].exposed_s + est.comm["pp"].exposed_s) / 2.0
    return max(third + half, gather_s)


def shard_gather_s(model: ModelArch, train: Cluster, cfg: RLConfig) -> float:
    """All-gather of ``model``'s bf16 weights over its data-parallel sharding group (ZeRO-3, FSDP, HSDP; 0 for
    ZeRO-1/2, which keep a replica on every data-parallel rank): each rank ends with its model-parallel shard whole."""
    sharding = train_sharding(cfg)
    mp = cfg.train_tp * cfg.train_pp
    if sharding not in ("zero3", "fsdp", "hsdp"):
        return 0.0
    dp = train.num_gpus // mp
    group = min(dp, TrainConfig().hsdp_shard_size) if sharding == "hsdp" else dp
    if group < 2:
        return 0.0
    # data-parallel ranks sit next to each other after the tensor-parallel ones (Megatron's rank order)
    per_domain = math.gcd(group, max(1, train.gpus_per_domain // cfg.train_tp))
    weights = 2.0 * model_consts(model).params_total  # bf16
    return float(
        collective_time_s(
            "all_gather", weights / mp, GroupPlacement(num_ranks=group, ranks_per_domain=per_domain), train
        )
    )


def forward_gathers_s(model: ModelArch, train: Cluster, cfg: RLConfig, est: TrainingEstimate) -> float:
    """The weight all-gathers of one forward-only pass of a sharded model (ZeRO-3 / FSDP / HSDP; 0 otherwise): FSDP
    re-gathers each layer for every micro-batch (``reshard_after_forward``; veRL's ``compute_log_prob`` runs the batch
    micro-batch by micro-batch), each gather the one ``estimate_training`` prices for a training micro-batch's
    forward (:mod:`fmstack.perfmodel.step`: the rank's non-expert weights over the data-parallel group, its local
    experts over the expert-data-parallel group; HSDP: the non-expert weights over the shard group)."""
    sharding = train_sharding(cfg)
    if sharding not in ("zero3", "fsdp", "hsdp"):
        return 0.0
    mc = model_consts(model)
    tp, pp, ep = cfg.train_tp, cfg.train_pp, cfg.train_ep
    share = math.ceil(mc.layers / pp) / mc.layers  # the most loaded stage's layers
    nonexpert = (mc.params_layers_nonexpert * share + mc.params_embedding / min(pp, 2)) / tp
    expert = mc.params_expert * share / ep
    group = float(train.num_gpus // (tp * pp))  # dp x cp
    gpd = float(train.gpus_per_domain)
    if sharding == "hsdp":
        shard = float(math.gcd(TrainConfig().hsdp_shard_size, int(group)))
        one = float(comm("all_gather", 2.0 * nonexpert, shard, placement_per_domain(shard, float(tp), gpd), train))
    else:
        one = float(comm("all_gather", 2.0 * nonexpert, group, placement_per_domain(group, float(tp), gpd), train))
        if expert > 0:
            expert_dp = group * tp / ep
            one += float(
                comm("all_gather", 2.0 * expert, expert_dp, placement_per_domain(expert_dp, float(ep), gpd), train)
            )
    return est.config.num_micro_batches * one


def sync_s(model: ModelArch, train: Cluster, whole: Cluster | None, cfg: RLConfig, replicas: int) -> float:
    """Gathering data-parallel-sharded weights, resharding inside the training layout, plus (split) the broadcast
    to the rollout replicas across ``whole``.

    Sharded weights (ZeRO-3, FSDP, HSDP): each rank first gathers its model-parallel shard whole over the sharding
    group, as veRL's FSDP sharding manager does (``model.load_weights(... param.full_tensor() ...)`` in
    ``verl/workers/sharding_manager/fsdp_vllm.py``: every DTensor parameter all-gathered in full, vLLM's loader then
    keeps its TP slice); ZeRO-1/2 keep a full replica of the weights on every data-parallel rank.
    """
    weights = 2.0 * model_consts(model).params_total  # bf16
    t = shard_gather_s(model, train, cfg)
    shard = weights / cfg.rollout_tp
    group = cfg.train_pp * max(1, cfg.train_tp // cfg.rollout_tp)
    if group > 1:
        span = group * min(cfg.rollout_tp, cfg.train_tp)
        per_domain = group if span <= train.gpus_per_domain else max(1, train.gpus_per_domain // cfg.rollout_tp)
        per_domain = math.gcd(group, per_domain)
        t += float(
            collective_time_s("all_gather", shard, GroupPlacement(num_ranks=group, ranks_per_domain=per_domain), train)
        )
    if whole is not None:
        t += float(
            collective_time_s("broadcast", shard, GroupPlacement(num_ranks=replicas + 1, ranks_per_domain=1), whole)
        )
    return t
