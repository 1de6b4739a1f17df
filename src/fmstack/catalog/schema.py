"""Typed catalog entries (pydantic at the file boundary).

Every entry carries ``sources``: a mapping from field name to the citation for that value. A test
checks that every numeric field that is set has one. Units are in the field names: GB = 1e9 bytes,
GiB = 2**30 bytes, bandwidth in GB/s, TFLOP/s dense (no sparsity) unless a name says otherwise.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

GIB_PER_GB = 1e9 / 2**30


class Entry(BaseModel):
    """Common fields of every catalog entry."""

    # YAML's .inf passed every `gt=0` check (a GPU of .inf TFLOP/s priced a step at 0 s): values must be finite
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: str = Field(min_length=1)
    aliases: tuple[str, ...] = ()
    description: str = ""
    sources: dict[str, str] = Field(default_factory=dict)


def _network_from_gbit(data: object) -> object:
    """``network_gbit_per_s`` (Gb/s, as AWS and NIC vendors quote links: p5 "3,200 Gbps") is accepted in place of
    ``network_bw_gbps`` (GB/s) and converted (/ 8); giving both is an error."""
    if isinstance(data, dict) and "network_gbit_per_s" in data:
        data = dict(data)
        gbit = data.pop("network_gbit_per_s")
        field = {"field": "network_gbit_per_s"}  # named by the loader's message (the error has no location)
        if "network_bw_gbps" in data:
            raise PydanticCustomError(
                "value_error", "give network_bw_gbps (GB/s) or network_gbit_per_s (Gb/s), not both", field
            )
        if not isinstance(gbit, (int, float)) or isinstance(gbit, bool) or gbit <= 0:
            raise PydanticCustomError("value_error", f"must be a number > 0, got {gbit!r}", field)
        data["network_bw_gbps"] = gbit / 8.0
    return data


class GPU(Entry):
    """One accelerator: dense peak throughput by precision, HBM and NVLink."""

    kind: Literal["gpu"] = "gpu"
    vendor: str = "NVIDIA"
    architecture: str
    bf16_dense_tflops: float = Field(gt=0)
    fp16_dense_tflops: float = Field(gt=0)
    fp8_dense_tflops: float | None = Field(default=None, gt=0)
    fp4_dense_tflops: float | None = Field(default=None, gt=0)
    tf32_dense_tflops: float | None = Field(default=None, gt=0)
    fp32_tflops: float | None = Field(default=None, gt=0)
    hbm_gb: float = Field(gt=0, description="marketed HBM capacity in GB")
    hbm_total_mib: float | None = Field(
        default=None, gt=0, description="total device memory as NVML / nvidia-smi reports it, MiB"
    )
    hbm_type: str
    hbm_bw_tbps: float = Field(gt=0, description="HBM bandwidth in TB/s (1e12 bytes/s)")
    nvlink_generation: int | None = None
    nvlink_bw_gbps: float | None = Field(default=None, gt=0, description="per GPU, both directions, GB/s")
    tdp_w: float = Field(gt=0)

    @property
    def hbm_gib(self) -> float:
        """Device memory in GiB: what NVML reports where known, else the marketed GB converted.

        Marketed sizes are not SI gigabytes: an "80 GB" H100 has 81,559 MiB (79.6 GiB, 85.5 GB), so
        converting 80 GB would lose 5 GiB of a GPU that training plans fill to the last GiB.
        """
        if self.hbm_total_mib is not None:
            return self.hbm_total_mib / 1024.0
        return self.hbm_gb * GIB_PER_GB

    @property
    def hbm_bw_gbps(self) -> float:
        return self.hbm_bw_tbps * 1000.0

    def peak_tflops(self, precision: str) -> float:
        """Dense peak TFLOP/s for a precision name (bf16, fp16, fp8, fp4, tf32, fp32)."""
        value = {
            "bf16": self.bf16_dense_tflops,
            "fp16": self.fp16_dense_tflops,
            "fp8": self.fp8_dense_tflops,
            "fp4": self.fp4_dense_tflops,
            "tf32": self.tf32_dense_tflops,
            "fp32": self.fp32_tflops,
        }.get(precision.lower())
        if value is None:
            from fmstack.errors import InputError

            known = [p for p in ("bf16", "fp16", "fp8", "fp4", "tf32", "fp32") if self._has(p)]
            raise InputError("precision", f"{self.name} has no {precision!r} peak; allowed: {', '.join(known)}")
        return value

    def _has(self, precision: str) -> bool:
        return getattr(self, f"{precision}_dense_tflops", None) is not None or (
            precision == "fp32" and self.fp32_tflops is not None
        )


class Instance(Entry):
    """One EC2 instance type (or any node): its GPUs, host, network and local storage."""

    kind: Literal["instance"] = "instance"
    gpu: str
    num_gpus: int = Field(gt=0)
    gpu_memory_gb: float = Field(gt=0, description="total HBM of the instance as published")
    vcpus: int = Field(gt=0)
    host_memory_gib: float = Field(gt=0)
    host_to_device_gbps: float | None = Field(
        default=None, gt=0, description="host-to-device bandwidth per GPU, GB/s per direction (PCIe or NVLink-C2C)"
    )
    nvlink_generation: int | None = None
    nvlink_bw_aggregate_tbps: float | None = Field(default=None, gt=0)
    nvlink_domain_gpus: int = Field(gt=0, description="GPUs that share one NVLink domain")
    network: str = Field(description="fabric name from the catalog (e.g. efa-v2)")
    network_bw_gbps: float = Field(
        gt=0, description="aggregate scale-out bandwidth per node, GB/s (or give network_gbit_per_s in Gb/s)"
    )
    network_interfaces: int = Field(default=1, gt=0)
    local_nvme_tb: float | None = Field(default=None, ge=0, description="local NVMe capacity, TB; unset = not listed")
    local_nvme_devices: int | None = Field(default=None, ge=0)
    price_per_hour_usd: float | None = Field(default=None, gt=0)
    price_as_of: str | None = None
    ultraserver: str | None = None

    _gbit = model_validator(mode="before")(_network_from_gbit)

    @model_validator(mode="after")
    def _domain_holds_node(self) -> Instance:
        if self.nvlink_domain_gpus % self.num_gpus and self.num_gpus % self.nvlink_domain_gpus:
            raise ValueError(
                f"nvlink_domain_gpus({self.nvlink_domain_gpus}) and num_gpus({self.num_gpus}) must divide one another"
            )
        return self

    @property
    def network_bw_gbps_per_gpu(self) -> float:
        return self.network_bw_gbps / self.num_gpus


class UltraServer(Entry):
    """Several instances joined into one NVLink domain (e.g. GB200 NVL72).

    A cluster named by the UltraServer takes these values over its instance's (``topology.ultraserver_instance``);
    the whole-UltraServer ones are split per instance there. The loader checks ``num_gpus`` against the instances
    and ``hbm_aggregate_tb`` against the GPUs.
    """

    kind: Literal["ultraserver"] = "ultraserver"
    instance: str
    num_instances: int = Field(gt=0)
    num_gpus: int = Field(
        gt=0, description="GPUs of the UltraServer = its NVLink domain (num_instances x the instance's)"
    )
    hbm_aggregate_tb: float = Field(gt=0, description="HBM of the whole UltraServer, TB")
    network: str = Field(description="scale-out fabric name from the catalog")
    network_bw_gbps: float = Field(
        gt=0, description="scale-out bandwidth of the whole UltraServer, GB/s (or give network_gbit_per_s in Gb/s)"
    )
    price_per_hour_usd: float | None = Field(
        default=None,
        gt=0,
        description="per UltraServer-hour (the model counts cost per instance: this / num_instances)",
    )
    price_as_of: str | None = None

    _gbit = model_validator(mode="before")(_network_from_gbit)


class Fabric(Entry):
    """An interconnect: NVLink generation or EFA generation, with the collective-model parameters."""

    kind: Literal["fabric"] = "fabric"
    scope: Literal["scale-up", "scale-out"]
    generation: str
    bw_per_gpu_gbps: float | None = Field(default=None, gt=0, description="per GPU, one direction, GB/s")
    node_bw_gbps: float | None = Field(
        default=None,
        gt=0,
        description="scale-out: aggregate bandwidth per node of this generation's reference node, GB/s",
    )
    node_gpus: int | None = Field(default=None, gt=0, description="scale-out: GPUs of that reference node")
    latency_us: float = Field(
        gt=0, description="alpha: per-step latency of a collective on this fabric (NCCL Simple protocol)"
    )
    bw_efficiency: float = Field(gt=0, le=1, description="achievable fraction of line rate for large messages")
    max_domain_gpus: int | None = Field(default=None, gt=0)
    nvls: bool = False
    nvls_speedup: float = Field(default=1.0, ge=1.0, description="all-reduce speedup with NVLink SHARP")
    collective_speedup: float = Field(default=1.0, gt=0, description="relative to the previous generation")
    ll_latency_us: float | None = Field(
        default=None, gt=0, description="per-step latency with NCCL's low-latency (LL) protocol, small messages"
    )
    ll_bw_fraction: float | None = Field(
        default=None, gt=0, le=1, description="fraction of the large-message bandwidth the LL protocol reaches"
    )
    nvls_latency_us: float | None = Field(default=None, gt=0, description="fixed latency of an NVLS all-reduce")
    pipeline_stage_us: float | None = Field(
        default=None, ge=0, description="per-stage chunk overhead of pipelined (tree, NVLS) algorithms"
    )

    @property
    def node_bw_gbps_per_gpu(self) -> float | None:
        """Scale-out bandwidth per GPU on this generation's reference node (None: not given)."""
        if self.node_bw_gbps is None or self.node_gpus is None:
            return None
        return self.node_bw_gbps / self.node_gpus


