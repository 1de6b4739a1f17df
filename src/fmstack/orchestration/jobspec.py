"""JobSpec: one job description for the local, Slurm and Kubernetes launchers (docs/launch.md).

A YAML or TOML file validated by pydantic (unknown fields rejected), then resolved against the catalog: the instance
type fills in GPUs per node (a request above the instance's count is an error), EFA devices and memory. The resolved
job is what launchers render; nothing here touches a scheduler.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from fmstack.catalog import Catalog
from fmstack.catalog.topology import MAX_CLUSTER_GPUS
from fmstack.errors import InputError

# DNS-1123 label: valid as a Slurm job name and a Kubernetes object name; nothing a shell would interpret
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,48}[a-z0-9])?$")
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_TIME_LIMIT_MIN = 365 * 24 * 60
"""Longest ``time_limit_min``: 525,600 minutes (365 days). Slurm keeps a job's time limit as a 32-bit count of minutes
(``uint32_t time_limit`` in slurm.h; 0xfffffffe and 0xffffffff are NO_VAL and INFINITE, so 4,294,967,293 is the most
it can hold) and Kubernetes' activeDeadlineSeconds is an int64; a year is past any single allocation (long runs are
many: Llama 3 405B saw 466 job interruptions in a 54-day snapshot, Llama 3 paper sec. 3.3.4). Before session 20, 99999999999999 was rendered into ``--time``
and into activeDeadlineSeconds (6e15 s)."""


class _Strict(BaseModel):
    # strict: `nodes: true` used to render --nodes=1 and `steps: 2.5`... an integer field takes integers only, a
    # number field no booleans, a boolean field only true / false (pydantic's lax mode coerces all three); numbers
    # finite: `memory_gib: .inf` passed gt=0 and crashed the Kubernetes render (OverflowError), `backoff_s: .inf`
    # and `step_sleep_s: .inf` rendered `inf` into the scripts
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class Workload(_Strict):
    """The reference workload (``fmstack.workloads.train``) and its options."""

    model: Literal["tiny", "small", "medium"] = "tiny"
    parallel: Literal["ddp", "fsdp"] = "ddp"
    precision: Literal["fp32", "bf16"] = "fp32"
    steps: int = Field(default=100, gt=0)
    batch_size: int = Field(default=8, gt=0)
    seed: int = 0
    step_sleep_s: float = Field(default=0.0, ge=0)
    extra_args: list[str] = Field(default_factory=list, description="more arguments, passed through quoted")


_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


class Checkpoint(_Strict):
    """Two tiers: ``location`` (fast, local or shared FS) and optional ``durable`` (path or fsspec URL)."""

    location: str
    durable: str | None = None
    interval_steps: int = Field(default=10, gt=0)
    keep_last: int = Field(default=3, gt=0)
    storage_options: dict[str, Any] = Field(default_factory=dict)
    sync: bool = Field(default=False, description="commit each save before training on (lose <= 1 interval)")
    stop_warning_s: int | None = Field(
        default=None, ge=0, le=65535,
        description="Slurm: seconds before the time limit at which the job checkpoints and stops, then requeues "
        "(default 120, at most half the limit; 0: none)",
    )  # fmt: skip
    pvc: str | None = Field(
        default=None,
        description="Kubernetes: PersistentVolumeClaim (e.g. FSx for Lustre) mounted at ``location`` in every pod",
    )

    @field_validator("location")
    @classmethod
    def _location_not_empty(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must be a path")
        return v

    @field_validator("pvc")
    @classmethod
    def _pvc_is_an_object_name(cls, v: str | None) -> str | None:
        # a claim's name is a DNS-1123 subdomain (Kubernetes docs, "Object Names and IDs")
        if v is not None and (len(v) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(v)):
            raise ValueError(
                "must be a PersistentVolumeClaim name: lowercase letters, digits, '-' and '.', starting and ending "
                "with a letter or digit, at most 253 characters"
            )
        return v

    @model_validator(mode="after")
    def _pvc_mounts_at_an_absolute_path(self) -> Checkpoint:
        if self.pvc is not None and not self.location.startswith("/"):
            raise ValueError(f"location {self.location!r} must be an absolute path: the claim is mounted there")
        return self


class Retry(_Strict):
    """Restarts: Slurm requeue (node failure or these exit codes), local retries with exponential backoff,
    Kubernetes JobSet failurePolicy.maxRestarts."""

    max_restarts: int = Field(default=0, ge=0)
    backoff_s: float = Field(default=5.0, ge=0)
    requeue_exit_codes: list[int] = Field(default_factory=list)

    @field_validator("requeue_exit_codes")
    @classmethod
    def _exit_codes(cls, v: list[int]) -> list[int]:
        # an exit status is 0..255 (POSIX wait: the low 8 bits), and 0 is success: requeueing on it would rerun a
        # job that finished
        bad = [c for c in v if not 1 <= c <= 255]
        if bad:
            raise ValueError(f"{bad}: exit codes that requeue must be 1..255 (0 is success, 255 the largest status)")
        return v


# a label key: optional DNS-subdomain prefix and '/', then a name of at most 63 characters (Kubernetes docs, "Labels
# and Selectors", syntax and character set)
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


class Topology(_Strict):
    """Kueue topology-aware scheduling (TAS) for the job's pods (Kubernetes with ``queue``; ignored by Slurm).

    Default ``none``: no annotation. Kueue gives any PodSet with a ``podset-required-topology`` or
    ``podset-preferred-topology`` annotation a topology request, and a request skips every ResourceFlavor without
    ``spec.topologyName`` ("Flavor ... does not support TopologyAwareScheduling": kueue
    pkg/scheduler/flavorassigner/tas_flavorassigner.go, checkPodSetAndFlavorMatchForTAS). "preferred" relaxes only
    the domain (climb levels, else spread), not the need for a TAS flavor: on a ClusterQueue without one the
    workload is never admitted (kueue.sigs.k8s.io docs, concepts/topology_aware_scheduling; shared/reference/
    orchestration-02 §5). A ClusterQueue whose flavors are all TAS applies TAS to unannotated workloads anyway."""

    mode: Literal["none", "preferred", "required"] = "none"
    level: str = Field(
        default="topology.k8s.aws/network-node-layer-3",
        description="node label of the Topology level (AWS: topology.k8s.aws/network-node-layer-1..3)",
    )

    @field_validator("level")
    @classmethod
    def _level_is_a_label_key(cls, v: str) -> str:
        if not _LABEL_KEY.fullmatch(v):
            raise ValueError("must be a node label key such as topology.k8s.aws/network-node-layer-3")
        return v


class KubernetesOptions(_Strict):
    """Kubernetes-only settings (ignored by Slurm and local)."""

    hugepages_2mi_mib: int | None = Field(
        default=None,
        ge=0,
        strict=True,
        description="2 MiB huge pages each pod requests, MiB; default 5120 per whole node with EFA, scaled with the "
        "GPU share; 0: none (nodes without pre-allocated huge pages)",
    )

    @field_validator("hugepages_2mi_mib")
    @classmethod
    def _whole_pages(cls, v: int | None) -> int | None:
        if v is not None and v % 2:
            raise ValueError("must be a whole number of 2 MiB pages (an even number of MiB), or 0 for none")
        return v

    compute_domain: str = Field(
        default="auto",
        strict=True,
        description="multi-node NVLink (GB200/GB300) through an NVIDIA DRA ComputeDomain: auto (one per job when its "
        "whole-node pods span more than one node of an instance whose NVLink domain is larger than a node), none, "
        "or the name of the channel ResourceClaimTemplate of an existing ComputeDomain (its "
        "spec.channel.resourceClaimTemplate.name) for the pods to claim",
    )

    @field_validator("compute_domain")
    @classmethod
    def _compute_domain(cls, v: str) -> str:
        # a ResourceClaimTemplate name is a DNS-1123 subdomain (Kubernetes docs, "Object Names and IDs")
        if v not in ("auto", "none") and (len(v) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(v)):
            raise ValueError(
                "must be auto, none or a ResourceClaimTemplate name: lowercase letters, digits, '-' and '.', "
                "starting and ending with a letter or digit, at most 253 characters"
            )
        return v


class SlurmOptions(_Strict):
    """Slurm-only settings (ignored by Kubernetes and local)."""

    segment: int | str = Field(
        default="auto",
        description="sbatch --segment for instances whose NVLink domain spans nodes (GB200/GB300 NVL72, Slurm "
        "topology/block, Slurm >= 24.05): auto (each segment of the job's nodes in one NVLink domain: the job's "
        "nodes, or the largest divisor of them that fits one domain), none, or a number of nodes that divides the "
        "job's nodes and fits one domain",
    )

    @field_validator("segment", mode="before")
    @classmethod
    def _segment(cls, v: Any) -> Any:
        if v in ("auto", "none") or (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
            return v
        raise ValueError("must be auto, none or a number of nodes >= 1")


class Plan(_Strict):
    """Parallel degrees from ``fmstack plan``; their product must equal the job's GPUs (or processes)."""

    tp: int = Field(default=1, gt=0)
    pp: int = Field(default=1, gt=0)
    dp: int = Field(default=1, gt=0)


