"""The colocated switch of an RL step: host <-> device copies when the GPUs change from training to generation and back.

Colocated, the same GPUs train and generate, so each step parks what the other phase does not need in host memory.
What moves, per GPU and per step, as NVIDIA NeMo RL v0.5.0 does it (``nemo_rl/algorithms/grpo.py``,
``refit_policy_generation`` and ``grpo_train``; ``nemo_rl/models/policy/workers/megatron_policy_worker.py``;
``nemo_rl/models/generation/vllm/vllm_worker.py``):
- the rollout engine's weights: vLLM sleep mode level 1 after generation (``llm.sleep(level=1)``: weights copied to
  host, KV cache discarded) and ``wake_up`` before the next one (weights copied back, KV pool re-allocated, not
  copied): one device-to-host and one host-to-device copy of the engine's weights;
- with host offload of the training state (NeMo RL always does it when colocated: ``offload_before_refit`` moves the
  optimizer state to the host, ``offload_after_refit`` the bf16 parameters; ``prepare_for_lp_inference`` and
  ``prepare_for_training`` bring them back; gradients are freed, not copied, by Megatron-Core's
  ``_ParamAndGradBuffer.offload_to_cpu``, ``grad_data.storage().resize_(0)``): one copy each way of the trained
  models' weights and optimizer state (veRL's ``param_offload`` / ``optimizer_offload`` move the same state).
The copies run one after another on each GPU's host link, at :data:`HOST_COPY_EFFICIENCY` of its peak.
Not priced: NeMo RL's reference-policy swap (``use_reference_model`` copies the policy's weights out and the
reference's in and back, for the KL term), Ray dispatch and the CUDA-IPC refit itself (``weight_sync``).
"""

from __future__ import annotations

from dataclasses import dataclass

from fmstack.catalog.topology import Cluster

GIB = 2**30
HOST_LINK_GBPS: dict[str, float] = {
    "H100": 64.0,
    "H100-96GB": 64.0,
    "H200": 64.0,
    "H800": 64.0,
    "A100-80GB": 32.0,
    "A100-40GB": 32.0,
    "GB200": 225.0,
}
"""Host link per GPU, one direction, GB/s (1e9 B/s). PCIe Gen5 x16 (H100 / H200 datasheets: PCIe Gen5 128 GB/s, both
directions); PCIe Gen4 x16 (A100 datasheet: 64 GB/s, both directions); GB200: NVLink-C2C, 900 GB/s both directions
between one Grace CPU and its two Blackwell GPUs (GB200 NVL72 datasheet), so 225 GB/s per GPU and direction."""
DEFAULT_HOST_LINK_GBPS = 64.0
"""A GPU not in :data:`HOST_LINK_GBPS`: PCIe Gen5 x16, the host interface of NVIDIA's data-center GPUs since Hopper."""

# vLLM blog "Zero-Reload Model Switching with vLLM Sleep Mode" (2025-10-26, vllm-project/vllm-project.github.io,
# assets/figures/2025-vllm-sleep-mode/plotly-switching-comparison.js): Qwen3-Coder-30B-A3B (30.5 B parameters, bf16),
# TP 1 on one A100 (PCIe Gen4 x16), sleep level 1, vLLM 0.11.0: wake-ups of 2.89, 2.86 and 2.85 s.
_VLLM_WAKE_BYTES = 30.5e9 * 2
_VLLM_WAKE_S = (2.89 + 2.86 + 2.85) / 3
HOST_COPY_EFFICIENCY = _VLLM_WAKE_BYTES / _VLLM_WAKE_S / (HOST_LINK_GBPS["A100-80GB"] * 1e9)
"""Achieved share of the host link's peak in a bulk copy: vLLM's measured level-1 wake-up (21.3 GB/s, 0.67 of PCIe
Gen4 x16). A measurement of vLLM, not of any NeMo RL row."""


def host_link_gbps(cluster: Cluster) -> float:
    """The GPU's host link, one direction, GB/s."""
    return HOST_LINK_GBPS.get(cluster.gpu.name, DEFAULT_HOST_LINK_GBPS)


@dataclass(frozen=True, kw_only=True, slots=True)
class Switch:
    """What one GPU copies between host and device in one step, and how long it takes."""

    rollout_weights_gib: float
    """The rollout engine's weights (vLLM sleep level 1 / wake_up)."""
    train_state_gib: float
    """The trained models' bf16 weights + optimizer state (0 without host offload)."""
    moved_gib: float
    """Both directions: 2 x (rollout weights + training state)."""
    host_link_gbps: float
    time_s: float


def colocated_switch(cluster: Cluster, *, rollout_weights_gib: float, train_state_gib: float, offload: bool) -> Switch:
    """Time of the copies (module docstring): every byte goes out once and comes back once, at the host link's
    peak x :data:`HOST_COPY_EFFICIENCY`."""
    state = train_state_gib if offload else 0.0
    moved = 2.0 * (rollout_weights_gib + state)
    link = host_link_gbps(cluster)
    time_s = moved * GIB / (link * 1e9 * HOST_COPY_EFFICIENCY)
    return Switch(rollout_weights_gib=rollout_weights_gib, train_state_gib=state, moved_gib=moved,
                  host_link_gbps=link, time_s=time_s)  # fmt: skip
