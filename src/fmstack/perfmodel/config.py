"""The training configuration: parallel degrees, batch, precision, recomputation, overlap.

Validated against a model and a cluster by :func:`validate_config`, which raises InputError with the
arithmetic that failed (``tp(8) * pp(4) * cp(1) * dp(3) = 96 != num_gpus(128)``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from fmstack.catalog.schema import ModelArch
from fmstack.errors import InputError
from fmstack.perfmodel.batch_limits import check_batch
from fmstack.perfmodel.config_layout import FSDP_REDUCE_BYTES as FSDP_REDUCE_BYTES
from fmstack.perfmodel.config_layout import GRAD_DTYPE_BYTES as GRAD_DTYPE_BYTES
from fmstack.perfmodel.config_layout import GRAD_DTYPE_CHOICES as GRAD_DTYPE_CHOICES
from fmstack.perfmodel.config_layout import MASTER_WEIGHTS_CHOICES as MASTER_WEIGHTS_CHOICES
from fmstack.perfmodel.config_layout import OPTIMIZER_STATE_CHOICES as OPTIMIZER_STATE_CHOICES
from fmstack.perfmodel.config_layout import REDUCE_DTYPE_CHOICES as REDUCE_DTYPE_CHOICES
from fmstack.perfmodel.config_layout import GradDtype as GradDtype
from fmstack.perfmodel.config_layout import MasterWeights as MasterWeights
from fmstack.perfmodel.config_layout import OptimizerStateDtype as OptimizerStateDtype
from fmstack.perfmodel.config_layout import grad_dtype_of as grad_dtype_of
from fmstack.perfmodel.config_layout import layout_tags as layout_tags
from fmstack.perfmodel.config_layout import reduce_bytes_of as reduce_bytes_of
from fmstack.perfmodel.config_layout import reduce_dtype_of as reduce_dtype_of
from fmstack.perfmodel.config_layout import validate_layout as validate_layout
from fmstack.perfmodel.config_layout import wire_bytes as wire_bytes
from fmstack.perfmodel.config_layout import wire_fields as wire_fields

Recompute = Literal["none", "selective", "full"]
Precision = Literal["bf16", "fp16", "fp8"]
Sharding = Literal["none", "zero1", "zero2", "zero3", "fsdp", "hsdp"]
Schedule = Literal["1f1b", "interleaved"]

RECOMPUTE_CHOICES: tuple[Recompute, ...] = ("none", "selective", "full")
PRECISION_CHOICES: tuple[Precision, ...] = ("bf16", "fp16", "fp8")
SHARDING_CHOICES: tuple[Sharding, ...] = ("none", "zero1", "zero2", "zero3", "fsdp", "hsdp")
RECOMPUTE_MODULES: tuple[str, ...] = (
    "core_attn",
    "layernorm",
    "moe_act",
    "mla_up_proj",
    "mlp",
    "moe",
    "shared_experts",
)
"""Megatron-Core ``recompute_modules`` (``TransformerConfig``, with ``recompute_granularity="selective"``) that
the memory and time model express; the order gives each its bit in the planner's ``rc_modules`` column."""
_MOE_MODULES = ("moe_act", "moe", "shared_experts")


