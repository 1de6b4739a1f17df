"""Edges of the health engine: signals in (JSON files, Prometheus alerts), decisions out (Slurm, Kubernetes).

Renderers return text or data; running it (scontrol, kubectl, the Kubernetes client) is the caller's seam.

- Slurm: ``scontrol update nodename=N state=drain reason=...`` for a GPU reset or a replacement,
  ``scontrol reboot ASAP nextstate=resume reason=... N`` for a reboot, ``scontrol update nodename=N
  state=resume`` once healthy (Slurm 22.05 scontrol(1)).
- Kubernetes: the SageMaker HyperPod node label ``sagemaker.amazonaws.com/node-health-status`` with values
  Schedulable, Unschedulable, UnschedulablePendingReboot, UnschedulablePendingReplacement
  (https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-eks-resiliency-node-labels.html), plus
  ``fault-types`` / ``fault-reasons`` labels and a NoSchedule taint on the status key for unschedulable nodes
  (the taint is fmstack's choice: HyperPod's own taints are not documented in the notes).
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Callable
from dataclasses import fields
from typing import Any

from fmstack.errors import InputError
from fmstack.observability.actions import Action
from fmstack.observability.health import Decision, NodeSignals, check_counts
from fmstack.observability.xid import XID154_ACTIONS

HEALTH_LABEL = "sagemaker.amazonaws.com/node-health-status"
FAULT_TYPES_LABEL = "sagemaker.amazonaws.com/fault-types"
FAULT_REASONS_LABEL = "sagemaker.amazonaws.com/fault-reasons"

K8S_STATUS: dict[Action, str] = {
    Action.NONE: "Schedulable",
    Action.RESTART_JOB: "Schedulable",
    Action.RESET_GPU: "Unschedulable",
    Action.REBOOT_NODE: "UnschedulablePendingReboot",
    Action.REPLACE_NODE: "UnschedulablePendingReplacement",
}

_NODE_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,252})$")
_LABEL_VALUE_BAD = re.compile(r"[^A-Za-z0-9._-]+")


def check_node_name(node: str, where: str = "node") -> str:
    """A Slurm / Kubernetes node name: letters, digits, '.', '_', '-' (no spaces or shell characters); ``where``
    names the field in the error (``--node``, ``signals[1].node``)."""
    if not _NODE_RE.match(node):
        raise InputError(where, f"{node!r} is not a valid node name; allowed: letters, digits, '.', '_', '-'")
    return node


def signals_from_dict(data: Any, where: str = "signals") -> NodeSignals:
    """Build :class:`NodeSignals` from parsed JSON, naming the field and the allowed keys on error."""
    if not isinstance(data, dict):
        raise InputError(where, f"expected a JSON object, got {type(data).__name__}")
    known = {f.name: f for f in fields(NodeSignals)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise InputError(f"{where}.{unknown[0]}", f"unknown field; allowed: {', '.join(known)}")
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        kwargs[key] = _coerce(f"{where}.{key}", key, value)
    for seen, expected in (("gpus_visible", "gpus_expected"), ("efa_visible", "efa_expected")):
        given = [k for k in (seen, expected) if kwargs.get(k) is not None]
        if len(given) == 1:  # a count with nothing to compare it to: the engine could only ignore it
            other = expected if given[0] == seen else seen
            raise InputError(
                f"{where}.{given[0]}", f"needs {other} too (the counts are compared); give both or neither"
            )
    signals = NodeSignals(**kwargs)
    check_counts(signals, f"{where}.")
    if signals.node:
        check_node_name(signals.node, f"{where}.node")
    return signals


def signals_from_json(data: Any) -> list[NodeSignals]:
    """A parsed signals file: one node object, a list of them, or ``{"nodes": [...]}`` (no other top-level key)."""
    where = "signals"
    if isinstance(data, dict) and "nodes" in data:
        extra = sorted(set(data) - {"nodes"})
        if extra:
            raise InputError(f"signals.{extra[0]}", "unknown top-level field; allowed: nodes (or one node object)")
        data = data["nodes"]
        if not isinstance(data, list):
            raise InputError("signals.nodes", f"expected a list of node objects, got {type(data).__name__}")
    items = data if isinstance(data, list) else [data]
    out = [signals_from_dict(item, where=f"{where}[{i}]") for i, item in enumerate(items)]
    # one object per node: two would give two decisions, and rendered in order the later one wins (a healthy
    # entry after an Xid 79 one relabelled the node Schedulable and removed its taint)
    first: dict[str, int] = {}
    for i, s in enumerate(out):
        if s.node and s.node in first:
            raise InputError(
                f"{where}[{i}].node",
                f"{s.node!r} is also {where}[{first[s.node]}]; give one object per node (merge its signals)",
            )
        first.setdefault(s.node, i)
    return out


def _coerce(where: str, key: str, value: Any) -> Any:
    bools = {"row_remap_failure", "pending_row_remap", "gpu_missing", "efa_missing", "gpu_diag_failed"}
    floats = {"sbe_rate_per_hour", "thermal_violation_ratio"}
    optional_ints = {"gpus_visible", "gpus_expected", "efa_visible", "efa_expected"}
    if key == "node":
        if not isinstance(value, str):
            raise InputError(where, f"expected a string, got {value!r}")
        return value
    if key == "xid154_action":
        if value is not None and not isinstance(value, str):
            raise InputError(where, f"expected a string or null, got {value!r}")
        if value is not None and value.strip().lower() not in XID154_ACTIONS:
            allowed = ", ".join(repr(k) for k in XID154_ACTIONS)
            raise InputError(where, f"unknown Xid 154 recovery action {value!r}; allowed (any case): {allowed}")
        return value
    if key == "xids":
        if not isinstance(value, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in value):
            raise InputError(where, f"expected a list of integer Xid codes, got {value!r}")
        if any(x < 1 or x > 1023 for x in value):
            raise InputError(where, f"Xid codes are 1..1023, got {value!r}")
        return list(value)
    if key in bools:
        if not isinstance(value, bool):
            raise InputError(where, f"expected true or false, got {value!r}")
        return value
    if value is None and key in optional_ints:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(where, f"expected a number, got {value!r}")
    if not math.isfinite(value):
        raise InputError(where, f"must be a finite number, got {value!r}")
    if value < 0:
        raise InputError(where, f"must be >= 0, got {value!r}")
    if key == "thermal_violation_ratio" and value > 1:
        raise InputError(where, f"is a fraction 0..1, got {value!r}")
    if key in floats:
        return float(value)
    if value != int(value):
        raise InputError(where, f"expected an integer, got {value!r}")
    return int(value)


def _alert_value(alert: dict[str, Any]) -> float:
    """An alert's ``value`` (a string in /api/v1/alerts); 0 when absent or not a finite number."""
    try:
        value = float(alert.get("value", 0) or 0)
    except (TypeError, ValueError):
        return 0.0
    return value if math.isfinite(value) else 0.0


