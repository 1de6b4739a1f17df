"""Kubernetes manifests for a resolved job: a JobSet (default) or a Kubeflow PyTorchJob, and their offline validation.

JobSet (jobset.x-k8s.io/v1alpha2): one replicated Job of ``nodes`` Indexed pods; ``network.enableDNSHostnames``
makes JobSet create the headless Service for rendezvous (pod ``<jobset>-<rjob>-0-0.<subdomain>`` is node 0).
Kueue: the ``kueue.x-k8s.io/queue-name`` label, ``suspend: true`` (Kueue admits the whole JobSet at once, i.e. gang
admission, and unsuspends it) and, when ``topology.mode`` asks for it, a ``kueue.x-k8s.io/podset-{preferred,
required}-topology`` annotation on the pods for topology-aware placement (AWS: ``topology.k8s.aws/network-node-layer-N``
node labels). Off by default: it needs a TAS ResourceFlavor, or the workload is never admitted.
Validation: core objects (batch/v1 Job, v1 Pod) with kubernetes-validate in strict mode; the CRDs against the
vendored schemas in ``orchestration/data`` with jsonschema, and what the JobSet and training-operator webhooks refuse
beyond the schemas (``k8s_webhooks``).
"""

from __future__ import annotations

import json
import math
import re
from fractions import Fraction
from importlib import resources
from typing import Any

from fmstack.errors import InputError
from fmstack.orchestration.jobspec import ResolvedJob
from fmstack.orchestration.launchers import k8s_gb200, k8s_webhooks
from fmstack.orchestration.launchers.torchrun import job_env, program_argv, stop_lead_s, torchrun_prefix

K8S_VERSION = "1.30"
RDZV_PORT = 29500
JOBSET_RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
RJOB = "trainer"
EFA_HUGEPAGES_2MI_MIB = 5120
"""2 MiB huge pages a pod with EFA devices requests (EKS user guide node-efa; see _resources)."""
MEMORY_SHARE = 0.9
"""Share of the instance's memory a pod requests by default: a chosen margin (not measured) for what the kernel,
the kubelet, the eviction threshold and daemon pods keep; JobSpec ``memory_gib`` overrides it."""
CPU_SHARE = 0.9
"""Share of its vCPUs a pod with part of a node requests: the same chosen margin, for kube-reserved (EKS reserves
well under one of 192 vCPUs) and daemon pods."""


def _escape(arg: str) -> str:
    """Kubernetes expands ``$(VAR)`` in command and args; ``$$`` is its escape, so user text stays literal."""
    return arg.replace("$", "$$")


def _container(job: ResolvedJob, rdzv: list[str], indexed: bool) -> dict[str, Any]:
    spec = job.spec
    if not spec.image:
        raise InputError("image", "a container image is required to run on Kubernetes (e.g. image: my/repo:tag)")
    args = [_escape(a) for a in torchrun_prefix(job)] + rdzv + [_escape(a) for a in program_argv(job)]
    variables = job_env(job)
    for key, value in k8s_gb200.nccl_env(job).items():  # multi-node NVLink (k8s_gb200); the JobSpec's env wins
        variables.setdefault(key, value)
    if lead := stop_lead_s(job):
        # torchrun SIGKILLs its workers this long after forwarding a SIGTERM (default 30 s): give them the lead
        variables.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", str(lead))
    env: list[dict[str, Any]] = [{"name": k, "value": _escape(v)} for k, v in sorted(variables.items())]
    if indexed:  # Indexed Job pods carry their index; PyTorchJob's operator sets PET_NODE_RANK itself
        env.append(
            {
                "name": "NODE_RANK",
                "valueFrom": {
                    "fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}
                },
            }
        )
        # JobSet labels (and annotates) every pod with the restart attempt it is on, 0 first (jobset api/jobset/
        # v1alpha2 RestartsKey): the same count as the local launcher's FMSTACK_RESTART_COUNT. A PyTorchJob has no
        # such label (the kubelet restarts containers in place and the restart count is pod status, which the
        # downward API does not expose), so its pods go without.
        if "FMSTACK_RESTART_COUNT" not in job.spec.env:
            env.append(
                {
                    "name": "FMSTACK_RESTART_COUNT",
                    "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{JOBSET_RESTART_ATTEMPT}']"}},
                }
            )
    # a PyTorchJob's container must be named pytorch, and the operator takes MASTER_PORT from its pytorchjob-port
    # port (k8s_webhooks); a JobSet's container name is free (its pods are <jobset>-<replicatedJob>-..., not it)
    name, port = ("trainer", "rdzv") if indexed else (k8s_webhooks.PYTORCH_CONTAINER, k8s_webhooks.PYTORCH_PORT_NAME)
    container: dict[str, Any] = {
        "name": name,
        "image": spec.image,
        "command": args[:1],
        "args": args[1:],
        "env": env,
        "ports": [{"containerPort": RDZV_PORT, "name": port}],
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}, *_checkpoint_mount(job)],
    }
    resources = _resources(job)
    if resources:
        container["resources"] = resources
    return container