@dataclass(frozen=True, kw_only=True, slots=True)
class TrainConfig:
    """How one training step is run. Degrees multiply to the job's GPU count: tp * pp * cp * dp."""

    tp: int = 1
    """Tensor parallel degree (Megatron column/row split of every linear layer)."""
    pp: int = 1
    """Pipeline parallel stages."""
    dp: int = 1
    """Data parallel replicas (with ZeRO / FSDP, the sharding group unless hsdp)."""
    cp: int = 1
    """Context parallel degree (ring attention over sequence chunks)."""
    ep: int = 1
    """Expert parallel degree (MoE experts split across ep ranks of the dp * cp group)."""
    etp: int = 1
    """Tensor parallel degree inside each expert."""
    sequence_parallel: bool = False
    """Megatron sequence parallelism: norms and dropout split over the TP group (Korthikanti et al. 2022)."""
    virtual_stages: int = 1
    """Model chunks per pipeline stage (interleaved 1F1B when > 1)."""
    micro_batch: int = 1
    """Sequences per micro-batch per data-parallel replica."""
    global_batch: int = 1
    """Sequences per optimizer step, over all replicas."""
    seq_len: int = 2048
    precision: Precision = "bf16"
    """Compute precision of the linear layers; fp8 keeps attention, norms and optimizer in bf16/fp32."""
    recompute: Recompute = "none"
    """none; selective (Megatron ``recompute_granularity="selective"``: the modules of ``recompute_modules``, by
    default the attention core, Korthikanti et al. 2022); full (every layer keeps only its input)."""
    recompute_modules: tuple[str, ...] = ()
    """With recompute=selective: Megatron-Core ``recompute_modules`` (:data:`RECOMPUTE_MODULES`); empty = Megatron's
    default ``["core_attn"]``."""
    recompute_layers: int = 0
    """Fully recompute the first N layers of every pipeline chunk (Megatron ``recompute_granularity="full"``,
    ``recompute_method="block"``, ``recompute_num_layers=N``); the other layers follow ``recompute``."""
    sharding: Sharding = "zero1"
    """Optimizer / gradient / parameter sharding over the data-parallel group (zero1 = distributed optimizer)."""
    hsdp_shard_size: int = 8
    """With hsdp: data-parallel ranks per sharding group (the groups replicate one another); it must divide dp."""
    overlap_dp: bool = True
    """Overlap data-parallel gradient reduction / FSDP gathers with compute."""
    overlap_tp: bool = False
    """Overlap tensor-parallel collectives with GEMMs (Transformer Engine userbuffers)."""
    overlap_ep: bool = False
    """Overlap the expert-parallel all-to-all of one micro-batch with the compute of another (Megatron-Core
    ``--overlap-moe-expert-parallel-comm`` with ``--delay-wgrad-compute``, v0.14)."""
    flash_attention: bool = True
    """Fused attention (FlashAttention): causal blocks skipped, no s^2 activations stored."""
    grad_bytes: int = 4
    """Bytes per gradient element kept for the optimizer (4: fp32 main grads, as Megatron-Core)."""
    reduce_bytes: int | None = None
    """Bytes per gradient element on the wire for the data-parallel reduction; None: as Megatron-Core reduces the
    gradients it keeps (:func:`wire_bytes`: fp32 gradients 4 B, bf16 gradients or fp16 compute 2 B). Set where the
    software reduces in a dtype of its own (FSDP ``reduce_dtype``, Apex ``grad_sync_dtype``)."""
    optimizer_state_dtype: OptimizerStateDtype = "fp32"
    """Adam's first and second moments (:data:`OPTIMIZER_STATE_CHOICES`): fp32, 8 B per parameter; bf16, 4 B."""
    master_weights: MasterWeights = "fp32"
    """The optimizer's copy of the weights (:data:`MASTER_WEIGHTS_CHOICES`): fp32 4 B, remainder 2 B, none 0 B."""
    fp8_param_gather: bool = False
    """With precision fp8: the weights are FP8 parameters, 1 B, with no bf16 copy, and the data-parallel parameter
    all-gathers (ZeRO-1 after the step, FSDP / ZeRO-3 per layer) move 1 B per parameter (Megatron-Core
    ``DistributedDataParallelConfig.fp8_param_gather``: "keep the compute param in fp8 ... and perform the param
    all-gather in fp8")."""
    grad_shard_buffer: bool = False
    """With zero1: the reduce-scattered gradient shard lives in its own buffer next to the full gradient buffer
    (``grad_bytes`` / shard group more), as Apex DistributedFusedAdam with ``contiguous_grad_buffer`` keeps it
    (``sync_grads_shard``, then ``grads_shard``); Megatron-Core's distributed optimizer reads its shard in place."""

    @property
    def model_parallel(self) -> int:
        return self.tp * self.pp * self.cp

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def num_micro_batches(self) -> int:
        return self.global_batch // (self.micro_batch * self.dp)

    def with_(self, **changes: object) -> TrainConfig:
        return replace(self, **changes)  # type: ignore[arg-type]


def _positive(name: str, value: int) -> None:
    if value < 1:
        raise InputError(name, f"must be >= 1, got {value}")