def _set_xid(s: NodeSignals, labels: dict[str, str], _alert: dict[str, Any]) -> None:
    if str(labels.get("xid", "")).isdigit():
        s.xids.append(int(labels["xid"]))


def _set(field: str) -> Callable[[NodeSignals, dict[str, str], dict[str, Any]], None]:
    def apply(s: NodeSignals, _labels: dict[str, str], _alert: dict[str, Any]) -> None:
        setattr(s, field, True)

    return apply


def _dbe(s: NodeSignals, _labels: dict[str, str], alert: dict[str, Any]) -> None:
    s.dbe_volatile_count = max(s.dbe_volatile_count, int(_alert_value(alert)), 1)


def _sbe(s: NodeSignals, _labels: dict[str, str], alert: dict[str, Any]) -> None:
    s.sbe_rate_per_hour = max(s.sbe_rate_per_hour, _alert_value(alert))


def _thermal(s: NodeSignals, _labels: dict[str, str], alert: dict[str, Any]) -> None:
    s.thermal_violation_ratio = max(s.thermal_violation_ratio, min(1.0, max(0.0, _alert_value(alert))))


def _nvlink(s: NodeSignals, _labels: dict[str, str], alert: dict[str, Any]) -> None:
    # One FmstackGpuNvlinkErrors alert per GPU (sum by Hostname, gpu): the node's signal is its worst GPU, which
    # HealthPolicy.nvlink_errors_reset is compared against (a per-GPU threshold: the action resets that GPU).
    s.nvlink_error_count = max(s.nvlink_error_count, int(_alert_value(alert)))