def node_share(job: ResolvedJob) -> Fraction | None:
    """The share of its node a pod takes when the job asks for fewer GPUs than the instance has (4 of a
    p5.48xlarge's 8: 1/2); None for a whole node, a job without GPUs or without an instance."""
    if job.node_gpus and 0 < job.gpus_per_node < job.node_gpus:
        return Fraction(job.gpus_per_node, job.node_gpus)
    return None


def _partial(share: Fraction, efa: int) -> tuple[int, int]:
    """EFA devices and 2 MiB huge pages (MiB) for a pod with ``share`` of a node that has ``efa`` devices.

    EFA: the EFA devices are spread evenly over the GPUs: p5.48xlarge has 32 for 8 GPUs (4 per GPU), p5en.48xlarge
    16 (2), p6-b200.48xlarge 8 (1) (EFA counts from the catalog: EC2 user guide, network cards and "Maximize
    network bandwidth on Amazon EC2 instances with multiple network cards"); on p5 each PCIe switch holds one H100
    and its four EFA devices (Perplexity, "High-Performance GPU Memory Transfer on AWS Sagemaker Hyperpod", 2025,
    read as quoted, not in an AWS document). A pod with g of N GPUs takes floor(efa x g / N), so pods that split a node's GPUs also split its
    EFA devices, and at least 1 (p4d.24xlarge has 4 for 8 GPUs: a 1-GPU pod still gets a device, and only 4 such
    pods fit on a node). The EFA device plugin hands out any free devices (vpc.amazonaws.com/efa is a count, EKS
    user guide node-efa); whether they sit on the GPUs' PCIe switches is up to the kubelet's Topology Manager.
    Huge pages: the node's pool (5128 pages, EKS user guide node-efa) divided as the GPUs are, 5120 MiB x g / N
    rounded down to whole pages: one process per GPU, each with the whole-node pod's 640 MiB."""
    devices = max(1, math.floor(efa * share)) if efa else 0
    huge_mib = math.floor(EFA_HUGEPAGES_2MI_MIB * share / 2) * 2 if efa else 0
    return devices, huge_mib


