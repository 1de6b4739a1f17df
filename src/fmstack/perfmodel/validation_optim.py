"""The optimizer-state and parameter storage layout behind each published training row, where its release says it.

Applied by :func:`fmstack.perfmodel.validation.case_config` to the rows of the release whose configuration documents
the layout, and said so in the row's assumptions; every other row keeps the model's default (fp32 Adam moments and
master weights, bf16 weights, Megatron-Core's distributed optimizer).

NeMo 24.07 (the NeMo rows T059-T065; NeMo-Framework-Launcher tag 24.07, commit 8325688d, ``launcher_scripts/conf/
training/*/*.yaml``: ``optim.name: distributed_fused_adam``, ``megatron_amp_O2: true``, ``precision: bf16``) trains
with Apex's DistributedFusedAdam through NeMo's ``MegatronDistributedFusedAdam``. NeMo r2.0.0rc1 (the 24.07
container's NeMo, ``megatron_base_model.py`` ``setup_optimization``) sets ``contiguous_grad_buffer`` (default True),
the state ``dtype`` from ``optim.dtype`` (default fp32), ``param_sync_dtype`` = the bf16 model dtype, and
``store_params=False`` with ``store_param_remainders=True`` when the state is fp32 and the model bf16, or
``store_params=False`` alone when both are bf16. Apex (``apex/contrib/optimizers/distributed_fused_adam.py``, commit
f3f04924 of April 2024): ``grad_sync_dtype`` defaults to ``dtype``; ``exp_avg_shard`` and ``exp_avg_sq_shard`` are
allocated in ``dtype``; ``param_remainders_shard`` is ``torch.int16``; with ``contiguous_grad_buffer`` the full
gradient buffer (``grad_sync_dtype``) persists and the reduce-scattered shard is a second buffer
(``sync_grads_shard = torch.empty([shard_size])``, kept as ``grads_shard``).

Megatron-Bridge 25.11 (0.2.0, commit 7af9601c, Megatron-Core 0.15, Transformer Engine 2.9): FP8 current scaling is
``bf16_with_fp8_current_scaling_mixed`` (``scripts/performance/utils/helpers.py`` ``get_precision_config("fp8_cs")``),
which sets ``fp8_param_gather = True`` (``src/megatron/bridge/training/mixed_precision.py``); a BF16 run gets
``use_precision_aware_optimizer = True`` (``helpers.py`` ``set_user_overrides``: ``if compute_dtype == "bf16"``),
under which Megatron-Core 0.15 (``optimizer_config.py``: ``store_param_remainders = True``;
``distrib_optimizer.py``: ``master_param`` as ``torch.int16`` with bf16) keeps a 16-bit master remainder; the
DeepSeek-V3 recipe also sets ``exp_avg_dtype = exp_avg_sq_dtype = torch.bfloat16``
(``src/megatron/bridge/recipes/deepseek/deepseek_v3.py``).
"""

from __future__ import annotations

from fmstack.catalog.schema import ModelArch

NEMO_24_07 = "NeMo 24.07 container"
"""Source text of the NeMo 24.07 performance-summary rows."""
MEGATRON_BRIDGE_25_11 = "25.11 NeMo container"

NEMO_24_07_BF16_STATE = {
    "nemotron-4-340b": "launcher_scripts/conf/training/nemotron/nemotron_340b.yaml: optim.dtype: bf16, "
    "grad_sync_dtype: bf16",
}
"""NeMo 24.07 configs that set a bf16 optimizer state (and bf16 gradient sync); the others leave Apex's fp32."""

MEGATRON_BRIDGE_25_11_BF16_MOMENTS = {
    "deepseek-v3": "src/megatron/bridge/recipes/deepseek/deepseek_v3.py: exp_avg_dtype = exp_avg_sq_dtype = "
    "torch.bfloat16 with use_precision_aware_optimizer = True",
}
"""Megatron-Bridge 0.2.0 recipes of 25.11 rows that set bf16 Adam moments."""


def release_layout(source: str, model: ModelArch, precision: str, assumptions: list[str]) -> dict[str, object]:
    """The TrainConfig layout fields (and gradient bytes) a published row's release documents; {} when none."""
    if NEMO_24_07 in source:
        bf16 = NEMO_24_07_BF16_STATE.get(model.name)
        if bf16 is not None:
            assumptions.append(
                f"Apex DistributedFusedAdam (NeMo 24.07, {bf16}): bf16 Adam moments, no master copy "
                "(store_params=False), bf16 gradient buffer plus its reduce-scattered shard"
            )
            return {"optimizer_state_dtype": "bf16", "master_weights": "none", "grad_bytes": 2, "reduce_bytes": 2,
                    "grad_shard_buffer": True}  # fmt: skip
        assumptions.append(
            "Apex DistributedFusedAdam (NeMo 24.07, optim.name: distributed_fused_adam, no optim.dtype): fp32 Adam "
            "moments, 16-bit master remainders (store_param_remainders), fp32 gradient buffer plus its "
            "reduce-scattered shard, gradients reduced in fp32 (grad_sync_dtype = dtype), weights gathered in bf16"
        )
        return {"optimizer_state_dtype": "fp32", "master_weights": "remainder", "grad_bytes": 4, "reduce_bytes": 4,
                "grad_shard_buffer": True}  # fmt: skip
    if MEGATRON_BRIDGE_25_11 in source:
        if precision == "fp8":
            assumptions.append(
                "FP8 parameters, gathered in FP8: fp8_param_gather = True in Megatron-Bridge 0.2.0's "
                "bf16_with_fp8_current_scaling_mixed"
            )
            return {"fp8_param_gather": True}
        if precision == "bf16":
            moments = MEGATRON_BRIDGE_25_11_BF16_MOMENTS.get(model.name)
            assumptions.append(
                "precision-aware optimizer (Megatron-Bridge 0.2.0 set_user_overrides for bf16): 16-bit master "
                "remainders (Megatron-Core 0.15 store_param_remainders = True)"
                + (f"; bf16 Adam moments ({moments})" if moments else "")
            )
            return {"master_weights": "remainder", "optimizer_state_dtype": "bf16" if moments else "fp32"}
    return {}
