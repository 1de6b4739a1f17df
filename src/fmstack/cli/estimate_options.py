"""The options `fmstack estimate train` shares with its neighbours: the cluster (--model, --instance, --nodes /
--gpus), the resilience flags that shape the time to train, and how --nodes / --gpus become a node count."""

from __future__ import annotations

from typing import Any

import click

from fmstack.catalog.topology import check_cluster_gpus, resolve_instance
from fmstack.cli.common import catalog_option, choice, whole_nodes_hint
from fmstack.errors import InputError
from fmstack.perfmodel.config import (
    GRAD_DTYPE_CHOICES,
    MASTER_WEIGHTS_CHOICES,
    OPTIMIZER_STATE_CHOICES,
    REDUCE_DTYPE_CHOICES,
    reduce_dtype_of,
)


def cluster_options(func: Any) -> Any:
    """--model, --instance, --nodes / --gpus, --catalog."""
    for option in reversed(
        [
            click.option("--model", required=True, help="Zoo model name or a model YAML file."),
            click.option("--instance", required=True, help="Instance or UltraServer name from the catalog."),
            click.option(
                "--nodes", type=int, default=None, help="Number of instances (nodes) [1, or --gpus / GPUs per node]."
            ),
            click.option("--gpus", type=int, default=None, help="Number of GPUs (a multiple of GPUs per node)."),
        ]
    ):
        func = option(func)
    return catalog_option(func)


def resilience_options(func: Any) -> Any:
    """Checkpoint tier, FSx size, recovery mode, spares and failure rate for the time to train."""
    from fmstack.perfmodel.goodput import RecoveryMode

    for option in reversed(
        [
            click.option("--checkpoint-tier", default="fsx-persistent-1000", show_default=True,
                         help="Storage tier checkpoints are written to (catalog storage name)."),
            click.option("--fsx-capacity-tib", type=float, default=None,
                         help="FSx capacity in TiB [sized to keep GPUs fed and checkpoints fast]."),
            click.option("--recovery", type=click.Choice([m.value for m in RecoveryMode]),
                         default=RecoveryMode.checkpoint_restart.value, show_default=True, help="Recovery mode."),
            click.option("--spares", type=int, default=0, show_default=True, help="Spare nodes for auto-resume."),
            click.option("--mtbf-hours", type=float, default=None, help="Override the per-node MTBF in hours."),
            click.option("--failure-model", default="llama3", show_default=True,
                         help="Failure model (llama3, meta-rsc1, meta-rsc2)."),
            click.option("--sync-checkpoint", is_flag=True, help="Synchronous checkpoints (default: async)."),
        ]
    ):  # fmt: skip
        func = option(func)
    return func


RESILIENCE_FLAGS = ("checkpoint_tier", "fsx_capacity_tib", "recovery", "spares", "mtbf_hours", "failure_model",
                    "sync_checkpoint")  # fmt: skip
"""The parameters of :func:`resilience_options`: they shape the time to train, so they need ``--tokens``."""


def refuse_resilience_without_tokens() -> None:
    """A resilience flag given on the command line without ``--tokens`` would change nothing: say so."""
    ctx = click.get_current_context()
    for name in RESILIENCE_FLAGS:
        if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE:
            flag = name.replace("_", "-")
            raise InputError(flag, f"--{flag} shapes the time to train with checkpoints and failures; add --tokens N")


def resolve_nodes(nodes: int | None, gpus: int | None, gpus_per_node: int) -> int:
    if nodes is None and gpus is None:
        return 1
    if nodes is not None and gpus is not None and nodes * gpus_per_node != gpus:
        raise InputError("gpus", f"--gpus({gpus}) != --nodes({nodes}) * {gpus_per_node} GPUs per node")
    if gpus is not None:
        if gpus <= 0:
            raise InputError("gpus", f"must be a positive number of GPUs, got {gpus}")
        check_cluster_gpus(gpus)
        if gpus % gpus_per_node:
            raise InputError(
                "gpus",
                f"{gpus} is not a multiple of {gpus_per_node} GPUs per node{whole_nodes_hint(gpus, gpus_per_node)}",
            )
        return gpus // gpus_per_node
    assert nodes is not None
    return nodes


def gpus_per_node(cat: Any, instance: str) -> int:
    return int(resolve_instance(cat, instance).num_gpus)