def _resources(job: ResolvedJob) -> dict[str, dict[str, str]]:
    """GPUs and EFA devices (extended resources: request = limit), the 2 MiB huge pages libfabric's EFA provider
    allocates its buffers from, and a memory request.

    Huge pages: the EKS user guide (node-efa, "Run machine learning training on Amazon EKS with Elastic Fabric
    Adapter") says EFA nodes pre-allocate 5128 2 MiB huge pages for pods to request, and its p5.48xlarge example
    (the same as aws-samples/awsome-distributed-training micro-benchmarks/nccl-tests/kubernetes/nccl-tests.yaml)
    requests ``hugepages-2Mi: 5120Mi`` with ``vpc.amazonaws.com/efa: 32``: the same 5120Mi per pod whatever the EFA
    count, which comes from the catalog (p5 32, p5en 16, p6-b200 8, p6e-gb200 4). ``kubernetes.hugepages_2mi_mib``
    sets the request instead (0: none, for nodes without pre-allocated huge pages). Kubernetes refuses huge pages
    without a cpu or memory request ("HugePages require cpu or memory", see :func:`check_resources`), and a memory
    request is also what keeps the scheduler off a node whose memory is taken: the pod requests ``memory_gib`` or
    else MEMORY_SHARE of the instance's memory less the huge pages, as a whole number of GiB. Allocatable memory is
    below the nominal size (the kernel's own, kube-reserved, the eviction threshold and the huge pages come off:
    Kubernetes "Reserve Compute Resources for System Daemons"), so asking for all of it would never schedule. No
    memory limit: the trainer may use what the node has left rather than be OOM-killed at a guess.

    A pod with fewer GPUs than the node (:func:`node_share`) requests its share of the EFA devices and huge pages
    (:func:`_partial`), of the memory, and CPU_SHARE of its share of the vCPUs, so that pods splitting a node's GPUs
    fit on it together; a whole-node pod requests no CPU (it is alone on the node)."""
    share = node_share(job)
    efa, huge_mib = (job.efa_devices, EFA_HUGEPAGES_2MI_MIB if job.efa_devices else 0)
    if share is not None:
        efa, huge_mib = _partial(share, job.efa_devices)
    if job.spec.kubernetes.hugepages_2mi_mib is not None:
        huge_mib = job.spec.kubernetes.hugepages_2mi_mib
    limits: dict[str, str] = {}
    if job.gpus_per_node:
        limits["nvidia.com/gpu"] = str(job.gpus_per_node)
    if efa:
        limits["vpc.amazonaws.com/efa"] = str(efa)
    if huge_mib:
        limits["hugepages-2Mi"] = f"{huge_mib}Mi"
    requests = dict(limits)
    if share is not None and job.node_vcpus:
        requests["cpu"] = str(max(1, math.floor(job.node_vcpus * share * CPU_SHARE)))
    memory_gib = job.spec.memory_gib
    if memory_gib is None and job.memory_gib is not None:
        mine = job.memory_gib * MEMORY_SHARE * (float(share) if share is not None else 1)
        memory_gib = math.floor(mine - huge_mib / 1024)
    if memory_gib is not None:
        requests["memory"] = (
            f"{memory_gib:g}Gi" if float(memory_gib).is_integer() else f"{math.floor(memory_gib * 1024)}Mi"
        )
    if huge_mib and not {"cpu", "memory"} & set(requests):
        raise InputError(
            "kubernetes.hugepages_2mi_mib",
            f"{huge_mib} MiB of huge pages need a memory request: set memory_gib or an instance, or 0 for none",
        )
    if not limits and not requests:
        return {}
    return {"limits": limits, "requests": requests}


_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_DECIMAL = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def _bytes(quantity: str) -> float:
    """A Kubernetes quantity in bytes (the suffixes a resource request uses; Kubernetes "Resource Management for
    Pods and Containers", meaning of memory)."""
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|k|M|G|T|)", quantity)
    if m is None:
        raise InputError("resources", f"quantity {quantity!r}: expected a number with Ki, Mi, Gi, Ti, k, M, G or T")
    return float(m.group(1)) * {**_BINARY, **_DECIMAL}[m.group(2)]


def check_resources(where: str, resources: dict[str, dict[str, str]]) -> None:
    """The API server's rules for a container's resources that its OpenAPI schema (hence kubernetes-validate) does
    not carry (kubernetes pkg/apis/core/validation ValidateResourceRequirements): huge pages come in whole pages and
    need a cpu or memory request or limit; resources that cannot be overcommitted (extended resources such as
    nvidia.com/gpu and vpc.amazonaws.com/efa, and huge pages) have a limit equal to their request."""
    limits, requests = resources.get("limits", {}), resources.get("requests", {})
    huge = [k for k in {**limits, **requests} if k.startswith("hugepages-")]
    for key in huge:
        page = _bytes(key.removeprefix("hugepages-"))
        for kind, values in (("limits", limits), ("requests", requests)):
            if key in values and _bytes(values[key]) % page:
                raise InputError(f"{where} {kind}.{key}", f"{values[key]} is not a whole number of {key[10:]} pages")
    if huge and not {"cpu", "memory"} & {*limits, *requests}:
        raise InputError(where, f"HugePages require cpu or memory: {', '.join(huge)} without a cpu or memory request")
    for key, value in requests.items():
        overcommit = key in ("cpu", "memory", "ephemeral-storage")
        if not overcommit and limits.get(key) != value:
            raise InputError(f"{where} limits.{key}", f"must equal the request {value} (not overcommittable), got "
                             f"{limits.get(key)}")  # fmt: skip