def _efa_errors(s: NodeSignals, _labels: dict[str, str], alert: dict[str, Any]) -> None:
    s.efa_error_count += max(1, int(_alert_value(alert)))


ALERT_SIGNALS: dict[str, Callable[[NodeSignals, dict[str, str], dict[str, Any]], None] | None] = {
    "FmstackGpuXidReplaceNode": _set_xid,
    "FmstackGpuXidRebootRequired": _set_xid,
    "FmstackGpuXidResetRequired": _set_xid,
    "FmstackGpuXidRestartJob": _set_xid,
    "FmstackGpuRowRemapFailure": _set("row_remap_failure"),
    "FmstackGpuRowRemapPending": _set("pending_row_remap"),
    "FmstackGpuEccDbe": _dbe,
    "FmstackGpuSbeRateHigh": _sbe,
    "FmstackGpuThermalThrottling": _thermal,
    "FmstackGpuNvlinkErrors": _nvlink,
    "FmstackGpuMissing": _set("gpu_missing"),
    "FmstackGpuNotReadable": _set("gpu_missing"),
    "FmstackGpuSourceDown": _set("gpu_missing"),
    "FmstackEfaDeviceMissing": _set("efa_missing"),
    "FmstackEfaSourceDown": _set("efa_missing"),  # where EFA is expected, no driver is no devices (as GpuSourceDown)
    "FmstackEfaRetransmitTimeouts": _efa_errors,
    "FmstackEfaErrors": _efa_errors,
    # Not node signals: the exporter's own health (action none: look at the node or the source's error), and the
    # job / service alerts (keyed by job_id or model_name; restarting a stalled job is the scheduler's business).
    "FmstackExporterSourceDown": None,
    "FmstackExporterDown": None,
    "FmstackTrainingStalled": None,
    "FmstackTrainingLowMfu": None,
    "FmstackGpuLowSmActive": None,
    "FmstackServingTtftSloBurn": None,
}
"""Every alert of ``rules/fmstack-rules.yml`` -> how it sets :class:`NodeSignals` (None: not a node signal)."""


def alert_node(labels: dict[str, str], node_label: str = "Hostname") -> str:
    """The node an alert is about: its ``node_label``, else its ``instance`` without the port."""
    node = labels.get(node_label, "")
    if node:
        return node
    instance = labels.get("instance", "")
    if instance.startswith("["):  # [ipv6]:port
        return instance[1:].split("]")[0]
    host, _, port = instance.rpartition(":")
    return host if host and port.isdigit() else instance


def signals_from_alerts(alerts: list[dict[str, Any]], node_label: str = "Hostname") -> dict[str, NodeSignals]:
    """Firing alerts from Prometheus' ``/api/v1/alerts`` -> signals per node.

    The node is the alert's ``node_label`` (every fmstack GPU, EFA, Lustre and exporter series carries
    ``Hostname``), else its ``instance`` without the port. Each fmstack alert sets the signal of
    :data:`ALERT_SIGNALS`; alerts that are not about a node (job, service) and unknown alerts are skipped.
    """
    out: dict[str, NodeSignals] = {}
    for alert in alerts:
        if alert.get("state") != "firing":
            continue
        labels = alert.get("labels", {})
        apply = ALERT_SIGNALS.get(labels.get("alertname", ""))
        node = alert_node(labels, node_label)
        if apply is None or not node:
            continue
        apply(out.setdefault(node, NodeSignals(node=node)), labels, alert)
    return out