def validate_config(cfg: TrainConfig, model: ModelArch, num_gpus: int) -> None:
    """Check shapes; raise InputError showing the arithmetic that failed."""
    for name in ("tp", "pp", "dp", "cp", "ep", "etp", "virtual_stages", "micro_batch", "global_batch", "seq_len"):
        _positive(name, getattr(cfg, name))
    check_batch("micro_batch", cfg.micro_batch, "sequences per micro-batch (a part of the global batch)")
    check_batch("global_batch", cfg.global_batch)
    if cfg.precision not in PRECISION_CHOICES:
        raise InputError("precision", f"{cfg.precision!r} unknown; allowed: {', '.join(PRECISION_CHOICES)}")
    if cfg.recompute not in RECOMPUTE_CHOICES:
        raise InputError("recompute", f"{cfg.recompute!r} unknown; allowed: {', '.join(RECOMPUTE_CHOICES)}")
    if cfg.sharding not in SHARDING_CHOICES:
        raise InputError("sharding", f"{cfg.sharding!r} unknown; allowed: {', '.join(SHARDING_CHOICES)}")
    _validate_recompute(cfg, model)
    validate_layout(cfg)
    product = cfg.num_gpus
    if product != num_gpus:
        raise InputError(
            "parallelism",
            f"tp({cfg.tp}) * pp({cfg.pp}) * cp({cfg.cp}) * dp({cfg.dp}) = {product} != num_gpus({num_gpus})",
        )
    if model.num_heads % cfg.tp:
        raise InputError("tp", f"num_heads({model.num_heads}) of {model.name} is not divisible by tp({cfg.tp})")
    if model.num_kv_heads % cfg.tp and cfg.tp % model.num_kv_heads:
        raise InputError(
            "tp", f"num_kv_heads({model.num_kv_heads}) and tp({cfg.tp}) must divide one another (replicated kv heads)"
        )
    if model.num_layers < cfg.pp * cfg.virtual_stages:
        raise InputError(
            "pp",
            f"num_layers({model.num_layers}) < pp({cfg.pp}) * virtual_stages({cfg.virtual_stages}): a chunk would be empty",
        )
    if cfg.virtual_stages > 1 and cfg.pp == 1:
        raise InputError(
            "virtual_stages", f"interleaving needs pp > 1, got pp(1) with virtual_stages({cfg.virtual_stages})"
        )
    if cfg.seq_len % (2 * cfg.cp) and cfg.cp > 1:
        raise InputError(
            "cp", f"seq_len({cfg.seq_len}) must be divisible by 2 * cp({cfg.cp}) for load-balanced ring attention"
        )
    per_step = cfg.micro_batch * cfg.dp
    if cfg.global_batch % per_step:
        raise InputError(
            "global_batch",
            f"global_batch({cfg.global_batch}) is not a multiple of micro_batch({cfg.micro_batch}) * dp({cfg.dp}) = {per_step}",
        )
    if cfg.virtual_stages > 1 and cfg.num_micro_batches % cfg.pp:
        raise InputError(
            "global_batch",
            f"interleaved schedule needs micro-batches({cfg.num_micro_batches}) to be a multiple of pp({cfg.pp})",
        )
    if cfg.sequence_parallel and cfg.tp == 1:
        # Megatron-LM switches it off with a warning when tp is 1 (megatron/training/arguments.py)
        raise InputError("sp", "sequence parallelism splits activations over the tensor-parallel group; tp is 1")
    if cfg.overlap_tp and not cfg.sequence_parallel:
        # Megatron-LM: "Tensor parallel communication/GEMM overlap can happen only when sequence parallelism is
        # enabled" (megatron/training/arguments.py); torchtitan's async TP also overlaps sequence-parallel collectives
        raise InputError(
            "overlap-tp",
            "overlaps the all-gather / reduce-scatter of sequence parallelism with the GEMMs: needs --sp (tp > 1)",
        )
    if model.moe is None:
        if cfg.ep > 1:
            raise InputError("ep", f"{model.name} is dense; ep({cfg.ep}) must be 1")
        if cfg.etp > 1:
            raise InputError("etp", f"{model.name} is dense: it has no experts to split; etp({cfg.etp}) must be 1")
        if cfg.overlap_ep:
            raise InputError("overlap-ep", f"{model.name} is dense: it has no expert all-to-all to overlap")
    else:
        if model.moe.num_experts % cfg.ep:
            raise InputError("ep", f"ep({cfg.ep}) does not divide num_experts({model.moe.num_experts}) of {model.name}")
        if cfg.overlap_ep and cfg.pp > 1 and cfg.virtual_stages == 1:
            # Megatron-Core (transformer_config.py) asserts this: the overlap pairs one micro-batch's forward with
            # another's backward inside one model chunk, which a non-interleaved pipeline stage never has
            raise InputError(
                "overlap-ep",
                f"the expert all-to-all overlap with pp({cfg.pp}) > 1 needs virtual stages (--vpp > 1), got 1",
            )
        group = cfg.dp * cfg.cp * cfg.tp
        if group % (cfg.ep * cfg.etp):
            raise InputError(
                "ep", f"ep({cfg.ep}) * etp({cfg.etp}) must divide dp({cfg.dp}) * cp({cfg.cp}) * tp({cfg.tp}) = {group}"
            )
    _validate_hsdp(cfg)
    check_seq_len(cfg.seq_len, model)


