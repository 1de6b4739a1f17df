"""The storage layout of a training configuration: optimizer state, master weights, gradient dtype, FP8 parameters
and the data-parallel wire, with their validation (:func:`validate_layout`, called by
:func:`fmstack.perfmodel.config.validate_config`). Bytes per parameter: :mod:`fmstack.perfmodel.memory`; the optimizer
step's traffic: :mod:`fmstack.perfmodel.optimizer_step`; docs/perfmodel.md, Storage layouts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from fmstack.errors import InputError

if TYPE_CHECKING:  # config imports this module (TrainConfig carries the layout's fields)
    from fmstack.perfmodel.config import TrainConfig

OptimizerStateDtype = Literal["fp32", "bf16"]
MasterWeights = Literal["fp32", "remainder", "none", "fp32-params"]
GradDtype = Literal["fp32", "bf16"]

OPTIMIZER_STATE_CHOICES: tuple[OptimizerStateDtype, ...] = ("fp32", "bf16")
"""Adam's m and v: fp32 (4 B each, the default of Megatron-Core and Apex) or bf16 (2 B each: Megatron-Core
``exp_avg_dtype`` / ``exp_avg_sq_dtype`` with ``use_precision_aware_optimizer``; Apex DistributedFusedAdam ``dtype``)."""
MASTER_WEIGHTS_CHOICES: tuple[MasterWeights, ...] = ("fp32", "remainder", "none", "fp32-params")
"""The optimizer's copy of the weights: fp32 (4 B); remainder (2 B: the low 16 bits of the fp32 value, the bf16
weight being its high half: Apex DistributedFusedAdam ``store_param_remainders``, Transformer Engine FusedAdam
``store_param_remainders`` under Megatron-Core's precision-aware optimizer); none (0 B: the bf16 weights are updated
in place, DistributedFusedAdam with ``store_params=False`` and a bf16 state ``dtype``); fp32-params (0 B beside the
weights: the sharded parameters themselves are fp32 and are the master, no bf16 copy is kept, FSDP casts each shard to
bf16 before the all-gather: PyTorch FSDP2 ``MixedPrecisionPolicy(param_dtype=bfloat16)``, FSDP1
``MixedPrecision(param_dtype=bfloat16)``; torchtitan, veRL's FSDP backend, llm-foundry / Composer)."""
GRAD_DTYPE_CHOICES: tuple[GradDtype, ...] = ("fp32", "bf16")
"""Gradients kept for the optimizer: fp32 (Megatron-Core ``grad_reduce_in_fp32 = True``, FSDP reducing into fp32
parameters) or bf16 (``grad_reduce_in_fp32 = False``: the main-grad buffer and its reduction in bf16)."""
GRAD_DTYPE_BYTES: dict[str, int] = {"fp32": 4, "bf16": 2}
FSDP_REDUCE_BYTES = 4
"""Bytes per gradient element on the wire under ``fp32-params``: the reduce-scatter in ``reduce_dtype=float32``, the
default of torchtitan (``mixed_precision_reduce = "float32"``, ``torchtitan/config/job_config.py``) and of veRL's FSDP
workers (``reduce_dtype`` "fp32", ``verl/workers/fsdp_workers.py``)."""
REDUCE_DTYPE_CHOICES: tuple[GradDtype, ...] = ("fp32", "bf16")
"""FSDP's ``reduce_dtype`` under ``fp32-params`` (``--reduce-dtype``): fp32 (the default above) or bf16, the
reduce-scatter in bf16 and the result cast to the fp32 parameters' dtype (FSDP2 ``MixedPrecisionPolicy(
reduce_dtype=torch.bfloat16)``; veRL ``mixed_precision.reduce_dtype``; torchtitan ``mixed_precision_reduce``): half the
data-parallel wire bytes, the same gradient storage."""


def validate_layout(cfg: TrainConfig) -> None:
    """The optimizer-state and parameter storage layout: known names, and FP8 parameters only under fp8 compute,
    a separate gradient shard only with zero1's unsharded gradient buffer."""
    if cfg.optimizer_state_dtype not in OPTIMIZER_STATE_CHOICES:
        raise InputError(
            "optimizer-state",
            f"{cfg.optimizer_state_dtype!r} unknown; allowed: {', '.join(OPTIMIZER_STATE_CHOICES)} (Adam's m and v)",
        )
    if cfg.master_weights not in MASTER_WEIGHTS_CHOICES:
        raise InputError(
            "master-weights", f"{cfg.master_weights!r} unknown; allowed: {', '.join(MASTER_WEIGHTS_CHOICES)}"
        )
    if cfg.master_weights == "remainder" and cfg.precision == "fp16":
        # the remainder completes a bf16 weight: fp16 has 5 exponent bits, not fp32's 8
        raise InputError(
            "master-weights",
            "remainder stores the low 16 bits of an fp32 weight whose high half is the bf16 weight; "
            "precision fp16 has no such half: use fp32 or none",
        )
    if cfg.fp8_param_gather and cfg.precision != "fp8":
        raise InputError(
            "fp8-param-gather", f"keeps the weights as FP8 parameters: it needs --precision fp8, got {cfg.precision}"
        )
    if cfg.fp8_param_gather and cfg.master_weights != "fp32":
        # FP8 weights cannot carry the update: NeMo sets store_params=True with fp8_params (megatron_base_model.py),
        # Megatron-Core keeps fp32 main params for FP8 parameters (optimizer_config.py,
        # use_precision_aware_optimizer_no_fp8_or_ds_fp8)
        raise InputError(
            "master-weights",
            f"FP8 parameters (--fp8-param-gather) need fp32 master weights to update; got {cfg.master_weights}",
        )
    if cfg.grad_shard_buffer and cfg.sharding != "zero1":
        raise InputError(
            "grad-shard-buffer",
            f"adds a reduce-scattered gradient shard next to zero1's full gradient buffer; got --sharding {cfg.sharding}",
        )
    if cfg.grad_bytes not in GRAD_DTYPE_BYTES.values():
        raise InputError("grad-dtype", f"gradients of {cfg.grad_bytes} B unknown; allowed: fp32 (4 B), bf16 (2 B)")
    if cfg.master_weights == "fp32-params":
        _validate_fp32_params(cfg)


def _validate_fp32_params(cfg: TrainConfig) -> None:
    """fp32-params is PyTorch FSDP's mixed precision: sharded fp32 parameters (fsdp, hsdp), gathered in bf16 / fp16,
    gradients reduced into the fp32 parameters' dtype."""
    if cfg.sharding not in ("fsdp", "hsdp"):
        # ZeRO-1/2 keep whole 16-bit weights; DeepSpeed ZeRO-3 keeps 16-bit partitions and an fp32 master beside them
        raise InputError(
            "master-weights",
            f"fp32-params is FSDP's layout (sharded fp32 parameters, gathered in bf16): it needs --sharding fsdp or "
            f"hsdp, got {cfg.sharding}",
        )
    if cfg.precision == "fp8":
        raise InputError(
            "master-weights",
            "fp32-params gathers the fp32 parameters in bf16; precision fp8 prices Transformer Engine's FP8 weight copy "
            "(torchao Float8 under FSDP2 keeps none: use --precision bf16)",
        )
    if cfg.grad_bytes != GRAD_DTYPE_BYTES["fp32"]:
        # FSDP2 foreach_reduce casts the reduced gradient to the sharded parameter's dtype (fp32)
        raise InputError(
            "grad-dtype", "fp32-params keeps gradients in the fp32 parameters' dtype: use --grad-dtype fp32"
        )


def wire_bytes(precision: str, grad_bytes: float) -> int:
    """Bytes per gradient element on the data-parallel wire of Megatron-Core, which reduces the main-grad buffer in
    the buffer's own dtype (``distributed_data_parallel.py``: ``grad_dtype = torch.float if
    ddp_config.grad_reduce_in_fp32 else param.dtype``; ``param_and_grad_buffer.py`` reduce-scatters / all-reduces
    ``bucket.grad_data``; core_v0.15.0, commit 0d7e02bd).

    - bf16 or fp8 compute with fp32 gradients: 4. Megatron-LM ``arguments.py``: "bfloat16 requires gradient
      accumulation and all-reduce to be done in fp32", ``accumulate_allreduce_grads_in_fp32 = True`` (which
      ``training.py`` passes as ``grad_reduce_in_fp32``); NeMo 2 ``MegatronMixedPrecision(grad_reduce_in_fp32=True)``
      and Megatron-Bridge ``bf16_mixed`` likewise.
    - bf16 gradients (``grad_reduce_in_fp32 = False``, ``--grad-reduce-in-bf16``): 2.
    - fp16 compute: 2. Megatron-LM sets nothing for fp16, so the buffer is the fp16 parameters' dtype (fp32 only with
      ``--accumulate-allreduce-grads-in-fp32``); NeMo 2 and Megatron-Bridge ``fp16_mixed`` set
      ``grad_reduce_in_fp32=False``. The optimizer's fp32 copy of those gradients is what ``grad_bytes`` prices.
    """
    return 2 if grad_bytes <= 2 or precision == "fp16" else 4


def reduce_bytes_of(c: TrainConfig) -> int:
    """The bytes per gradient element ``c`` puts on the data-parallel wire: its ``reduce_bytes``, else
    :func:`wire_bytes`."""
    return wire_bytes(c.precision, c.grad_bytes) if c.reduce_bytes is None else c.reduce_bytes


def wire_fields(grad_dtype: str | None, master_weights: str | None, reduce_dtype: str | None = None) -> dict[str, int]:
    """``grad_bytes`` and ``reduce_bytes`` of a layout given as flags (None: the flag left out): the gradient dtype
    sets ``grad_bytes`` and the wire follows it (:func:`wire_bytes`); fp32-params reduce-scatters in FSDP's
    ``reduce_dtype`` (``--reduce-dtype``, fp32 when left out: :data:`FSDP_REDUCE_BYTES`) whatever the compute
    precision. ``reduce_dtype`` is FSDP's knob: with any other master it is refused (Megatron-Core reduces its
    gradient buffer in the buffer's dtype, which ``--grad-dtype`` sets)."""
    out: dict[str, int] = {}
    if grad_dtype is not None:
        if grad_dtype not in GRAD_DTYPE_BYTES:
            raise InputError("grad-dtype", f"{grad_dtype!r} unknown; allowed: {', '.join(GRAD_DTYPE_CHOICES)}")
        out["grad_bytes"] = GRAD_DTYPE_BYTES[grad_dtype]
    if reduce_dtype is not None:
        if reduce_dtype not in REDUCE_DTYPE_CHOICES:
            raise InputError("reduce-dtype", f"{reduce_dtype!r} unknown; allowed: {', '.join(REDUCE_DTYPE_CHOICES)}")
        if master_weights != "fp32-params":
            raise InputError(
                "reduce-dtype",
                f"is FSDP's reduce_dtype under --master-weights fp32-params (got {master_weights or 'fp32'}); "
                "Megatron-Core reduces its gradient buffer in that buffer's dtype: use --grad-dtype",
            )
    if master_weights == "fp32-params":
        out["reduce_bytes"] = GRAD_DTYPE_BYTES[reduce_dtype] if reduce_dtype is not None else FSDP_REDUCE_BYTES
    return out


def reduce_dtype_of(c: TrainConfig) -> GradDtype | None:
    """The ``--reduce-dtype`` of a fp32-params config (from its ``reduce_bytes``); None for any other layout."""
    if c.master_weights != "fp32-params":
        return None
    return "bf16" if reduce_bytes_of(c) == GRAD_DTYPE_BYTES["bf16"] else "fp32"


def grad_dtype_of(c: TrainConfig) -> GradDtype:
    """The ``--grad-dtype`` of a config (from its ``grad_bytes``)."""
    return "bf16" if c.grad_bytes == GRAD_DTYPE_BYTES["bf16"] else "fp32"


def layout_tags(c: TrainConfig) -> list[str]:
    """Short tags for the storage layout where it differs from the default: ``opt-bf16``, ``master-remainder``,
    ``master-none``, ``fp8-params``, ``grad-shard``, ``reduce-bf16``."""
    tags = []
    if c.optimizer_state_dtype != "fp32":
        tags.append(f"opt-{c.optimizer_state_dtype}")
    if c.master_weights != "fp32":
        tags.append(f"master-{c.master_weights}")
    if c.fp8_param_gather:
        tags.append("fp8-params")
    if c.grad_shard_buffer:
        tags.append("grad-shard")
    if reduce_dtype_of(c) == "bf16":
        tags.append("reduce-bf16")
    return tags