def alerts_from_json(data: Any) -> list[dict[str, Any]]:
    """The alerts of a saved ``/api/v1/alerts`` answer (``{"status": "success", "data": {"alerts": [...]}}``), or a
    bare list of them; each must be an object with a ``labels`` object of strings and a ``state`` string."""
    where = "alerts"
    if isinstance(data, dict):
        inner = data.get("data")
        if not isinstance(inner, dict) or not isinstance(inner.get("alerts"), list):
            raise InputError(
                "alerts", 'expected the JSON of Prometheus /api/v1/alerts ({"data": {"alerts": [...]}}) or a list'
            )
        data, where = inner["alerts"], "alerts.data.alerts"
    if not isinstance(data, list):
        raise InputError("alerts", f"expected a list of alerts or /api/v1/alerts JSON, got {type(data).__name__}")
    for i, alert in enumerate(data):
        if not isinstance(alert, dict):
            raise InputError(f"{where}[{i}]", f"expected an alert object, got {type(alert).__name__}")
        labels = alert.get("labels")
        if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
            raise InputError(f"{where}[{i}].labels", f"expected an object of string labels, got {labels!r}")
        if not isinstance(alert.get("state"), str):
            raise InputError(f"{where}[{i}].state", f"expected 'firing' or 'pending', got {alert.get('state')!r}")
    return list(data)


def _reason_text(decision: Decision, limit: int = 200) -> str:
    text = f"fmstack {decision.action.name.lower()}: " + "; ".join(decision.reasons)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def render_slurm(node: str, decision: Decision) -> list[str]:
    """Slurm commands for a decision (empty for NONE and RESTART_JOB: the node stays in service)."""
    check_node_name(node)
    reason = shlex.quote(_reason_text(decision))
    if decision.action in (Action.NONE, Action.RESTART_JOB):
        return []
    if decision.action is Action.REBOOT_NODE:
        return [f"scontrol reboot ASAP nextstate=resume reason={reason} {node}"]
    return [f"scontrol update nodename={node} state=drain reason={reason}"]


def render_slurm_resume(node: str) -> list[str]:
    """Return a node to service once the action is done and checks pass."""
    return [f"scontrol update nodename={check_node_name(node)} state=resume"]


def _label_value(text: str) -> str:
    """Kubernetes label values: <= 63 characters of [A-Za-z0-9._-], starting and ending alphanumeric."""
    value = _LABEL_VALUE_BAD.sub("_", text)[:63]
    return value.strip("._-")


def k8s_node_state(decision: Decision) -> dict[str, Any]:
    """Labels to set (empty value: remove) and the status taint to add or remove, for any Kubernetes client.

    Not a patch body on purpose: a strategic-merge patch of ``spec.taints`` would replace the node's other taints.
    """
    status = K8S_STATUS[decision.action]
    labels = {HEALTH_LABEL: status, FAULT_TYPES_LABEL: "", FAULT_REASONS_LABEL: ""}
    if decision.action is not Action.NONE:
        labels[FAULT_TYPES_LABEL] = _label_value(decision.action.name)
        labels[FAULT_REASONS_LABEL] = _label_value(decision.main_reason)
    taint = {"key": HEALTH_LABEL, "value": status, "effect": "NoSchedule"}
    if status == "Schedulable":
        return {"labels": labels, "add_taints": [], "remove_taints": [{"key": HEALTH_LABEL, "effect": "NoSchedule"}]}
    return {"labels": labels, "add_taints": [taint], "remove_taints": []}


def render_k8s(node: str, decision: Decision) -> list[str]:
    """The same state as kubectl commands (labels with --overwrite; the status taint added or removed)."""
    check_node_name(node)
    state = k8s_node_state(decision)
    labels = " ".join(f"{k}={v}" if v else f"{k}-" for k, v in state["labels"].items())
    cmds = [f"kubectl label node {node} --overwrite {labels}"]
    for t in state["add_taints"]:
        cmds.append(f"kubectl taint node {node} --overwrite {t['key']}={t['value']}:{t['effect']}")
    for t in state["remove_taints"]:
        # `kubectl taint ... key:effect-` fails ("not found") when the taint is absent: remove it only if present
        path = shlex.quote(f'{{.spec.taints[?(@.key=="{t["key"]}")].effect}}')
        cmds.append(
            f"if kubectl get node {node} -o jsonpath={path} | grep -qw {t['effect']};"
            f" then kubectl taint node {node} {t['key']}:{t['effect']}-; fi"
        )
    return cmds