def check_search_layout(
    precisions: tuple[str, ...],
    optimizer_state_dtype: str,
    master_weights: str,
    fp8_param_gather: bool,
    *,
    grad_shard_buffer: bool = False,
    shardings: tuple[str, ...] = ("zero1",),
    grad_dtype: str = "fp32",
    reduce_dtype: str | None = None,
) -> None:
    """The planner's fixed storage layout must hold on every precision it searches (FP8 parameters on its fp8 rows,
    which must exist; the separate gradient shard on its zero1 rows, likewise); fp32-params on every sharding it
    searches (FSDP's layout: fsdp and hsdp only)."""
    if master_weights == "fp32-params" and set(shardings) - {"fsdp", "hsdp"}:
        raise InputError(
            "master-weights",
            f"fp32-params is FSDP's layout (sharded fp32 parameters): search --sharding fsdp and/or hsdp only, got "
            f"{','.join(shardings)}",
        )
    if fp8_param_gather and "fp8" not in precisions:
        raise InputError(
            "fp8-param-gather",
            f"keeps the weights as FP8 parameters: it needs fp8 among --precision, got {','.join(precisions)}",
        )
    if grad_shard_buffer and "zero1" not in shardings:
        raise InputError(
            "grad-shard-buffer",
            f"adds a gradient shard next to zero1's full gradient buffer: it needs zero1 among the shardings searched, "
            f"got {','.join(shardings)}",
        )
    for precision in precisions:
        validate_layout(
            TrainConfig(
                precision=precision,  # type: ignore[arg-type]
                optimizer_state_dtype=optimizer_state_dtype,  # type: ignore[arg-type]
                master_weights=master_weights,  # type: ignore[arg-type]
                fp8_param_gather=fp8_param_gather and precision == "fp8",
                sharding="fsdp" if master_weights == "fp32-params" else "zero1",
                **wire_fields(grad_dtype, master_weights, reduce_dtype),  # type: ignore[arg-type]
            )
        )


def _validate_hsdp(cfg: TrainConfig) -> None:
    """The HSDP shard group (``--hsdp-shard-size`` of ``estimate train``) must divide the data-parallel degree."""
    if cfg.sharding != "hsdp":
        return
    size = cfg.hsdp_shard_size
    if size < 1 or cfg.dp % size:
        divisors = ", ".join(str(d) for d in range(1, cfg.dp + 1) if cfg.dp % d == 0)
        raise InputError(
            "hsdp-shard-size",
            f"the HSDP shard group of {size} data-parallel ranks must divide dp({cfg.dp}): give --hsdp-shard-size "
            f"one of {divisors}, or use --sharding fsdp",
        )


MAX_SEQ_LEN_FACTOR = 4
"""How far past the model's published context a training sequence may go (context extension runs train a few
times past it; beyond that the catalog model is not the model being trained)."""


DEFAULT_SEQ_LEN = 8192
"""Training sequence length when none is given: Llama 3's pre-training context (Llama 3 paper, section 3.4.1),
capped at the model's own published context (GPT-3 trained at 2048)."""


def default_seq_len(model: ModelArch) -> int:
    """min(8192, the model's max_seq_len): the sequence length ``estimate train`` and ``plan train`` assume."""
    return min(DEFAULT_SEQ_LEN, model.max_seq_len)


def check_seq_len(seq_len: int, model: ModelArch) -> None:
    """The sequence-length rule shared by ``estimate train`` and the planner (which must not rank a sequence length
    that the estimate it prints would refuse)."""
    limit = model.max_seq_len * MAX_SEQ_LEN_FACTOR
    if seq_len > limit:
        raise InputError(
            "seq_len",
            f"seq_len({seq_len}) is far beyond {model.name}'s max_seq_len({model.max_seq_len}): at most "
            f"{MAX_SEQ_LEN_FACTOR} x {model.max_seq_len} = {limit}",
        )


