"""Multi-node NVLink (MNNVL) on Kubernetes: an NVIDIA DRA ComputeDomain for jobs on GB200/GB300 UltraServers.

Across the nodes of a GB200 NVL72 rack (one u-p6e-gb200x72 UltraServer: 18 p6e-gb200.36xlarge, 72 GPUs) GPUs reach
each other's memory over NVLink only through IMEX channels. On EKS these come from the NVIDIA DRA driver
(NVIDIA/k8s-dra-driver-gpu, ``resources.computeDomains.enabled``): a ``resource.nvidia.com/v1beta1`` ComputeDomain
names a ResourceClaimTemplate for its channel; a pod that claims it gets an IMEX channel, and the driver runs the IMEX
daemons on the nodes those pods land on (EKS user guide, "Use P6e-GB200 UltraServers with Amazon EKS",
ml-eks-nvidia-ultraserver: DRA required, Kubernetes >= 1.33, "a ComputeDomain per workload job"; the same shape as
aws-samples/awsome-distributed-training micro-benchmarks/nccl-tests/kubernetes/nccl-tests-gb200.yaml and NVIDIA's
demo/specs/imex/nvbandwidth-test-job-1.yaml).

What is rendered (``kubernetes.compute_domain: auto``, the default) when the instance's NVLink domain is larger than
a node (catalog ``nvlink_domain_gpus`` > ``num_gpus``), the job has more than one node and its pods take whole
nodes (so pods = nodes = the ComputeDomain's ``numNodes``):

- a ComputeDomain ``<job>-compute-domain``, ``numNodes`` = the job's nodes, channel template
  ``<job>-compute-domain-channel``;
- in every pod: ``resourceClaims`` naming that template and the container's ``resources.claims``, the label
  ``fmstack/job-name`` and a pod affinity on ``nvidia.com/gpu.clique`` (the NVLink domain label GPU Feature
  Discovery puts on each node): *required* when one domain holds the job (nodes x GPUs <= nvlink_domain_gpus), else
  *preferred*: a required term would ask for one clique holding more nodes than it has, which never schedules,
  while a ComputeDomain may span several cliques (the driver runs one IMEX domain per clique, ComputeDomainClique
  ``<domain uid>.<clique id>``) and NCCL uses NVLink within a clique and EFA between them, e.g. data parallel
  across racks. The preferred term packs pods into few cliques; it does not align ranks with racks (Kueue TAS with
  a clique level can, see ``topology``);
- ``NCCL_MNNVL_ENABLE=1`` and ``NCCL_NVLS_ENABLE=1`` as AWS's sample sets them, unless the JobSpec's env does.

``none`` renders nothing; any other value is the channel ResourceClaimTemplate of an existing ComputeDomain: the
pods claim it (no ComputeDomain rendered, affinity as above). Pods with part of a node (several per node: pods !=
nodes) get no ComputeDomain from ``auto``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from fmstack.errors import InputError
from fmstack.orchestration.jobspec import ResolvedJob

K8S_VERSION_DRA = "1.33"
"""Kubernetes version pods that claim a ComputeDomain channel are validated against (kubernetes-validate ships
schemas 1.25 to 1.37 in its 1.37 release). PodSpec ``resourceClaims[].resourceClaimTemplateName`` exists from 1.31
(1.26-1.30 had ``source`` instead); 1.33 is the lowest version EKS supports P6e-GB200 with (EKS user guide
ml-eks-nvidia-ultraserver)."""
GROUP, VERSION, PLURAL = "resource.nvidia.com", "v1beta1", "computedomains"
CLAIM = "compute-domain-channel"
CLIQUE_LABEL = "nvidia.com/gpu.clique"
JOB_LABEL = "fmstack/job-name"
ANNOTATION = "fmstack/compute-domain"
"""On the JobSet / PyTorchJob: the ComputeDomain fmstack created with it, deleted with it (cancel)."""
NCCL_ENV = {"NCCL_MNNVL_ENABLE": "1", "NCCL_NVLS_ENABLE": "1"}
SCHEMA = "computedomain-v1beta1.schema.json"


@dataclass(frozen=True, kw_only=True, slots=True)
class DomainPlan:
    """What a job's pods claim: the channel template, the ComputeDomain to create (None: an existing one), and
    whether one NVLink domain holds the whole job."""

    template: str
    domain: str | None
    num_nodes: int
    one_domain: bool


def multi_node_nvlink(job: ResolvedJob) -> bool:
    """True when the instance's NVLink domain spans more than one node (GB200/GB300 kinds)."""
    return job.node_gpus > 0 and job.nvlink_domain_gpus > job.node_gpus