def _checkpoint_mount(job: ResolvedJob) -> list[dict[str, Any]]:
    """The checkpoint claim mounted at ``checkpoint.location``. A restarted pod starts from an empty file system, so a
    checkpoint with neither a claim nor a durable tier could never be resumed from: refused."""
    ck = job.spec.checkpoint
    if ck is None:
        return []
    if ck.pvc is None:
        if ck.durable is None:
            raise InputError(
                "checkpoint.pvc",
                f"{ck.location!r} would live in the pod's own file system, lost when a pod restarts: set "
                "checkpoint.pvc to a PersistentVolumeClaim (e.g. FSx for Lustre) or checkpoint.durable to an s3:// URL",
            )
        return []
    return [{"name": "checkpoints", "mountPath": ck.location}]


def _pod_spec(job: ResolvedJob, rdzv: list[str], indexed: bool) -> dict[str, Any]:
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    ck = job.spec.checkpoint
    if ck is not None and ck.pvc is not None:
        volumes.append({"name": "checkpoints", "persistentVolumeClaim": {"claimName": ck.pvc}})
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [_container(job, rdzv, indexed)],
        # NCCL and DataLoader workers need more shared memory than the container default (64 MiB)
        "volumes": volumes,
    }
    if lead := stop_lead_s(job):
        # a deleted or preempted pod gets SIGTERM, then SIGKILL this much later (default 30 s): the workload saves
        # the step it is at in between (fmstack.workloads.stop), which takes one step, the save and the exit
        pod["terminationGracePeriodSeconds"] = lead
    return pod


def _labels(job: ResolvedJob) -> dict[str, str]:
    labels = {"app.kubernetes.io/managed-by": "fmstack", "fmstack/job-name": job.spec.name}
    if job.spec.queue:
        labels["kueue.x-k8s.io/queue-name"] = job.spec.queue
    return labels


def _pod_annotations(job: ResolvedJob) -> dict[str, str]:
    """Kueue TAS only when the spec asks (``topology.mode``): a topology request on a ClusterQueue whose flavor has
    no ``topologyName`` is never admitted, preferred or required alike (see jobspec.Topology)."""
    topo = job.spec.topology
    if topo.mode == "none":
        return {}
    if not job.spec.queue:
        raise InputError("topology.mode", f"{topo.mode!r} needs a Kueue queue (set queue) or mode: none")
    return {f"kueue.x-k8s.io/podset-{topo.mode}-topology": topo.level}


def _template(job: ResolvedJob, rdzv: list[str], indexed: bool) -> dict[str, Any]:
    """A pod template: Kueue's annotations, the pod spec and, on GB200/GB300, the ComputeDomain claim (k8s_gb200)."""
    template = {"metadata": {"annotations": _pod_annotations(job)}, "spec": _pod_spec(job, rdzv, indexed)}
    k8s_gb200.wire_pod(job, template)
    return template


def _metadata(job: ResolvedJob) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": job.spec.name, "namespace": job.spec.namespace, "labels": _labels(job)}
    domain = k8s_gb200.render_compute_domain(job)
    if domain is not None:  # the launcher deletes it with the job (KubernetesLauncher.cancel)
        meta["annotations"] = {k8s_gb200.ANNOTATION: domain["metadata"]["name"]}
    return meta


def render_manifests(job: ResolvedJob, render: Any) -> list[dict[str, Any]]:
    """What the launcher applies, in order: the ComputeDomain when the job has one (k8s_gb200), then the job
    rendered by ``render`` (render_jobset or render_pytorchjob)."""
    domain = k8s_gb200.render_compute_domain(job)
    return [*([domain] if domain is not None else []), render(job)]


def render_jobset(job: ResolvedJob) -> dict[str, Any]:
    spec = job.spec
    n = spec.nodes
    master = f"{spec.name}-{RJOB}-0-0.{spec.name}"
    rdzv = ["--node-rank=$(NODE_RANK)", f"--master-addr={master}", f"--master-port={RDZV_PORT}"]
    job_spec = {
        "parallelism": n,
        "completions": n,
        "completionMode": "Indexed",
        "backoffLimit": 0,
        "activeDeadlineSeconds": spec.time_limit_min * 60,
        "template": _template(job, rdzv, True),
    }
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": _metadata(job),
        "spec": {
            "suspend": bool(spec.queue),
            "network": {"enableDNSHostnames": True, "subdomain": spec.name},
            "successPolicy": {"operator": "All", "targetReplicatedJobs": [RJOB]},
            "failurePolicy": {"maxRestarts": spec.retry.max_restarts},
            "replicatedJobs": [{"name": RJOB, "replicas": 1, "template": {"spec": job_spec}}],
        },
    }