class StorageTier(Entry):
    """A storage tier: local NVMe, FSx for Lustre deployment type or S3."""

    kind: Literal["storage"] = "storage"
    tier: Literal["nvme", "lustre", "s3"]
    throughput_mbps_per_tib: float | None = Field(default=None, gt=0, description="MB/s per TiB provisioned")
    burst_mbps_per_tib: float | None = Field(default=None, gt=0)
    read_gbps_per_device: float | None = Field(default=None, gt=0)
    write_gbps_per_device: float | None = Field(default=None, gt=0)
    put_per_s_per_prefix: float | None = Field(default=None, gt=0)
    get_per_s_per_prefix: float | None = Field(default=None, gt=0)
    min_capacity_tib: float | None = Field(default=None, gt=0)
    capacity_step_tib: float | None = Field(default=None, gt=0)
    latency_ms: float | None = Field(default=None, gt=0)
    price_per_gb_month_usd: float | None = Field(default=None, gt=0)
    disk_read_mbps_per_tib: float | None = Field(
        default=None, gt=0, description="sustained (disk) read MB/s per TiB; bounds reads larger than the cache"
    )
    disk_write_mbps_per_tib: float | None = Field(
        default=None, gt=0, description="sustained (disk) write MB/s per TiB; bounds multi-TB checkpoint writes"
    )
    client_gbps_per_node: float | None = Field(
        default=None, gt=0, description="what one node's client can drive, GB/s (below the NIC line rate)"
    )
    part_size_mib: float | None = Field(default=None, gt=0, description="multipart upload part size (S3), MiB")


