"""What the JobSet and Kubeflow training-operator admission webhooks (and the controllers behind them) refuse that
the vendored CRD schemas do not say: checked offline so that ``--dry-run`` and a submit fail the same way.

JobSet (kubernetes-sigs/jobset pkg/webhooks/jobset_webhook.go, ValidateCreate): ``spec.network.subdomain`` must be
a DNS-1123 subdomain *and* a DNS-1035 label (it names the headless Service); every child Job name
``<jobset>-<replicatedJob>-<jobIndex>`` (pkg/util/placement GenJobName) and, for an Indexed Job with completions,
the longest pod name ``<jobset>-<replicatedJob>-<replicas-1>-<completions-1>`` plus a 5-character random suffix
(``-abcde`` in the webhook; GenPodName) must be DNS-1035 labels, at most 63 characters.

PyTorchJob (kubeflow/training-operator pkg/webhooks/pytorch/pytorchjob_webhook.go): ``metadata.name`` must be a
DNS-1035 label (NameIsDNS1035Label); every replica's pod template needs a container named ``pytorch``
(pkg/webhooks/utils ValidateReplicaSpecs: "must have at least one container with name pytorch"), the one the
operator reads the ``pytorchjob-port`` port (MASTER_PORT) from and sets the rendezvous env on. The operator then
creates one headless Service per replica named ``<job>-<replica type, lower case>-<index>`` (pkg/controller.v1/
common/service.go CreateNewService, pkg/core GenGeneralName), and a Service name is a DNS-1035 label (Kubernetes
"Object Names and IDs"): a name the webhook accepts but whose Services could not be created would leave the job
pending for ever, so that length is checked too.
"""

from __future__ import annotations

import re
from typing import Any

from fmstack.errors import InputError

DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
"""RFC 1035 label as Kubernetes checks it (apimachinery validation IsDNS1035Label): a lower-case letter first."""
DNS1035_MAX = 63
POD_SUFFIX = "-xxxxx"
"""The 5 random characters (and "-") the Job controller appends to a pod's name; the JobSet webhook counts them as
``-abcde``."""
PYTORCH_CONTAINER = "pytorch"
"""kubeflow.org/v1 PyTorchJobDefaultContainerName."""
PYTORCH_PORT_NAME = "pytorchjob-port"
"""kubeflow.org/v1 PyTorchJobDefaultPortName: the operator's MASTER_PORT is this port of the ``pytorch`` container
(it adds one on 23456 when the container has none by that name)."""


def _longest_jobset_names(manifest: dict[str, Any]) -> list[str]:
    name = manifest["metadata"]["name"]
    names = []
    for rj in manifest["spec"]["replicatedJobs"]:
        replicas = int(rj.get("replicas", 1))
        names.append(f"{name}-{rj['name']}-{replicas - 1}")
        job = rj["template"]["spec"]
        if job.get("completionMode") == "Indexed" and "completions" in job:
            names.append(f"{name}-{rj['name']}-{replicas - 1}-{int(job['completions']) - 1}{POD_SUFFIX}")
    return names


def _pytorchjob_service_names(manifest: dict[str, Any]) -> list[str]:
    name = manifest["metadata"]["name"]
    specs = manifest["spec"]["pytorchReplicaSpecs"]
    return [f"{name}-{rtype.lower()}-{int(r.get('replicas', 1)) - 1}" for rtype, r in specs.items()]


def _check_name(manifest: dict[str, Any], generated: list[str], what: str) -> None:
    """``name`` (the JobSpec's, the object's metadata.name) a DNS-1035 label and every name derived from it at most
    63 characters; the error gives the longest ``name`` this job (its node count) allows."""
    kind, name = manifest["kind"], manifest["metadata"]["name"]
    longest = max(generated, key=len)
    allowed = DNS1035_MAX - (len(longest) - len(name))
    if not DNS1035_LABEL.fullmatch(name):
        first = "starts with a digit" if name[:1].isdigit() else "is not one"
        raise InputError(
            "name",
            f"{name!r} {first}: a {kind} name must be a DNS-1035 label (a lower-case letter first, then lower-case "
            f"letters, digits and '-'), at most {allowed} characters for this {kind}, or its webhook refuses it",
        )
    if len(longest) > DNS1035_MAX:
        raise InputError(
            "name",
            f"{name!r} is {len(name)} characters; at most {allowed} for this {kind}: {what} {longest!r} "
            f"({len(longest)} characters) must be a DNS-1035 label of at most {DNS1035_MAX}",
        )


def check_jobset(manifest: dict[str, Any]) -> None:
    """The JobSet webhook's name rules (module docstring)."""
    name, subdomain = manifest["metadata"]["name"], (manifest["spec"].get("network") or {}).get("subdomain")
    # fmstack sets the subdomain to the name, checked below; a hand-edited one is checked on its own
    if subdomain and subdomain != name and not (DNS1035_LABEL.fullmatch(subdomain) and len(subdomain) <= DNS1035_MAX):
        raise InputError("JobSet spec.network.subdomain", f"{subdomain!r} must be a DNS-1035 label of <= 63 characters")
    _check_name(manifest, _longest_jobset_names(manifest), "its longest pod name")


def check_pytorchjob(manifest: dict[str, Any]) -> None:
    """The training-operator webhook's rules (module docstring): the name, the ``pytorch`` container, and the
    Services the operator creates."""
    for rtype, r in manifest["spec"]["pytorchReplicaSpecs"].items():
        names = [c.get("name") for c in r["template"]["spec"].get("containers", [])]
        if PYTORCH_CONTAINER not in names:
            raise InputError(
                f"PyTorchJob spec.pytorchReplicaSpecs.{rtype}.template.spec.containers",
                f"must have a container named {PYTORCH_CONTAINER!r} (the training operator's webhook refuses the job "
                f"and reads MASTER_PORT from that container), got {names}",
            )
    _check_name(manifest, _pytorchjob_service_names(manifest), "the operator's Service")
