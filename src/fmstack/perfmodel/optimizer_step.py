"""HBM bytes the optimizer step moves per local (sharded) parameter, derived from the storage layout.

The step is memory-bound: its time is these bytes times the local parameters over HBM bandwidth
(:func:`fmstack.perfmodel.step.step_model`). Per element sizes come from the layout
(:func:`fmstack.perfmodel.memory.layout_bytes_per_param`): ``grad_bytes`` gradients, Adam moments of
``ADAM_STATE_BYTES``, a master copy of ``MASTER_BYTES`` and the parameter's own dtype (2 B bf16, 1 B FP8).

Two implementations lie behind the layouts, as the releases that use them do it:

- fp32 master weights: Megatron-Core's distributed optimizer (``megatron/core/optimizer/distrib_optimizer.py``),
  the model's default. ``_copy_model_grads_to_main_grads`` hands the optimizer ``shard_model_grad.float()`` (the
  fp32 main grad itself; a bf16 gradient is copied to fp32 first: read ``grad_bytes``, write 4); under fp16 the
  loss scale is taken out in place (``_unscale_main_grads_and_check_for_nan``,
  ``torch._amp_foreach_non_finite_check_and_unscale_``: read and write 4); the gradient norm reads every fp32
  gradient once (``optimizer.py`` ``get_grads_for_grad_norm``: ``param.grad``); the fused Adam kernel reads the fp32
  gradient, master, m and v and writes master, m and v; then ``_copy_main_params_to_model_params`` reads the master
  again and writes
  the model weight (``shard_model_param.data.copy_(shard_main_param)``, bf16; ``quantize_param_shard`` into the
  FP8 parameter with ``fp8_param_gather``).
- a 16-bit master remainder or no master: one fused kernel updates the bf16 weight in place (Apex
  ``distributed_fused_adam.py`` with ``store_params=False``, with or without ``store_param_remainders``; Megatron-
  Core's precision-aware optimizer hands Transformer Engine's ``FusedAdam`` the gradient in its own dtype as
  ``decoupled_grad``): it reads the gradient, m, v, the bf16 weight and the remainder, writes all but the
  gradient; the gradient norm reads the gradient in its own dtype (``get_grads_for_grad_norm``: ``decoupled_grad``).
- fp32 parameters as their own master (PyTorch FSDP mixed precision: torchtitan, veRL's FSDP backend): the gradient
  norm (``clip_grad_norm_``) reads the fp32 gradient, then ``torch.optim.AdamW`` (torchtitan's default
  ``implementation = "fused"``) reads gradient, parameter, m and v and writes parameter, m and v; no copy-out, the
  cast to bf16 happens at the next gather (:attr:`~fmstack.perfmodel.memory.LayoutBytes.cast`, priced with it in
  ``step.py``). veRL's ``torch.optim.AdamW`` without ``fused`` runs the foreach kernels, several passes per tensor:
  more bytes than counted here.

Not counted: the gradient scaling of a clipped step (Megatron scales in place only when the norm exceeds the clip),
the amax pass of FP8 current scaling before ``quantize_param_shard``, and zeroing the gradient buffer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, cast

from fmstack.perfmodel.columns import MASTER_CODE, OPT_STATE_CODE, PRECISION_CODE, Columns, V
from fmstack.perfmodel.memory import ADAM_STATE_BYTES, MASTER_BYTES, layout_bytes_per_param
from fmstack.perfmodel.num import where

FP32_BYTES = 4.0


@dataclass(frozen=True, slots=True)
class OptimizerStepBytes(Generic[V]):
    """HBM bytes per local parameter of one optimizer step, by tensor; floats for one configuration."""

    grads: V
    """Gradient passes: the fp32 copy of a 16-bit gradient, the fp16 unscale, the norm and Adam's read."""
    moments: V
    """Adam's m and v, read and written."""
    master: V
    """The master copy or its remainder: read and written by Adam (fp32: read again for the weight copy)."""
    weights: V
    """The model weight: written (fp32 master), or read and written in place (remainder, none, fp32-params)."""

    @property
    def total(self) -> V:
        grads: Any = self.grads
        return cast(V, grads + self.moments + self.master + self.weights)


def optimizer_step_bytes_per_param(c: Columns[Any]) -> OptimizerStepBytes[Any]:
    """HBM bytes per local parameter of one optimizer step for every configuration row.

    Default layout (bf16, fp32 main grads, fp32 master, fp32 m and v): grads 4 (norm) + 4 (Adam) = 8, moments
    2 x 8 = 16, master 4 + 4 + 4 = 12, weights 2: 38 B. fp32-params: grads 8, moments 16, weights 4 + 4: 32 B.
    """
    master_code = MASTER_CODE["fp32"] if c.master is None else c.master
    fp32_master = master_code == MASTER_CODE["fp32"]
    opt_state = OPT_STATE_CODE["fp32"] if c.opt_state is None else c.opt_state
    state = where(opt_state == OPT_STATE_CODE["bf16"], ADAM_STATE_BYTES["bf16"], ADAM_STATE_BYTES["fp32"])
    remainder = where(master_code == MASTER_CODE["remainder"], MASTER_BYTES["remainder"], 0.0)
    layout = layout_bytes_per_param(c)
    fp32_params = master_code == MASTER_CODE["fp32-params"]
    # the parameter's dtype: 2 (bf16), 1 (FP8 parameters), 4 (fp32-params)
    weight = where(fp32_params, layout.weights, layout.gather)

    # the gradient as the optimizer reads it: Megatron's fp32 main grad (a bf16 one copied up), else its own dtype
    upcast = where(fp32_master & (c.grad_bytes < FP32_BYTES), c.grad_bytes + FP32_BYTES, 0.0)
    opt_grad = where(fp32_master, FP32_BYTES, c.grad_bytes)
    unscale = where(c.precision == PRECISION_CODE["fp16"], 2.0 * opt_grad, 0.0)
    grads = upcast + unscale + 2.0 * opt_grad  # the norm pass, then Adam's read
    master = where(fp32_master, 3.0 * MASTER_BYTES["fp32"], 2.0 * remainder)
    weights = where(fp32_master, weight, 2.0 * weight)
    return OptimizerStepBytes(grads=grads, moments=2.0 * state, master=master, weights=weights)
