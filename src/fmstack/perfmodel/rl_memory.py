"""Memory of one RL step per GPU: every model resident on the GPUs of the placement, phase by phase.

Parts (GiB per GPU, from :mod:`fmstack.perfmodel.memory` for the training engines and
:mod:`fmstack.perfmodel.inference_kv` for the rollout engine):
- ``actor_state`` / ``critic_state``: weights + gradients + optimizer state of the trained models in their training
  layout (mixed-precision Adam, 2 + 4 + 12 B per parameter, sharded by the layout's ZeRO / FSDP stage);
- ``reference_weights`` / ``reward_weights``: forward-only models, bf16 weights in the actor's (reference) or the
  critic's (reward) training layout, no gradients or optimizer state;
- ``rollout_engine``: the inference engine's weights plus the KV pool it preallocates (the pool the rollout time
  was computed with, so the check and the timing describe the same engine);
- ``actor_activations`` / ``critic_activations``: activations and FSDP gather buffers, only while that model trains.

Placement (veRL defaults, no parameter / optimizer offload; veRL docs, "Resolving Out-of-Memory (OOM) Errors",
docs/faq/resolving_oom.rst, 2025-12-30: rollout ``gpu_memory_utilization`` is a fraction of *total* GPU memory for
vLLM >= 0.7 and, "without offload, keep between 0.5-0.7 to leave room for training"; with parameter / optimizer
offload it can go to 0.8-0.9):
- colocated (HybridFlow time sharing): the training state of every model stays resident through the whole step;
  the rollout engine's weights and KV pool exist only during rollout (veRL frees the cache engine after
  generation, ``free_cache_engine``), and each model's activations only while it trains. The peak is the resident
  state plus the largest of (rollout engine, actor activations, critic activations). Forward-only passes
  (reference, reward, critic values) keep no activations for a backward pass, so they peak below training.
- colocated with host offload (``offload``; NeMo RL's colocated default, veRL's ``param_offload`` /
  ``optimizer_offload``): the trained models' state (weights, gradients, optimizer) is on the host or freed during
  rollout, so the rollout phase holds the forward-only models' weights and the rollout engine only
  (:mod:`fmstack.perfmodel.rl_switch` prices the copies). PPO: each trained model's state is on the GPU only
  around its own calls (veRL ``verl/workers/fsdp_workers.py``: ``update_actor`` and ``update_critic`` load their
  model and optimizer with ``load_fsdp_model_to_gpu`` / ``load_fsdp_optimizer`` and offload them again when done), so
  the actor's training phase does not hold the critic's state, nor the critic's the actor's. The forward-only
  models stay resident (a bound: veRL can offload the reference too).
- split: the rollout GPUs hold only the rollout engine; the training GPUs hold the states and the activations as
  above, without the rollout engine.
Each phase must fit in HBM less :data:`fmstack.perfmodel.memory.DEFAULT_RESERVE_GIB`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fmstack.perfmodel.inference import ServeEstimate
from fmstack.perfmodel.memory import FP32_PARAM_BYTES, WEIGHT_BYTES
from fmstack.perfmodel.training import TrainingEstimate

PART_LABELS = {
    "actor_state": "actor training state (weights + grads + Adam)",
    "critic_state": "critic training state (weights + grads + Adam)",
    "reference_weights": "reference model weights",
    "reward_weights": "reward model weights",
    "rollout_engine": "rollout engine (weights + KV pool)",
    "actor_activations": "actor training activations",
    "critic_activations": "critic training activations",
}


@dataclass(frozen=True, kw_only=True, slots=True)
class RLMemory:
    """GiB per GPU by part and by phase, and whether every phase fits."""

    parts_gib: dict[str, float]
    """Every model's share of one GPU (the most loaded GPU of its group)."""
    phases_gib: dict[str, float]
    """Total per GPU in each phase: ``rollout``, ``actor_train``, ``critic_train`` (split: on their own GPUs)."""
    phase_parts: dict[str, list[str]]
    usable_gib: float
    """HBM less the reserve."""
    fits: bool
    verdict: str

    def to_json(self) -> dict[str, Any]:
        return {"parts_gib": self.parts_gib, "phases_gib": self.phases_gib, "phase_parts": self.phase_parts,
                "usable_gib": self.usable_gib, "fits": self.fits, "verdict": self.verdict}  # fmt: skip


