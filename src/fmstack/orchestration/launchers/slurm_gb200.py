"""Multi-node NVLink (MNNVL) on Slurm: ``--segment`` for GB200/GB300 NVL72 racks, the NCCL variables, the IMEX duty.

A p6e-gb200.36xlarge has 4 GPUs; its NVLink domain is the rack, 72 GPUs on 18 nodes (one u-p6e-gb200x72
UltraServer; catalog ``nvlink_domain_gpus`` 72 > ``num_gpus`` 4). Slurm sees racks through the topology/block plugin
(topology.conf ``BlockName=<rack> Nodes=<its nodes>``, ``BlockSizes=<nodes per rack>``; topology.conf(5)); AWS
ParallelCluster 3.14, AWS PCS and SageMaker HyperPod configure one block per UltraServer. A job asks for its nodes in segments with
``sbatch --segment=N``: every segment of N nodes is placed in one block, the node count must be divisible by N
(sbatch(1)). ``--segment`` and ``--exclusive=topo`` came with Slurm 24.05 (SchedMD/slurm CHANGELOG/slurm-24.05.md,
24.05.0rc1: "Add --segment to job allocation to be used in topology/block"); an older sbatch refuses the
directive, so :func:`check_sbatch` refuses it first with the way out.

What ``slurm.segment: auto`` (the default) renders, for an instance whose NVLink domain spans nodes and a job of
two or more nodes (``per`` = nvlink_domain_gpus / GPUs per node, 18 on p6e-gb200):

- nodes <= per: no ``--segment`` (a comment says why): topology/block already places a job that fits one block in
  one block (it picks the smallest block level that holds the job, ``ROUNDUP(nodes, BlockSizes[0])`` in
  ``eval_nodes_block.c``; SchedMD's topology guide: "If all nodes fit within a single segment, this option has no
  effect"), and leaving the directive out keeps such jobs submittable on a Slurm before 24.05;
- nodes > per: the largest divisor of nodes that is <= per (36 -> 18, 20 -> 10, 24 -> 12), said in a comment when
  it is below per; no divisor above 1 (a prime such as 19 or 37): no ``--segment`` and a comment saying so.

Above one rack this is the rule NVIDIA's Megatron-Bridge performance scripts use for GB200 (``slurm_executor``: the
largest divisor of nodes in 18..1; at or below 18 nodes they pass segment = nodes, which changes nothing). ``none`` renders no ``--segment``; an int is checked
(divides the nodes, at most per). Whatever the segment, a job of two or more nodes on such an instance gets
``NCCL_MNNVL_ENABLE=1`` and ``NCCL_NVLS_ENABLE=1`` (:data:`k8s_gb200.NCCL_ENV`, as AWS's GB200 sample sets them; a
value in the JobSpec's env wins) and a comment block naming what the cluster's Prolog must do for IMEX.

IMEX: GPUs on different nodes map each other's memory only through the nvidia-imex daemon, which serves the nodes
listed in its ``nodes_config.cfg`` (``IMEX_NODE_CONFIG_FILE``), and through an IMEX channel device
(``/dev/nvidia-caps-imex-channels/channelN``) in the job (NVIDIA IMEX guide, "Deployment Models"). On Slurm a
Prolog writes the job's node addresses there and restarts the daemon before the job starts (AWS PCS user guide,
"Configure UltraServer instances"; Azure/cyclecloud-slurm ``azure-slurm-install/imex_prolog.sh``); Slurm's
``switch/nvidia_imex`` plugin (24.05) gives each job a channel. A batch script cannot do this itself: it runs as
the user, on one node, after the allocation.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fmstack.errors import InputError
from fmstack.orchestration.jobspec import ResolvedJob
from fmstack.orchestration.launchers.k8s_gb200 import NCCL_ENV, multi_node_nvlink

SEGMENT_SINCE = (24, 5)
"""The Slurm release whose sbatch knows ``--segment`` (CHANGELOG/slurm-24.05.md)."""
SEGMENT_DIRECTIVE = "#SBATCH --segment="


@dataclass(frozen=True, kw_only=True, slots=True)
class Segment:
    """The ``--segment`` size (None: no directive) and a comment explaining a choice below the domain's nodes."""

    size: int | None
    note: str = ""


def nodes_per_domain(job: ResolvedJob) -> int:
    """Nodes in one NVLink domain (18 for p6e-gb200: 72 GPUs / 4 per node); 1 without multi-node NVLink."""
    return job.nvlink_domain_gpus // job.node_gpus if multi_node_nvlink(job) else 1


def _divisors(n: int, at_most: int) -> list[int]:
    return [d for d in range(1, min(n, at_most) + 1) if n % d == 0]


