"""`fmstack exporter` and `fmstack health` through the CLI (in-process click runner)."""

from __future__ import annotations

import json
import shutil
import subprocess
from importlib import resources
from pathlib import Path

from click.testing import CliRunner

from fmstack.cli.main import cli


def _run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_exporter_once_on_the_fixture_node(fixtures: Path) -> None:
    out = _run(
        "exporter", "--backend", "fake", "--fake-script", str(fixtures / "nvml-h100x8.json"),
        "--sysfs-root", str(fixtures / "p5-node"), "--hostname", "n1", "--expected-gpus", "8", "--expected-efa", "32", "--once",
    )  # fmt: skip
    lines = out.splitlines()
    assert 'fmstack_gpus{Hostname="n1"} 8.0' in lines
    assert 'fmstack_efa_devices{Hostname="n1"} 2.0' in lines
    assert 'fmstack_efa_devices_expected{Hostname="n1"} 32.0' in lines
    assert 'node_amazonefa_rx_drops{device="rdmap16s27",port="1",Hostname="n1"} 0.0' in lines
    assert 'fmstack_exporter_source_up{source="lustre",Hostname="n1"} 1.0' in lines


def test_print_rules_is_the_packaged_file() -> None:
    packaged = resources.files("fmstack.observability").joinpath("rules/fmstack-rules.yml").read_text()
    assert _run("exporter", "--print-rules") == packaged


def test_dashboards_written_once(tmp_path: Path) -> None:
    out = _run("exporter", "--dashboards", str(tmp_path / "g"))
    names = sorted(Path(p).name for p in out.split())
    assert names == ["fmstack-cluster.json", "fmstack-inference.json", "fmstack-training.json"]
    assert (tmp_path / "g/fmstack-training.json").stat().st_mode & 0o777 == 0o644
    data = json.loads((tmp_path / "g/fmstack-training.json").read_text())
    assert data["uid"] == "fmstack-training"
    result = CliRunner().invoke(cli, ["exporter", "--dashboards", str(tmp_path / "g")])
    assert result.exit_code != 0  # refuses to overwrite; main() turns this into exit 2 (tests/bad_inputs.py)
    _run("exporter", "--dashboards", str(tmp_path / "g"), "--force")


def test_health_from_a_signals_file(tmp_path: Path) -> None:
    signals = [
        {"node": "n1", "xids": [79]},
        {"node": "n2", "row_remap_failure": True},
        {"node": "n3", "xids": [13]},
        {"node": "n4"},
    ]
    path = tmp_path / "signals.json"
    path.write_text(json.dumps({"nodes": signals}))
    rows = json.loads(_run("health", "--signals", str(path), "--json"))
    assert [r["action"] for r in rows] == ["REBOOT_NODE", "REPLACE_NODE", "RESTART_JOB", "NONE"]
    slurm = _run("health", "--signals", str(path), "--format", "slurm").splitlines()
    assert len(slurm) == 2
    assert slurm[0].startswith("scontrol reboot ASAP nextstate=resume") and slurm[0].endswith(" n1")
    assert slurm[1].startswith("scontrol update nodename=n2 state=drain reason='fmstack replace_node: row remap")
    k8s = _run("health", "--signals", str(path), "--format", "k8s").splitlines()
    assert "sagemaker.amazonaws.com/node-health-status=UnschedulablePendingReplacement" in k8s[2]


def test_health_xid_table() -> None:
    out = _run("health", "--xid", "48", "--xid", "63", "--node", "n1")
    assert "RESET_GPU" in out and "WORKFLOW_XID_48" in out