def plan(job: ResolvedJob) -> DomainPlan | None:
    """The ComputeDomain wiring for ``job``, or None (manifests as without this module)."""
    choice = job.spec.kubernetes.compute_domain
    if choice == "none":
        return None
    if not multi_node_nvlink(job):
        if choice == "auto":
            return None
        why = (
            f"{job.spec.instance} (nvlink_domain_gpus {job.nvlink_domain_gpus}, not above one node's {job.node_gpus} GPUs) has"
            if job.node_gpus
            else "a job without an instance (or without GPUs) has"
        )
        raise InputError(
            "kubernetes.compute_domain", f"{choice!r}: {why} no multi-node NVLink to claim; allowed: auto or none"
        )
    one = job.spec.nodes * job.gpus_per_node <= job.nvlink_domain_gpus
    if choice != "auto":
        return DomainPlan(template=choice, domain=None, num_nodes=job.spec.nodes, one_domain=one)
    if job.spec.nodes < 2 or job.gpus_per_node != job.node_gpus:
        return None
    name = f"{job.spec.name}-compute-domain"
    return DomainPlan(template=f"{name}-channel", domain=name, num_nodes=job.spec.nodes, one_domain=one)


def render_compute_domain(job: ResolvedJob) -> dict[str, Any] | None:
    """The ComputeDomain to create with the job, or None."""
    p = plan(job)
    if p is None or p.domain is None:
        return None
    labels = {"app.kubernetes.io/managed-by": "fmstack", JOB_LABEL: job.spec.name}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ComputeDomain",
        "metadata": {"name": p.domain, "namespace": job.spec.namespace, "labels": labels},
        # numNodes: the IMEX daemons the domain expects; with the driver's IMEXDaemonsWithDNSNames (default from
        # v25.8) it only drives the status, without it pods wait until that many daemons joined (CRD description)
        "spec": {"numNodes": p.num_nodes, "channel": {"resourceClaimTemplate": {"name": p.template}}},
    }


def wire_pod(job: ResolvedJob, template: dict[str, Any]) -> None:
    """Add the channel claim, the clique affinity, the job label and the NCCL variables to a pod template
    (``{"metadata": ..., "spec": ...}``) in place; nothing when :func:`plan` says None."""
    p = plan(job)
    if p is None:
        return
    meta, pod = template.setdefault("metadata", {}), template["spec"]
    meta.setdefault("labels", {})[JOB_LABEL] = job.spec.name
    pod["resourceClaims"] = [{"name": CLAIM, "resourceClaimTemplateName": p.template}]
    term = {
        "labelSelector": {"matchExpressions": [{"key": JOB_LABEL, "operator": "In", "values": [job.spec.name]}]},
        "topologyKey": CLIQUE_LABEL,
    }
    affinity: dict[str, Any] = (
        {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
        if p.one_domain
        else {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": term}]}
    )
    pod.setdefault("affinity", {})["podAffinity"] = affinity  # a node affinity set before stays
    for c in pod["containers"]:
        c.setdefault("resources", {})["claims"] = [{"name": CLAIM}]


def nccl_env(job: ResolvedJob) -> dict[str, str]:
    """The NCCL variables a pod claiming a channel gets (the caller lets the JobSpec's env win)."""
    return dict(NCCL_ENV) if plan(job) is not None else {}


def claims_channel(pod: dict[str, Any]) -> bool:
    """Whether a pod spec claims a DRA resource (validated at :data:`K8S_VERSION_DRA`)."""
    return bool(pod.get("resourceClaims"))


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    """The CRD's structural schema with unknown fields refused (``additionalProperties: false`` on each object that
    lists its properties, metadata aside): what ``kubectl apply`` with strict field validation (kubectl's default,
    ``--validate=strict``) makes the API server do, where the schema alone would prune them silently."""
    out = copy.deepcopy(schema)

    def walk(node: dict[str, Any]) -> None:
        props = node.get("properties")
        if isinstance(props, dict):
            node.setdefault("additionalProperties", False)
            for key, sub in props.items():
                if key != "metadata" and isinstance(sub, dict):
                    walk(sub)
        if isinstance(node.get("items"), dict):
            walk(node["items"])

    walk(out)
    return out


def validate_compute_domain(obj: dict[str, Any], schema: dict[str, Any]) -> None:
    """Raise InputError naming the first violation of the vendored CRD schema (jsonschema, unknown fields refused),
    or of what the API server checks beyond it: the name a DNS-1123 subdomain, numNodes >= 0 (CRD description)."""
    import jsonschema  # type: ignore[import-untyped]

    validator = jsonschema.Draft202012Validator(_strict(schema))
    err = next(iter(sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path))), None)
    if err is not None:
        where = ".".join(str(p) for p in err.absolute_path) or "(root)"
        raise InputError(f"ComputeDomain {where}", err.message)
    if obj.get("apiVersion") != f"{GROUP}/{VERSION}":
        raise InputError("ComputeDomain apiVersion", f"{obj.get('apiVersion')!r}; allowed: {GROUP}/{VERSION}")
    if obj["spec"]["numNodes"] < 0:
        raise InputError("ComputeDomain spec.numNodes", f"{obj['spec']['numNodes']} must be zero or greater")