def segment(job: ResolvedJob) -> Segment:
    """The segment size for ``job`` per ``slurm.segment`` (see the module docstring); InputError for an int that
    does not divide the nodes, exceeds one domain's nodes, or is given for an instance without multi-node NVLink."""
    choice = job.spec.slurm.segment
    nodes = job.spec.nodes
    if choice == "none":
        return Segment(size=None)
    if not multi_node_nvlink(job):
        if choice == "auto":
            return Segment(size=None)
        why = (
            f"{job.spec.instance} (nvlink_domain_gpus {job.nvlink_domain_gpus}, not above one node's "
            f"{job.node_gpus} GPUs) has no NVLink domain of several nodes"
            if job.node_gpus
            else "a job without an instance (or without GPUs) has no NVLink domain to segment by"
        )
        raise InputError("slurm.segment", f"{choice}: {why}; allowed: auto or none")
    per = nodes_per_domain(job)
    domain = f"{per} nodes ({job.nvlink_domain_gpus} GPUs / {job.node_gpus} per {job.spec.instance})"
    if isinstance(choice, int):
        if nodes % choice or choice > per:
            allowed = ", ".join(str(d) for d in _divisors(nodes, per))
            raise InputError(
                "slurm.segment",
                f"{choice}: a segment must divide nodes({nodes}) and lie in one NVLink domain of {domain}; "
                f"allowed: auto, none or one of {allowed}",
            )
        return Segment(size=choice)
    if nodes < 2:
        return Segment(size=None)
    if nodes <= per:  # topology/block already keeps a job that fits one block in one block
        return Segment(
            size=None,
            note=f"no --segment: {nodes} nodes fit one NVLink domain of {domain}, and topology/block places a job "
            "that fits one block in one block (a segment of the whole job would change nothing)",
        )
    size = max(_divisors(nodes, per))
    if size == 1:
        return Segment(
            size=None,
            note=f"no --segment: {nodes} nodes have no divisor from 2 to {per} (one NVLink domain holds {domain}); "
            "Slurm places them without segments",
        )
    if size < per:
        return Segment(
            size=size,
            note=f"--segment={size}: the largest divisor of {nodes} nodes that fits one NVLink domain of {domain}",
        )
    return Segment(size=size)


def directives(job: ResolvedJob) -> list[str]:
    """``--segment=N`` for the sbatch header, or nothing."""
    size = segment(job).size
    return [f"--segment={size}"] if size else []


def _mnnvl(job: ResolvedJob) -> bool:
    return multi_node_nvlink(job) and job.spec.nodes >= 2


def nccl_env(job: ResolvedJob) -> dict[str, str]:
    """The NCCL variables for multi-node NVLink (shared with k8s_gb200); the caller lets the JobSpec's env win."""
    return dict(NCCL_ENV) if _mnnvl(job) else {}


def comment_lines(job: ResolvedJob) -> list[str]:
    """Comments for the script: the segment choice when it needs saying, and the Prolog's IMEX duty."""
    if not _mnnvl(job):
        return []
    note = segment(job).note
    per = nodes_per_domain(job)
    return [
        *([f"# fmstack: {note}"] if note else []),
        f"# fmstack: multi-node NVLink ({job.spec.instance}: NVLink domains of {job.nvlink_domain_gpus} GPUs, "
        f"{per} nodes). GPUs on different nodes",
        "#   use NVLink only through NVIDIA IMEX, which this script cannot set up (it runs as the user, on one node).",
        "#   The cluster's Prolog must, on every node of the job, before it starts: write the job's node addresses",
        "#   (scontrol show hostnames $SLURM_JOB_NODELIST -> NodeAddr, one per line) to nvidia-imex's",
        "#   nodes_config.cfg (IMEX_NODE_CONFIG_FILE), restart nvidia-imex and wait until it is ready; and the job",
        "#   needs an IMEX channel, /dev/nvidia-caps-imex-channels/channel0 (Slurm switch/nvidia_imex allocates one).",
        "#   Without them NCCL has no NVLink between nodes. See docs/launch.md, GB200 / GB300 on Slurm.",
    ]


_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def parse_version(text: str) -> tuple[int, int, int] | None:
    """``slurm 24.05.4`` or Debian's ``slurm-wlm 22.05.8`` -> (24, 5, 4); None when no version is in ``text``."""
    m = _VERSION.search(text)
    if m is None:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def check_sbatch(script: str, sbatch_version: str) -> None:
    """Refuse a script with ``--segment`` when ``sbatch --version`` says a Slurm before 24.05 (its sbatch would fail
    on the unknown option). An unreadable version is let through: sbatch then speaks for itself."""
    line = next((x for x in script.splitlines() if x.startswith(SEGMENT_DIRECTIVE)), None)
    if line is None:
        return
    found = parse_version(sbatch_version)
    if found is None or found[:2] >= SEGMENT_SINCE:
        return
    since = f"{SEGMENT_SINCE[0]}.{SEGMENT_SINCE[1]:02d}"
    raise InputError(
        "slurm.segment",
        f"{line.removeprefix('#SBATCH ')} needs Slurm {since} or newer (topology/block segments), but sbatch "
        f"--version says {sbatch_version.strip()!r}; set slurm.segment: none to submit without it",
    )


def topology_block_conf(blocks: Mapping[str, Sequence[str]], block_size: int) -> str:
    """topology.conf lines for topology/block: one ``BlockName=<name> Nodes=<n1,n2,...>`` per NVLink domain and
    ``BlockSizes=<block_size>`` (topology.conf(5); every block must hold at least the base size, and Slurm plans
    on base blocks of that size). ``blocks``: rack (UltraServer) name -> its Slurm node names."""
    if block_size < 1:
        raise InputError("block_size", f"{block_size}: must be >= 1")
    lines = []
    for name, nodes in blocks.items():
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or not all(re.fullmatch(r"[A-Za-z0-9_.-]+", n) for n in nodes):
            raise InputError("blocks", f"{name!r}: block and node names are letters, digits, '_', '.' and '-'")
        if len(nodes) < block_size:
            raise InputError(
                "blocks", f"{name}: {len(nodes)} nodes < BlockSizes {block_size}; a block holds at least that"
            )
        lines.append(f"BlockName={name} Nodes={','.join(nodes)}")
    return "\n".join([*lines, f"BlockSizes={block_size}"]) + "\n"