def test_exporter_serves_on_loopback_until_stopped(fixtures: Path) -> None:
    import re
    import signal
    import subprocess
    import sys
    import urllib.request

    proc = subprocess.Popen(
        [sys.executable, "-m", "fmstack", "exporter", "--backend", "fake", "--port", "0", "--hostname", "n1",
         "--sysfs-root", str(fixtures / "p5-node")],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        m = re.match(r"fmstack exporter: serving http://127\.0\.0\.1:(\d+)/metrics", line)
        assert m, line
        with urllib.request.urlopen(f"http://127.0.0.1:{m.group(1)}/metrics", timeout=10) as resp:
            assert b'fmstack_exporter_source_up{source="gpu",Hostname="n1"} 1.0' in resp.read()
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0


def test_exporter_names_pass_promtool_lint(fixtures: Path) -> None:
    # "_count", "_sum" and "_bucket" are the series suffixes of summaries and histograms (Prometheus docs, "Metric
    # and label naming"; client_golang promlint "non-histogram and non-summary metrics should not have ... suffix"):
    # the GPU and EFA device gauges were fmstack_gpus, fmstack_efa_devices and their expected_ twins
    out = _run(
        "exporter", "--backend", "fake", "--fake-script", str(fixtures / "nvml-h100x8.json"),
        "--sysfs-root", str(fixtures / "p5-node"), "--hostname", "n1", "--expected-gpus", "8", "--expected-efa", "32", "--once",
    )  # fmt: skip
    types = dict(ln.split()[2:4] for ln in out.splitlines() if ln.startswith("# TYPE "))
    reserved = [
        n for n, t in types.items() if t not in ("histogram", "summary") and n.endswith(("_count", "_sum", "_bucket"))
    ]
    assert reserved == []
    assert 'fmstack_gpus{Hostname="n1"} 8.0' in out.splitlines()
    promtool = shutil.which("promtool")
    if promtool is None:
        return
    lint = subprocess.run([promtool, "check", "metrics"], input=out, capture_output=True, text=True, timeout=60)
    assert "should not have" not in lint.stdout + lint.stderr, (
        lint.stdout + lint.stderr
    )  # DCGM names mirror dcgm-exporter


def test_health_from_saved_prometheus_alerts(tmp_path: Path) -> None:
    """`curl .../api/v1/alerts > alerts.json; fmstack health --alerts alerts.json`: firing node alerts -> signals per
    node (Hostname, else instance without the port) -> decisions; pending and job alerts do not act."""

    def alert(name: str, state: str = "firing", value: str = "1e+00", **labels: str) -> dict[str, object]:
        return {"labels": {"alertname": name, **labels}, "annotations": {}, "state": state, "value": value}

    alerts = [
        alert("FmstackGpuXidRebootRequired", Hostname="n1", gpu="3", xid="79"),
        alert("FmstackGpuMissing", "pending", Hostname="n1"),
        alert("FmstackGpuRowRemapFailure", Hostname="n2", gpu="0"),
        alert("FmstackEfaRetransmitTimeouts", value="3e+00", instance="10.0.0.3:9400", device="rdmap16s27"),
        alert("FmstackTrainingStalled", job_id="j1"),
        alert("FmstackGpuEccDbe", "pending", Hostname="n4", gpu="1"),
    ]
    path = tmp_path / "alerts.json"
    path.write_text(json.dumps({"status": "success", "data": {"alerts": alerts}}))
    rows = json.loads(_run("health", "--alerts", str(path), "--json"))
    assert [(r["node"], r["action"]) for r in rows] == [
        ("10.0.0.3", "NONE"),
        ("n1", "REBOOT_NODE"),
        ("n2", "REPLACE_NODE"),
    ]
    assert rows[0]["reasons"] == ["watch: 3 EFA errors / retransmit timeouts"]
    slurm = _run("health", "--alerts", str(path), "--format", "slurm").splitlines()
    assert [ln.split()[-1] if ln.startswith("scontrol reboot") else ln.split()[2] for ln in slurm] == [
        "n1", "nodename=n2",
    ]  # fmt: skip
    path.write_text(json.dumps(alerts))  # a bare list of alerts works too
    assert json.loads(_run("health", "--alerts", str(path), "--json")) == rows
