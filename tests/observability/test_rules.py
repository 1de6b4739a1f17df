"""Rules and dashboards through the real promtool: check, unit tests for every rule, every dashboard query."""

from __future__ import annotations

import re
import shutil
import subprocess
from importlib import resources
from pathlib import Path

import pytest
import yaml

from fmstack.observability.actions import Action
from fmstack.observability.dashboards import DASHBOARDS, all_queries, build_dashboard, promql_check_rules
from fmstack.observability.xid import load_xid_catalog, xids_for

HERE = Path(__file__).resolve().parent
RULES = Path(str(resources.files("fmstack.observability").joinpath("rules/fmstack-rules.yml")))
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian package prometheus)")


def _rules() -> list[dict[str, str]]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.prometheus
@needs_promtool
def test_promtool_check_rules() -> None:
    proc = _promtool("check", "rules", str(RULES))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in proc.stdout


@pytest.mark.prometheus
@needs_promtool
def test_promtool_unit_tests_pass(tmp_path: Path) -> None:
    tests = yaml.safe_load((HERE / "rules_test.yml").read_text())
    tests["rule_files"] = [str(RULES)]  # the installed package's copy
    (tmp_path / "rules_test.yml").write_text(yaml.safe_dump(tests, sort_keys=False))
    proc = _promtool("test", "rules", str(tmp_path / "rules_test.yml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_every_rule_has_a_unit_test() -> None:
    tests = yaml.safe_load((HERE / "rules_test.yml").read_text())["tests"]
    alerts_tested = {a["alertname"] for t in tests for a in t.get("alert_rule_test", [])}
    exprs_tested = {e["expr"] for t in tests for e in t.get("promql_expr_test", [])}
    for rule in _rules():
        if "alert" in rule:
            assert rule["alert"] in alerts_tested, f"alert {rule['alert']} has no alert_rule_test"
        else:
            assert rule["record"] in exprs_tested, f"recording rule {rule['record']} has no promql_expr_test"


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    # a rule that can never fire, and one that fires on everything, both pass a test that only checks one side
    # (until session 15, 9 of 23 alerts had no case where they must stay silent, e.g. below the threshold or
    # before their for:)
    tests = yaml.safe_load((HERE / "rules_test.yml").read_text())["tests"]
    cases = [a for t in tests for a in t.get("alert_rule_test", [])]
    for rule in _rules():
        if "alert" in rule:
            mine = [c for c in cases if c["alertname"] == rule["alert"]]
            assert any(c.get("exp_alerts") for c in mine), f"{rule['alert']}: no case where it fires"
            assert any(not c.get("exp_alerts") for c in mine), f"{rule['alert']}: no case where it stays silent"


def test_xid_alert_regexes_match_the_catalog() -> None:
    table = load_xid_catalog()
    by_alert = {r["alert"]: r["expr"] for r in _rules() if "alert" in r}
    for alert, action in [
        ("FmstackGpuXidReplaceNode", Action.REPLACE_NODE),
        ("FmstackGpuXidRebootRequired", Action.REBOOT_NODE),
        ("FmstackGpuXidResetRequired", Action.RESET_GPU),
        ("FmstackGpuXidRestartJob", Action.RESTART_JOB),
    ]:
        m = re.search(r'xid=~"([0-9|]+)"', by_alert[alert])
        assert m, alert
        expected = [x for x in xids_for(table, action) if x not in NOT_ALERTED]
        assert [int(x) for x in m.group(1).split("|")] == expected, alert


NOT_ALERTED = {45}
"""Xid 45 (preemptive cleanup) is logged on every normal job kill: no alert (NVIDIA Xid catalog, WORKFLOW_XID_45)."""


def test_xid_45_is_not_alerted_but_known_to_the_engine() -> None:
    from fmstack.observability.health import HealthEngine, NodeSignals

    for rule in _rules():
        m = re.search(r'xid=~"([0-9|]+)"', rule.get("expr", ""))
        if m:
            assert "45" not in m.group(1).split("|"), rule["alert"]
    engine = HealthEngine()
    assert 45 in engine.xid_table
    assert engine.decide(NodeSignals(xids=[45, 79])).action is Action.REBOOT_NODE  # 45 follows the other Xid


def test_every_alert_names_an_action_the_engine_knows() -> None:
    for rule in _rules():
        if "alert" in rule:
            Action.parse(rule["labels"]["action"])
            assert rule["labels"]["severity"] in ("critical", "warning", "info")


def test_dashboards_are_grafana_json() -> None:
    for name, (title, panels, variables) in DASHBOARDS.items():
        d = build_dashboard(name)
        assert d["title"] == title and d["uid"] == f"fmstack-{name}"
        assert [p["targets"][0]["expr"] for p in d["panels"]] == [p.expr for p in panels]
        assert len({p["id"] for p in d["panels"]}) == len(panels)
        assert [t["name"] for t in d["templating"]["list"]] == ["datasource", *variables]


@pytest.mark.prometheus
@needs_promtool
def test_every_dashboard_query_parses_in_promtool(tmp_path: Path) -> None:
    queries = all_queries()
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump(promql_check_rules(queries)))
    proc = _promtool("check", "rules", str(path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(queries)} rules found" in proc.stdout


def test_dashboard_and_rule_metrics_exist() -> None:
    """Every metric a query names is exported by fmstack's exporter (fake node) or recorded by a rule."""
    from fmstack.observability.app_metrics import AppMetrics
    from fmstack.observability.app_source import AppSource
    from fmstack.observability.efa import EfaSource
    from fmstack.observability.exporter import Exporter
    from fmstack.observability.fake import FakeGpuBackend
    from fmstack.observability.gpu_source import GpuSource
    from fmstack.observability.lustre import LustreSource
    from fmstack.observability.sysfs import DictFs

    gpu = FakeGpuBackend(num_gpus=2)
    gpu.inject_xid(0, 79)
    fs = DictFs.from_tree(HERE / "fixtures/p5-node")
    app = AppMetrics(job_id="j", model_name="m")
    app.record_step(1.0, 10, loss=1.0, mfu=0.5, grad_norm=1.0)
    app.record_checkpoint(3.0)
    app.record_request(0.1, [0.01], 5, 1)
    text = Exporter([GpuSource(gpu, "n", 2), EfaSource(fs, "n", 2), LustreSource(fs), AppSource(app)]).render()
    exported = {ln.split("{")[0].split(" ")[0] for ln in text.decode().splitlines() if not ln.startswith("#")}
    recorded = {r["record"] for r in _rules() if "record" in r}
    exprs = [q for _, _, q in all_queries()] + [r["expr"] for r in _rules()]
    functions = {"sum", "avg", "max", "by", "rate", "increase", "histogram_quantile", "time", "label_replace", "and"}
    for expr in exprs:
        expr = re.sub(r'"[^"]*"', '""', expr)  # drop string literals (label values, regexes)
        expr = re.sub(r"\{[^}]*\}", "", expr)
        expr = re.sub(r"\([^()]*\)\s*\(", "(", expr)  # "by (a, b) (" grouping lists
        for name in re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", expr):
            if name in functions or name.startswith("$") or name in {"le", "m", "h", "s", "e6"}:
                continue
            if not (name.startswith(("DCGM_", "node_", "lustre_", "fmstack")) or ":" in name):
                continue
            assert name in exported or name in recorded, f"{name} in {expr!r} is neither exported nor recorded"


def test_xid_panel_query_has_a_promtool_test() -> None:
    """The cluster dashboard's Xid panel (first Xid of a kind must count) is evaluated in rules_test.yml."""
    from fmstack.observability.dashboards import CLUSTER, substitute_variables

    tests = yaml.safe_load((HERE / "rules_test.yml").read_text())["tests"]
    exprs = {e["expr"] for t in tests for e in t.get("promql_expr_test", [])}
    panel = next(p for p in CLUSTER if p.title.startswith("Xid events"))
    assert substitute_variables(panel.expr) in exprs


def test_dashboards_match_the_reviewed_golden_files() -> None:
    """Regenerate after a reviewed change: fmstack exporter --dashboards tests/observability/golden --force"""
    import json

    for name in DASHBOARDS:
        golden = (HERE / "golden" / f"fmstack-{name}.json").read_text()
        assert json.dumps(build_dashboard(name), indent=2) + "\n" == golden, f"{name}: dashboard changed"


def test_framebuffer_panel_unit_is_mebibytes() -> None:
    """DCGM_FI_DEV_FB_USED is in MiB: Grafana's ``mbytes`` (binary), not ``decmbytes`` (10**6 bytes)."""
    from fmstack.observability.dashboards import CLUSTER

    assert next(p for p in CLUSTER if "FB_USED" in p.expr).unit == "mbytes"
