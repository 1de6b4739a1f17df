"""Every shipped alert reaches the health engine, keyed by the node, and leads to the action its label names."""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

import yaml

from fmstack.observability.actions import Action
from fmstack.observability.health import HealthEngine, NodeSignals
from fmstack.observability.health_io import ALERT_SIGNALS, alert_node, render_slurm, signals_from_alerts

RULES = resources.files("fmstack.observability").joinpath("rules/fmstack-rules.yml")
ENGINE = HealthEngine()


def _alerts() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(RULES.read_text("utf-8"))["groups"] for r in g["rules"] if "alert" in r]


def test_every_alert_in_the_rules_file_is_handled() -> None:
    names = {a["alert"] for a in _alerts()}
    assert names <= set(ALERT_SIGNALS), f"alerts without a mapping: {sorted(names - set(ALERT_SIGNALS))}"
    assert set(ALERT_SIGNALS) <= names, f"mappings of alerts that do not exist: {sorted(set(ALERT_SIGNALS) - names)}"


def test_each_node_alert_leads_to_the_action_on_its_label() -> None:
    values = {"FmstackGpuEccDbe": "2", "FmstackGpuSbeRateHigh": "20", "FmstackGpuThermalThrottling": "0.5",
              "FmstackGpuNvlinkErrors": "5", "FmstackEfaErrors": "40", "FmstackEfaRetransmitTimeouts": "1"}  # fmt: skip
    for rule in _alerts():
        name = rule["alert"]
        if ALERT_SIGNALS[name] is None:
            continue
        m = re.search(r'xid=~"([0-9|]+)"', rule["expr"])
        for xid in m.group(1).split("|") if m else [None]:  # every Xid of an Xid alert's regex
            labels = {"alertname": name, "Hostname": "n1", "instance": "10.0.0.1:9400"}
            if xid is not None:
                labels["xid"] = xid
            alert = {"state": "firing", "labels": labels, "value": values.get(name, "1")}
            signals = signals_from_alerts([alert])["n1"]
            assert signals != NodeSignals(node="n1"), f"{name} set no signal"
            assert ENGINE.decide(signals).action is Action.parse(rule["labels"]["action"]), (name, xid)


def test_efa_alert_keyed_by_instance_renders_for_slurm() -> None:
    alert = {"state": "firing", "value": "3", "labels": {"alertname": "FmstackEfaErrors", "instance": "10.0.0.1:9400"}}
    by_node = signals_from_alerts([alert])
    assert list(by_node) == ["10.0.0.1"] and by_node["10.0.0.1"].efa_error_count == 3
    missing = {"state": "firing", "labels": {"alertname": "FmstackEfaDeviceMissing", "instance": "10.0.0.1:9400"}}
    decision = ENGINE.decide(signals_from_alerts([alert, missing])["10.0.0.1"])
    assert render_slurm("10.0.0.1", decision)[0].endswith(" 10.0.0.1")
    assert alert_node({"instance": "[fd00::1]:9400"}) == "fd00::1"
    assert alert_node({"instance": "n7"}) == "n7"


def test_gpu_not_readable_reboots() -> None:
    alert = {"state": "firing", "labels": {"alertname": "FmstackGpuNotReadable", "Hostname": "n2", "gpu": "3"}}
    assert ENGINE.decide(signals_from_alerts([alert])["n2"]).action is Action.REBOOT_NODE