class JobSpec(_Strict):
    """What to run, where, on how much."""

    name: str
    workload: Workload | None = None
    command: list[str] | None = Field(default=None, description="argv run by torchrun instead of the workload")
    nodes: int = Field(default=1, gt=0, le=MAX_CLUSTER_GPUS, description="at most 2^20, the most one cluster holds")
    gpus_per_node: int | None = Field(default=None, ge=0)
    memory_gib: float | None = Field(default=None, gt=0, description="Kubernetes: memory each pod requests")
    procs_per_node: int | None = Field(default=None, gt=0, description="defaults to gpus_per_node, or 1 on CPU")
    instance: str | None = None
    partition: str | None = None
    queue: str | None = Field(default=None, description="Kueue LocalQueue name (Kubernetes)")
    topology: Topology = Field(default_factory=Topology)
    kubernetes: KubernetesOptions = Field(default_factory=KubernetesOptions)
    slurm: SlurmOptions = Field(default_factory=SlurmOptions)
    namespace: str = "default"
    time_limit_min: int = Field(default=60, gt=0)
    exclusive: bool = True
    array: str | None = Field(
        default=None,
        description="Slurm array range, e.g. 0-3 or 1-8%2; each task of the reference workload checkpoints under "
        "<location>/task-<id> and <durable>/task-<id> with seed + id",
    )
    container_mounts: list[str] = Field(
        default_factory=list,
        description="Slurm with image: more pyxis bind mounts, PATH (same path inside) or SRC:DST, optionally :ro",
    )
    env: dict[str, str] = Field(default_factory=dict)
    image: str | None = None
    python: str = Field(default="python3", description="interpreter on the compute nodes")
    log_dir: str = "."
    checkpoint: Checkpoint | None = None
    retry: Retry = Field(default_factory=Retry)
    plan: Plan | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError(f"{v!r} must be a DNS-1123 label: lowercase letters, digits and '-', 1-50 characters")
        return v

    @field_validator("time_limit_min")
    @classmethod
    def _time_limit(cls, v: int) -> int:
        if v > MAX_TIME_LIMIT_MIN:
            raise ValueError(
                f"{v:,} minutes; allowed: 1 to {MAX_TIME_LIMIT_MIN:,} (365 days, past any single allocation; Slurm "
                "keeps the limit as 32-bit minutes)"
            )
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        bad = [k for k in v if not _ENV_KEY.match(k)]
        if bad:
            raise ValueError(f"variable names {bad} must match [A-Za-z_][A-Za-z0-9_]*")
        return v

    @field_validator("container_mounts")
    @classmethod
    def _container_mounts(cls, v: list[str]) -> list[str]:
        for m in v:
            parse_mount(m)  # raises ValueError naming the mount
        return v

    @field_validator("array")
    @classmethod
    def _array(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if not re.fullmatch(r"\d+(-\d+)?(:\d+)?(,\d+(-\d+)?)*(%\d+)?", v):
            raise ValueError(f"{v!r} is not a Slurm array range like 0-3, 1,3,5 or 1-8%2")
        for lo, hi in re.findall(r"(\d+)-(\d+)", v.split("%")[0]):
            if int(lo) > int(hi):
                raise ValueError(f"{v!r}: the range {lo}-{hi} runs backwards (sbatch wants first <= last)")
        return v


def parse_mount(text: str) -> tuple[str, str, str]:
    """``PATH``, ``SRC:DST`` or ``SRC:DST:ro`` -> (src, dst, flags): a pyxis ``--container-mounts`` entry
    (github.com/NVIDIA/pyxis, ``SRC:DST[:FLAGS]``, entries separated by ','), both paths absolute."""
    parts = text.split(":")
    if len(parts) == 1:
        parts = [text, text]
    if len(parts) > 3 or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
        raise ValueError(f"{text!r} must be PATH, SRC:DST or SRC:DST:ro (paths contain no ':')")
    src, dst = parts[0], parts[1]
    if not (src.startswith("/") and dst.startswith("/")) or "," in text or any(c.isspace() for c in text):
        raise ValueError(f"{text!r}: mount paths must be absolute, without ',' or spaces")
    return src, dst, parts[2] if len(parts) == 3 else ""


@dataclass(frozen=True, kw_only=True, slots=True)
class ResolvedJob:
    """A JobSpec with the catalog's facts filled in: what launchers render."""

    spec: JobSpec
    gpus_per_node: int
    procs_per_node: int
    efa_devices: int
    """EFA interfaces to request per node (0 if the instance has no EFA)."""
    memory_gib: float | None
    log_dir: str
    """Absolute log directory."""
    node_gpus: int = 0
    """GPUs of the whole instance (0 without an instance): a job with fewer shares the node."""
    node_vcpus: int = 0
    """vCPUs of the whole instance (0 without an instance)."""
    nvlink_domain_gpus: int = 0
    """GPUs in the instance's NVLink domain (catalog ``nvlink_domain_gpus``; 0 without an instance): above
    ``node_gpus`` (p6e-gb200: 72 > 4) the domain spans nodes (multi-node NVLink)."""

    @property
    def world_size(self) -> int:
        return self.spec.nodes * self.procs_per_node


def _describe(exc: ValidationError) -> tuple[str, str]:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"]) or "(spec)"
    if err["type"] == "extra_forbidden":
        return loc, "unknown field; see docs/launch.md for the JobSpec fields"
    if err["type"] == "missing":
        return loc, "missing required field"
    given = err.get("input")
    hint = ""
    if err["type"] == "int_type" and isinstance(given, str):
        hint = "; write a whole number without quotes"
    elif err["type"] == "float_type" and isinstance(given, str):
        hint = "; write a number without quotes (YAML 1.1 reads 1e1 as text: write 10 or 1.0e+1)"
    elif err["type"] == "string_type" and isinstance(given, int | float) and not isinstance(given, bool):
        hint = "; quote it as written in the file (YAML read it as a number)"
    return loc, f"{err['msg']} (given {given!r}){hint}"


def parse_jobspec(data: Any, where: str = "jobspec") -> JobSpec:
    if data is None:  # an empty file (or only comments): "got NoneType" said nothing
        raise InputError(where, "is empty; the smallest JobSpec is 'name: demo' and 'workload: {model: tiny}'")
    if not isinstance(data, dict):
        raise InputError(where, f"a JobSpec must be a mapping, got {type(data).__name__}")
    try:
        spec = JobSpec.model_validate(data)
    except ValidationError as exc:
        field, msg = _describe(exc)
        raise InputError(f"{where} field '{field}'", msg) from None
    if (spec.workload is None) == (spec.command is None):
        raise InputError(f"{where} field 'workload'", "give exactly one of 'workload' or 'command'")
    if spec.command is not None and not spec.command:
        raise InputError(f"{where} field 'command'", "must not be empty")
    return spec


def load_jobspec(path: Path) -> JobSpec:
    """Read a JobSpec from YAML (.yaml/.yml) or TOML (.toml)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(str(path), f"cannot read JobSpec: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise InputError(str(path), f"not UTF-8 text (byte {exc.start}); expected a JobSpec in YAML or TOML") from None
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
    except (yaml.YAMLError, tomllib.TOMLDecodeError) as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        raise InputError(str(path), f"not valid {'TOML' if path.suffix == '.toml' else 'YAML'}{line}") from None
    except RecursionError:  # the parsers recurse per nesting level: a: [[[[...]]]] 100,000 deep
        raise InputError(str(path), "nests lists or mappings too deeply to read") from None
    return parse_jobspec(data, str(path))


def resolve(spec: JobSpec, catalog: Catalog) -> ResolvedJob:
    """Fill in from the catalog and check the arithmetic (GPUs per node, plan degrees)."""
    efa, memory, node_gpus, node_vcpus, nvlink_gpus = 0, None, 0, 0, 0
    gpus = spec.gpus_per_node
    if spec.instance is not None:
        inst = catalog.instance(spec.instance)
        if gpus is None:
            gpus = inst.num_gpus
        elif gpus > inst.num_gpus:
            raise InputError(
                "gpus_per_node", f"{gpus} > {inst.num_gpus}, the GPUs of one {inst.name}; allowed: 0..{inst.num_gpus}"
            )
        efa = inst.network_interfaces if inst.network.startswith("efa") else 0
        memory, node_gpus, node_vcpus = inst.host_memory_gib, inst.num_gpus, inst.vcpus
        nvlink_gpus = inst.nvlink_domain_gpus
        if spec.memory_gib is not None and spec.memory_gib > memory:
            raise InputError("memory_gib", f"{spec.memory_gib:g} > {memory:g}, the memory of one {inst.name}")
    gpus = gpus or 0
    procs = spec.procs_per_node or gpus or 1
    if gpus and procs > gpus:
        raise InputError("procs_per_node", f"{procs} > gpus_per_node({gpus}): one process per GPU at most")
    if spec.plan is not None:
        p = spec.plan
        world = spec.nodes * procs
        if p.tp * p.pp * p.dp != world:
            raise InputError(
                "plan",
                f"tp({p.tp}) * pp({p.pp}) * dp({p.dp}) = {p.tp * p.pp * p.dp} != "
                f"nodes({spec.nodes}) * procs_per_node({procs}) = {world}",
            )
        if spec.workload is not None and (p.tp > 1 or p.pp > 1):
            raise InputError(
                "plan",
                f"tp({p.tp}) pp({p.pp}): the reference workload trains data parallel only ({spec.workload.parallel}); "
                "run your own program with `command:` (it reads FMSTACK_TP, FMSTACK_PP, FMSTACK_DP) or use tp 1, pp 1",
            )
    return ResolvedJob(
        spec=spec,
        gpus_per_node=gpus,
        procs_per_node=procs,
        efa_devices=efa,
        memory_gib=memory,
        log_dir=os.path.abspath(spec.log_dir),
        node_gpus=node_gpus,
        node_vcpus=node_vcpus,
        nvlink_domain_gpus=nvlink_gpus,
    )


def workload_argv(job: ResolvedJob) -> list[str]:
    """The program torchrun runs on every node: ``-m fmstack.workloads.train ...`` or the user's command."""
    spec = job.spec
    if spec.command is not None:
        return list(spec.command)
    w = spec.workload
    assert w is not None  # parse_jobspec guarantees one of the two
    argv = ["-m", "fmstack.workloads.train", "--model", w.model, "--parallel", w.parallel, "--precision", w.precision]
    argv += ["--steps", str(w.steps), "--batch-size", str(w.batch_size), "--seed", str(w.seed)]
    if w.step_sleep_s:
        argv += ["--step-sleep-s", repr(w.step_sleep_s)]
    ck = spec.checkpoint
    if ck is not None:
        argv += ["--ckpt-dir", os.path.abspath(ck.location), "--ckpt-interval", str(ck.interval_steps)]
        argv += ["--ckpt-keep", str(ck.keep_last)]
        if ck.sync:
            argv.append("--ckpt-sync")
        if ck.durable:
            argv += ["--ckpt-durable", ck.durable]
        if ck.storage_options:
            import json

            argv += ["--storage-options", json.dumps(ck.storage_options, sort_keys=True)]
    return argv + list(w.extra_args)
