"""The serving model's price of the reference decoder's steps (:mod:`fmstack.workloads.decoder`) on one GPU.

One replica at tensor parallelism 1, BF16 weights and BF16 KV cache, priced by
:func:`fmstack.perfmodel.inference_step.step_time`, the function every serving estimate uses, with the catalog's
default efficiencies or a measured calibration profile's. The reference workload runs its steps back to back
from a CUDA graph with no engine around them, so the comparison leaves out the model's per-iteration engine term
(``ITERATION_OVERHEAD_S``: scheduler, sampling, output processing) and keeps its per-layer launch gaps
(``LAYER_OVERHEAD_S``): :attr:`StepPrice.gpu_s` is what a graph replay measures. No torch here.
"""

from __future__ import annotations

from dataclasses import dataclass

from fmstack.catalog.schema import ModelArch
from fmstack.catalog.topology import Cluster
from fmstack.errors import InputError
from fmstack.perfmodel.efficiency import Efficiency
from fmstack.perfmodel.inference import ServeConfig, deployment
from fmstack.perfmodel.inference_step import ITERATION_OVERHEAD_S, RankLoad, step_time


@dataclass(frozen=True, kw_only=True, slots=True)
class StepPrice:
    """The model's seconds for one step, by part (``inference_step.StepParts.parts`` names)."""

    parts_s: dict[str, float]

    @property
    def total_s(self) -> float:
        """The model's iteration, the engine term included (what ``estimate serve`` uses)."""
        return sum(self.parts_s.values())

    @property
    def gpu_s(self) -> float:
        """The iteration without the engine's per-iteration host work: what a CUDA-graph replay of the step takes."""
        return self.total_s - ITERATION_OVERHEAD_S

    def top(self) -> str:
        """The largest part, the engine term left out."""
        parts = dict(self.parts_s, overhead=self.parts_s["overhead"] - ITERATION_OVERHEAD_S)
        return max(parts, key=lambda k: parts[k])


def _price(arch: ModelArch, cluster: Cluster, efficiency: Efficiency | None, load: RankLoad) -> StepPrice:
    if arch.moe is not None:
        raise InputError("model", f"{arch.name} is a mixture of experts; the reference decoder is dense")
    cfg = ServeConfig(tp=1, precision="bf16", kv_dtype="bf16")
    parts = step_time(
        deployment(arch, cluster, cfg, efficiency), load.decode_seqs, load.decode_ctx, load.prefill_tokens,
        load.prefill_token_ctx, load.prefill_seqs,
    ).parts()  # fmt: skip
    return StepPrice(parts_s={k: float(v) for k, v in parts.items()})


def price_decode(
    arch: ModelArch, cluster: Cluster, efficiency: Efficiency | None, *, batch: int, attended: int
) -> StepPrice:
    """One decode step of ``batch`` sequences, each attending ``attended`` cached positions (its own new token
    included: the step at position ``pos`` attends ``pos + 1``)."""
    if batch <= 0 or attended <= 0:
        raise InputError("batch" if batch <= 0 else "context", f"must be > 0, got {batch if batch <= 0 else attended}")
    return _price(arch, cluster, efficiency, RankLoad(decode_seqs=float(batch), decode_ctx=float(attended)))


def price_prefill(
    arch: ModelArch, cluster: Cluster, efficiency: Efficiency | None, *, batch: int, prompt_len: int
) -> StepPrice:
    """One prefill of ``batch`` whole prompts of ``prompt_len`` tokens (causal: a prompt attends
    ``n (n + 1) / 2`` positions in all)."""
    if batch <= 0 or prompt_len <= 0:
        field = "batch" if batch <= 0 else "prompt-len"
        raise InputError(field, f"must be > 0, got {batch if batch <= 0 else prompt_len}")
    whole = RankLoad(
        prefill_tokens=float(batch * prompt_len),
        prefill_token_ctx=float(batch * prompt_len * (prompt_len + 1) / 2),
        prefill_seqs=float(batch),
    )
    return _price(arch, cluster, efficiency, whole)