class MoE(BaseModel):
    """Mixture-of-experts part of a model."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    num_experts: int = Field(gt=0)
    top_k: int = Field(gt=0)
    expert_ffn_hidden_size: int = Field(gt=0)
    num_shared_experts: int = Field(default=0, ge=0)
    first_dense_layers: int = Field(default=0, ge=0, description="leading layers with a dense FFN")
    dense_ffn_hidden_size: int | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _k_le_n(self) -> MoE:
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k({self.top_k}) > num_experts({self.num_experts})")
        return self


class MLA(BaseModel):
    """Multi-head latent attention (DeepSeek-V2/V3) dimensions."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    q_lora_rank: int | None = Field(default=None, gt=0)
    kv_lora_rank: int = Field(gt=0)
    qk_nope_head_dim: int = Field(gt=0)
    qk_rope_head_dim: int = Field(gt=0)
    v_head_dim: int = Field(gt=0)


class ModelArch(Entry):
    """A transformer's architecture numbers; parameter counts are computed, not typed in."""

    kind: Literal["model"] = "model"
    family: str
    num_layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    ffn_hidden_size: int = Field(gt=0)
    num_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int | None = Field(default=None, gt=0)
    vocab_size: int = Field(gt=0)
    max_seq_len: int = Field(gt=0)
    mlp: Literal["gelu", "swiglu"] = "swiglu"
    biases: bool = False
    position: Literal["learned", "rope"] = "rope"
    tied_embeddings: bool = False
    dropout: bool = False
    """Trained with dropout (GPT-3 / Megatron GPT): stores dropout masks (Korthikanti et al. 2022)."""
    moe: MoE | None = None
    mla: MLA | None = None
    published_params_b: float | None = Field(default=None, gt=0)
    published_active_params_b: float | None = Field(default=None, gt=0)
    num_nextn_predict_layers: int = Field(default=0, ge=0)
    """Multi-token-prediction modules shipped with the checkpoint (Hugging Face ``num_nextn_predict_layers``;
    DeepSeek-V3: 1), usable as the draft of MTP speculative decoding; not counted in the parameters."""

    @model_validator(mode="after")
    def _heads(self) -> ModelArch:
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads({self.num_heads}) must be a multiple of num_kv_heads({self.num_kv_heads})")
        if self.head_dim is None and self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size({self.hidden_size}) not divisible by num_heads({self.num_heads}); set head_dim"
            )
        return self

    @property
    def head_dim_eff(self) -> int:
        return self.head_dim if self.head_dim is not None else self.hidden_size // self.num_heads

    @property
    def is_moe(self) -> bool:
        return self.moe is not None


AnyEntry = GPU | Instance | UltraServer | Fabric | StorageTier | ModelArch

KINDS: dict[str, type[Entry]] = {
    "gpu": GPU,
    "instance": Instance,
    "ultraserver": UltraServer,
    "fabric": Fabric,
    "storage": StorageTier,
    "model": ModelArch,
}