def render_pytorchjob(job: ResolvedJob) -> dict[str, Any]:
    """PyTorchJob: the training operator creates the Services and sets MASTER_ADDR, MASTER_PORT and PET_NODE_RANK
    (kubeflow/training-operator pkg/controller.v1/pytorch/envvar.go); Master is node 0."""
    spec = job.spec
    rdzv = ["--node-rank=$(PET_NODE_RANK)", "--master-addr=$(MASTER_ADDR)", "--master-port=$(MASTER_PORT)"]

    def tmpl() -> dict[str, Any]:
        return _template(job, rdzv, False)

    replicas: dict[str, Any] = {"Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": tmpl()}}
    if spec.nodes > 1:
        replicas["Worker"] = {"replicas": spec.nodes - 1, "restartPolicy": "OnFailure", "template": tmpl()}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": _metadata(job),
        "spec": {
            "nprocPerNode": str(job.procs_per_node),
            "runPolicy": {
                "cleanPodPolicy": "None",
                "backoffLimit": spec.retry.max_restarts,
                "suspend": bool(spec.queue),
            },
            "pytorchReplicaSpecs": replicas,
        },
    }


def _schema(name: str) -> dict[str, Any]:
    text = resources.files("fmstack.orchestration").joinpath("data", name).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


SCHEMAS = {"JobSet": "jobset-v1alpha2.schema.json", "PyTorchJob": "pytorchjob-v1.schema.json"}
"""The job kinds; a ComputeDomain (k8s_gb200.SCHEMA, vendored from the NVIDIA DRA driver's CRD) validates too."""


def core_objects(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The core Kubernetes objects embedded in a CRD manifest, as standalone objects for kubernetes-validate."""
    meta = {"name": manifest["metadata"]["name"], "namespace": manifest["metadata"]["namespace"]}
    if manifest["kind"] == "JobSet":
        return [
            {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": rj["template"]["spec"]}
            for rj in manifest["spec"]["replicatedJobs"]
        ]
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {**meta, **r["template"]["metadata"]},
            "spec": r["template"]["spec"],
        }
        for r in manifest["spec"]["pytorchReplicaSpecs"].values()
    ]


def validate_manifest(manifest: dict[str, Any]) -> None:
    """Raise InputError naming the first violation: CRD schema (jsonschema), the JobSet / training-operator
    webhooks' rules (k8s_webhooks: names, the PyTorchJob ``pytorch`` container), then the embedded core objects
    (kubernetes-validate, strict: unknown fields are errors)."""
    import jsonschema  # type: ignore[import-untyped]
    import kubernetes_validate

    kind = manifest.get("kind", "")
    if kind == "ComputeDomain":
        k8s_gb200.validate_compute_domain(manifest, _schema(k8s_gb200.SCHEMA))
        return
    if kind not in SCHEMAS:
        raise InputError("manifest", f"kind {kind!r}; allowed: {', '.join(SCHEMAS)}")
    validator = jsonschema.Draft202012Validator(_schema(SCHEMAS[kind]))
    err = next(iter(sorted(validator.iter_errors(manifest), key=lambda e: list(e.absolute_path))), None)
    if err is not None:
        where = ".".join(str(p) for p in err.absolute_path) or "(root)"
        raise InputError(f"{kind} {where}", err.message)
    (k8s_webhooks.check_jobset if kind == "JobSet" else k8s_webhooks.check_pytorchjob)(manifest)
    for obj in core_objects(manifest):
        pod = obj["spec"]["template"]["spec"] if obj["kind"] == "Job" else obj["spec"]
        for c in pod["containers"]:
            check_resources(f"{kind} {obj['kind']} container {c['name']} resources", c.get("resources", {}))
        try:
            version = k8s_gb200.K8S_VERSION_DRA if k8s_gb200.claims_channel(pod) else K8S_VERSION
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in getattr(exc, "path", [])) or "(root)"
            raise InputError(f"{kind} {obj['kind']} {path}", str(getattr(exc, "message", exc))) from None