def _validate_recompute(cfg: TrainConfig, model: ModelArch) -> None:
    """recompute_modules and recompute_layers: known names, the model has what they recompute, in range."""
    for name in cfg.recompute_modules:
        if name not in RECOMPUTE_MODULES:
            raise InputError("recompute_modules", f"{name!r} unknown; allowed: {', '.join(RECOMPUTE_MODULES)}")
    if cfg.recompute_modules and cfg.recompute != "selective":
        raise InputError(
            "recompute_modules",
            f"{','.join(cfg.recompute_modules)} need recompute=selective (Megatron recompute_granularity"
            f"='selective'), got recompute={cfg.recompute}",
        )
    if "mla_up_proj" in cfg.recompute_modules and model.mla is None:
        raise InputError("recompute_modules", f"mla_up_proj needs multi-head latent attention; {model.name} has none")
    for name in _MOE_MODULES:
        if name in cfg.recompute_modules and model.moe is None:
            raise InputError("recompute_modules", f"{name} needs an MoE model; {model.name} is dense")
    if "shared_experts" in cfg.recompute_modules and model.moe is not None and not model.moe.num_shared_experts:
        raise InputError("recompute_modules", f"shared_experts: {model.name} has no shared experts")
    per_chunk = -(-model.num_layers // (cfg.pp * cfg.virtual_stages))
    if cfg.recompute_layers < 0 or cfg.recompute_layers > per_chunk:
        raise InputError(
            "recompute_layers",
            f"must be between 0 and the layers of one pipeline chunk, ceil(num_layers({model.num_layers}) / "
            f"(pp({cfg.pp}) * virtual_stages({cfg.virtual_stages}))) = {per_chunk}; got {cfg.recompute_layers}",
        )
    if cfg.recompute_layers and cfg.recompute == "full":
        raise InputError(
            "recompute_layers",
            f"recompute=full already recomputes every layer; recompute_layers({cfg.recompute_layers}) fully "
            "recomputes the first N layers of each pipeline chunk, the others follow recompute none or selective",
        )


def fill_defaults(num_gpus: int, given: dict[str, object]) -> TrainConfig:
    """A TrainConfig from the degrees a user gave; what is left out defaults sensibly.

    tp, pp, cp, ep default to 1 and the remaining GPUs go to dp; sequence parallelism is on when tp > 1.
    The global batch defaults to dp * micro_batch (one micro-batch per replica, no gradient accumulation: Megatron-LM's
    default ``--global-batch-size``); with pp > 1 to enough micro-batches to keep the 1F1B bubble (p - 1) / m at or
    below 25 % (m = 4 p), i.e. dp * micro_batch * 4 * pp sequences (Megatron's default would leave m = 1).
    """
    values = {k: v for k, v in given.items() if v is not None}
    wire = wire_fields(
        values.pop("grad_dtype", None),  # type: ignore[arg-type]
        values.get("master_weights"),  # type: ignore[arg-type]
        values.pop("reduce_dtype", None),  # type: ignore[arg-type]
    )
    for key, value in wire.items():
        values.setdefault(key, value)
    if values.get("recompute_modules"):
        values.setdefault("recompute", "selective")  # modules are Megatron's selective granularity
    tp = int(values.get("tp", 1))  # type: ignore[call-overload]
    pp = int(values.get("pp", 1))  # type: ignore[call-overload]
    cp = int(values.get("cp", 1))  # type: ignore[call-overload]
    for name, value in (("tp", tp), ("pp", pp), ("cp", cp)):
        _positive(name, value)
    if "dp" not in values:
        mp = tp * pp * cp
        if num_gpus % mp:
            raise InputError(
                "parallelism", f"tp({tp}) * pp({pp}) * cp({cp}) = {mp} does not divide num_gpus({num_gpus})"
            )
        values["dp"] = num_gpus // mp
    values.setdefault("sequence_parallel", tp > 1)
    mb = int(values.get("micro_batch", 1))  # type: ignore[call-overload]
    dp = int(values["dp"])  # type: ignore[call-overload]
    values.setdefault("global_batch", dp * mb * (4 * pp if pp > 1 else 1))
    return TrainConfig(**values)  # type: ignore[arg-type]


def describe_config(c: TrainConfig) -> str:
    """A short one-line description: tp8 pp4 dp16 v2 mb1 gb1024 seq8192 bf16 selective zero1 sp."""
    parts = [f"tp{c.tp}", f"pp{c.pp}", f"dp{c.dp}"]
    if c.cp > 1:
        parts.append(f"cp{c.cp}")
    if c.ep > 1:
        parts.append(f"ep{c.ep}")
    if c.virtual_stages > 1:
        parts.append(f"v{c.virtual_stages}")
    recompute = c.recompute + (f"({','.join(c.recompute_modules)})" if c.recompute_modules else "")
    if c.recompute_layers:
        recompute += f"+full{c.recompute_layers}"
    parts += [f"mb{c.micro_batch}", f"gb{c.global_batch}", f"seq{c.seq_len}", c.precision, recompute, c.sharding]
    if c.sequence_parallel:
        parts.append("sp")
    if c.overlap_tp:
        parts.append("tp-overlap")
    if c.overlap_ep:
        parts.append("ep-overlap")
    parts += layout_tags(c)
    return " ".join(parts)
