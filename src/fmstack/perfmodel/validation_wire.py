"""The data-parallel gradient wire (bytes per gradient element) behind each published training row, by the software
that produced it.

Applied by :func:`fmstack.perfmodel.validation.case_config` after :func:`~fmstack.perfmodel.validation_optim.
release_layout` (which sets the NeMo 24.07 rows' wire itself: Apex ``grad_sync_dtype``), and said in the row's
assumptions. Per group of rows:

- Narayanan et al. 2021 (SC21, Megatron-LM commit de7dc40f, ``examples/sc21/CONFIG.sh``: ``--fp16``, no
  ``--accumulate-allreduce-grads-in-fp32``): fp16 on the wire, 2 B. ``megatron/arguments.py`` of that commit sets
  fp32 accumulation only for ``--bf16``; ``megatron/model/distributed.py`` (``--DDP-impl local``, the 39B-1T rows)
  allocates the gradient buffer in ``param.dtype`` without it, and ``--DDP-impl torch`` (1.7B-18B) all-reduces the
  fp16 parameters' ``.grad``.
- Korthikanti et al. 2022 (fp16 mixed, Megatron-LM): fp16, 2 B, by the same rule; these runs have DP = 1, so no
  gradient reduction is priced at all.
- torchtitan (FSDP2): fp32, 4 B. ``training.mixed_precision_reduce`` defaults to ``float32`` (its only choice) and
  becomes ``MixedPrecisionPolicy(reduce_dtype=...)`` (torchtitan commit 3f20451b, ``torchtitan/config_manager.py``,
  ``torchtitan/parallelisms/parallelize_llama.py``).
- Megatron-Bridge 25.11 (0.2.0, commit 7af9601c): bf16, 2 B. Every performance recipe sets
  ``cfg.ddp.grad_reduce_in_fp32 = False`` (``scripts/performance/configs/*/*_llm_pretrain.py``), and Megatron-Core
  reduces the main-grad buffer in its own dtype (:func:`fmstack.perfmodel.config.wire_bytes`).
"""

from __future__ import annotations

from fmstack.perfmodel.config import wire_bytes
from fmstack.perfmodel.validation_optim import MEGATRON_BRIDGE_25_11

MEGATRON_LM_FP16 = (
    "Megatron-LM fp16 without --accumulate-allreduce-grads-in-fp32 (commit de7dc40f, megatron/arguments.py and "
    "megatron/model/distributed.py: the gradient buffer is the fp16 parameters' dtype)"
)
TORCHTITAN_FP32 = (
    "torchtitan FSDP2 MixedPrecisionPolicy(reduce_dtype=float32): training.mixed_precision_reduce defaults to float32 "
    "(commit 3f20451b, torchtitan/config_manager.py)"
)
MEGATRON_BRIDGE_BF16 = (
    "Megatron-Bridge 0.2.0 recipes' cfg.ddp.grad_reduce_in_fp32 = False: Megatron-Core reduces the bf16 main-grad "
    "buffer (core_v0.15.0 distributed_data_parallel.py)"
)
MEGATRON_CORE_DEFAULT = (
    "Megatron-Core reduces the main-grad buffer in its own dtype (fp32 for bf16 / fp8 compute: Megatron-LM "
    "arguments.py accumulate_allreduce_grads_in_fp32 = True; fp16 buffers under fp16)"
)


def release_wire(source: str, precision: str, grad_bytes: int, assumptions: list[str]) -> int:
    """Bytes per gradient element on the data-parallel wire of a published row whose release layout set none."""
    if "torchtitan" in source:
        wire, why = 4, TORCHTITAN_FP32
    elif MEGATRON_BRIDGE_25_11 in source:
        wire, why = wire_bytes(precision, grad_bytes), MEGATRON_BRIDGE_BF16
    elif precision == "fp16" and ("Narayanan" in source or "Korthikanti" in source):
        wire, why = wire_bytes(precision, grad_bytes), MEGATRON_LM_FP16
    else:
        wire, why = wire_bytes(precision, grad_bytes), MEGATRON_CORE_DEFAULT
    dtype = {2: "fp16" if precision == "fp16" else "bf16", 4: "fp32"}[wire]
    assumptions.append(f"gradients reduced in {dtype} ({wire} B on the wire): {why}")
    return wire
