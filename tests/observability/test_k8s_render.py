"""Kubernetes output: the fault-reasons label names the deciding reason; removing an absent taint is not an error."""

from __future__ import annotations

import subprocess
import sys

from fmstack.observability.health import Action, HealthEngine, NodeSignals
from fmstack.observability.health_io import FAULT_REASONS_LABEL, k8s_node_state, render_k8s

ENGINE = HealthEngine()


def test_fault_reason_is_the_deciding_one() -> None:
    d = ENGINE.decide(NodeSignals(node="n1", xids=[13, 79]))
    assert d.action is Action.REBOOT_NODE
    assert d.reasons[0].startswith("xid 13")  # the first reason is Xid 13's (restart job)...
    reason = k8s_node_state(d)["labels"][FAULT_REASONS_LABEL]
    assert reason.startswith("xid_79"), reason  # ...but Xid 79 decided the reboot


def test_escalation_is_the_deciding_reason() -> None:
    d = ENGINE.decide(NodeSignals(node="n1", dbe_volatile_count=1, resets_in_window=2))
    assert d.action is Action.REBOOT_NODE and d.deciding_reason.startswith("escalated reset -> reboot")


def test_healthy_node_removes_the_taint_only_if_present() -> None:
    cmds = render_k8s("n1", ENGINE.decide(NodeSignals(node="n1")))
    assert cmds[0].startswith(
        "kubectl label node n1 --overwrite sagemaker.amazonaws.com/node-health-status=Schedulable"
    )
    assert cmds[1] == (
        'if kubectl get node n1 -o jsonpath=\'{.spec.taints[?(@.key=="sagemaker.amazonaws.com/node-health-status")]'
        ".effect}' | grep -qw NoSchedule; then kubectl taint node n1 sagemaker.amazonaws.com/node-health-status:"
        "NoSchedule-; fi"
    )


def test_cli_k8s_reboot_labels_the_deciding_xid() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "fmstack", "health", "--xid", "13", "--xid", "79", "--node", "n1", "--format", "k8s"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert f"{FAULT_REASONS_LABEL}=xid_79" in out and f"{FAULT_REASONS_LABEL}=xid_13" not in out