def _state_gib(est: TrainingEstimate) -> float:
    m = est.memory
    return m.weights_gib + m.grads_gib + m.optimizer_gib


def _forward_weights_gib(est: TrainingEstimate) -> float:
    """A forward-only copy's bf16 weights in ``est``'s sharding: under fp32-params the trained model's weights are its
    fp32 parameters (4 B), while veRL loads the reference and reward models in bf16 (``fsdp_workers.py``:
    ``torch_dtype = torch.float32 if self._is_actor else torch.bfloat16``)."""
    fp32 = est.config.master_weights == "fp32-params"
    return est.memory.weights_gib * (WEIGHT_BYTES / FP32_PARAM_BYTES if fp32 else 1.0)


def _transient_gib(est: TrainingEstimate) -> float:
    return est.memory.activations_gib + est.memory.temporary_gib


def rl_memory(
    *,
    actor: TrainingEstimate,
    critic: TrainingEstimate | None,
    reward: TrainingEstimate | None,
    reference: bool,
    rollout: ServeEstimate,
    rollout_max_sequences: int,
    colocated: bool,
    offload: bool = False,
) -> RLMemory:
    """Check every phase of the step; ``critic`` only for PPO, ``reward`` only with a learned reward model."""
    parts = {
        "actor_state": _state_gib(actor),
        "critic_state": _state_gib(critic) if critic else 0.0,
        "reference_weights": _forward_weights_gib(actor) if reference else 0.0,
        "reward_weights": _forward_weights_gib(reward) if reward else 0.0,
        "rollout_engine": rollout.weights_gib_per_gpu + rollout.kv_pool_gib / rollout.num_gpus,
        "actor_activations": _transient_gib(actor),
        "critic_activations": _transient_gib(critic) if critic else 0.0,
    }
    resident = [k for k in ("actor_state", "critic_state", "reference_weights", "reward_weights") if parts[k] > 0]
    offloaded = ("actor_state", "critic_state") if offload else ()
    during_rollout = [k for k in resident if k not in offloaded] if colocated else []
    phase_parts = {
        "rollout": [*during_rollout, "rollout_engine"],
        "actor_train": [k for k in resident if not (offload and k == "critic_state")] + ["actor_activations"],
    }
    if critic:
        phase_parts["critic_train"] = [k for k in resident if not (offload and k == "actor_state")] + [
            "critic_activations"
        ]
    phases = {p: sum(parts[k] for k in ks) for p, ks in phase_parts.items()}
    usable = actor.memory.capacity_gib - actor.memory.reserve_gib
    worst = max(phases, key=lambda p: phases[p])
    fits = phases[worst] <= usable and rollout_max_sequences >= 1
    where = "" if colocated else (" on the rollout GPUs" if worst == "rollout" else " on the training GPUs")
    if rollout_max_sequences < 1:
        verdict = (
            f"does NOT fit: the rollout engine's weights ({rollout.weights_gib_per_gpu:.1f} GiB per GPU) leave no KV "
            f"pool for one sequence of {rollout.config.input_len + rollout.config.output_len} tokens"
        )
    elif fits:
        verdict = f"fits: peak {phases[worst]:.1f} of {usable:.1f} GiB per GPU ({worst.replace('_', ' ')} phase{where})"
    else:
        ranked = sorted(phase_parts[worst], key=lambda k: -parts[k])
        listing = ", ".join(f"{PART_LABELS[k]} {parts[k]:.1f}" for k in ranked)
        verdict = (
            f"does NOT fit: the {worst.replace('_', ' ')} phase{where} needs {phases[worst]:.1f} GiB per GPU, "
            f"{phases[worst] - usable:.1f} GiB over the {usable:.1f} GiB usable ({listing} GiB); "
            f"largest part: {PART_LABELS[ranked[0]]}"
        )
    return RLMemory(parts_gib=parts, phases_gib=phases, phase_parts=phase_parts, usable_gib=usable, fits=fits,
                    verdict=verdict)  # fmt: skip