LAYOUT_KEYS = (
    "optimizer_state_dtype", "master_weights", "fp8_param_gather", "grad_shard_buffer", "grad_dtype", "reduce_dtype",
)  # fmt: skip
"""The option names (and TrainConfig / SearchSpace / RLConfig fields) of :func:`layout_options`."""


def layout_values(options: dict[str, Any]) -> dict[str, Any]:
    """The storage layout the user gave, popped from a command's ``options`` (None = the flag left out)."""
    return {k: v for k in LAYOUT_KEYS if (v := options.pop(k, None)) is not None}


def layout_argv(cfg: Any) -> list[str]:
    """The :func:`layout_options` flags that give ``cfg``'s storage layout (a TrainConfig or an RLConfig), only where
    it differs from the default."""
    argv = ["--optimizer-state", cfg.optimizer_state_dtype] if cfg.optimizer_state_dtype != "fp32" else []
    # an RLConfig's None master is its backend's default (rl_config.train_master_weights); a TrainConfig's is fp32
    rl = not hasattr(cfg, "grad_bytes")
    given_master = cfg.master_weights is not None if rl else cfg.master_weights != "fp32"
    argv += ["--master-weights", cfg.master_weights] if given_master else []
    argv += ["--fp8-param-gather"] if cfg.fp8_param_gather else []
    argv += ["--grad-shard-buffer"] if cfg.grad_shard_buffer else []
    grad_dtype = cfg.grad_dtype if rl else ("bf16" if cfg.grad_bytes == 2 else "fp32")
    argv += ["--grad-dtype", grad_dtype] if grad_dtype != "fp32" else []
    reduce_dtype = cfg.reduce_dtype if rl else reduce_dtype_of(cfg)
    return argv + (["--reduce-dtype", reduce_dtype] if reduce_dtype == "bf16" else [])


def layout_options(func: Any) -> Any:
    """The optimizer-state and parameter storage layout (``estimate train``, ``plan train``, ``scale``, ``estimate rl``
    and ``plan rl``; TrainConfig's ``optimizer_state_dtype``, ``master_weights``, ``fp8_param_gather``,
    ``grad_shard_buffer``, and ``--grad-dtype`` as ``grad_bytes`` / ``reduce_bytes``). Defaults (None) leave the
    config's."""
    options = [
        click.option(
            "--optimizer-state",
            "optimizer_state_dtype",
            type=choice(OPTIMIZER_STATE_CHOICES),
            default=None,
            help="Adam's m and v: fp32 (8 B per parameter) or bf16 (4 B: Megatron-Core exp_avg_dtype / "
            "exp_avg_sq_dtype, Apex DistributedFusedAdam dtype) [fp32].",
        ),
        click.option(
            "--master-weights",
            type=choice(MASTER_WEIGHTS_CHOICES),
            default=None,
            help="The optimizer's copy of the weights: fp32 (4 B), remainder (2 B: the low 16 bits under the bf16 "
            "weight, store_param_remainders), none (bf16 weights updated in place), fp32-params (FSDP mixed precision: "
            "the sharded fp32 parameters are the master, no bf16 copy, gathered in bf16, reduced in fp32; fsdp / hsdp "
            "only) [fp32; estimate rl and plan rl: fp32-params on veRL's FSDP backend].",
        ),
        click.option(
            "--grad-dtype",
            type=choice(GRAD_DTYPE_CHOICES),
            default=None,
            help="Gradients kept for the optimizer: fp32 (4 B) or bf16 (2 B, reduced in bf16: Megatron-Core "
            "grad_reduce_in_fp32=False) [fp32].",
        ),
        click.option(
            "--reduce-dtype",
            type=choice(REDUCE_DTYPE_CHOICES),
            default=None,
            help="With --master-weights fp32-params: FSDP's reduce_dtype, the gradient reduce-scatter in fp32 (4 B per "
            "element on the wire) or bf16 (2 B, cast back to the fp32 parameters: MixedPrecisionPolicy "
            "reduce_dtype=bfloat16) [fp32].",
        ),
        click.option(
            "--fp8-param-gather",
            is_flag=True,
            default=None,
            help="With --precision fp8: FP8 weights (1 B) without the bf16 copy, gathered in FP8 (Megatron-Core "
            "fp8_param_gather) [off].",
        ),
        click.option(
            "--grad-shard-buffer",
            is_flag=True,
            default=None,
            help="With zero1: the reduce-scattered gradient shard in its own buffer next to the full one, as Apex "
            "DistributedFusedAdam with contiguous_grad_buffer (NeMo 24.07); a search applies it to its zero1 rows "
            "[off].",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func
