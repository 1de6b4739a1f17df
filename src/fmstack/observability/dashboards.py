"""Grafana dashboards generated from code (grafanalib): cluster, training job, inference service.

Panels are declared as data (:data:`CLUSTER`, :data:`TRAINING`, :data:`INFERENCE`: title, unit, PromQL) so the
same expressions feed the JSON and the promtool check (:func:`promql_check_rules`): every query is emitted as a
recording rule with the dashboard variables replaced, and ``promtool check rules`` parses it.
Layout follows Grafana 12239 / 21645 in spirit (temperatures, power, clocks, utilisation, Xid / ECC / row remap
health; shared/reference/observability.md §3). grafanalib is imported only when a dashboard is built.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class PanelSpec:
    """One time-series panel: title, Grafana unit id, PromQL expression, legend."""

    title: str
    unit: str
    expr: str
    legend: str = ""


HOST = 'Hostname=~"$Hostname"'
JOB = 'job_id=~"$job_id"'
MODEL = 'model_name=~"$model_name"'

CLUSTER: tuple[PanelSpec, ...] = (
    PanelSpec("GPU utilization", "percent", f"avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL{{{HOST}}})", "{{Hostname}}"),
    PanelSpec("SM active", "percentunit", f"avg by (Hostname) (DCGM_FI_PROF_SM_ACTIVE{{{HOST}}})", "{{Hostname}}"),
    PanelSpec("GPU temperature", "celsius", f"max by (Hostname) (DCGM_FI_DEV_GPU_TEMP{{{HOST}}})", "{{Hostname}}"),
    PanelSpec("Power draw", "watt", f"sum by (Hostname) (DCGM_FI_DEV_POWER_USAGE{{{HOST}}})", "{{Hostname}}"),
    PanelSpec("Framebuffer used", "mbytes", f"sum by (Hostname) (DCGM_FI_DEV_FB_USED{{{HOST}}})", "{{Hostname}}"),
    PanelSpec(
        "Xid events (15 min)",
        "short",
        # A GPU's first Xid of a kind creates its counter at 1: increase() sees no change there, so series that did
        # not exist 15 min ago count with their whole value (tests/observability/rules_test.yml tests this query).
        f"sum by (Hostname, xid) ((increase(fmstack_gpu_xid_errors_total{{{HOST}}}[15m])"
        f" and fmstack_gpu_xid_errors_total{{{HOST}}} offset 15m) or fmstack_gpu_xid_errors_total{{{HOST}}})",
        "{{Hostname}} xid {{xid}}",
    ),
    PanelSpec("Uncorrectable ECC (volatile)", "short", f"sum by (Hostname) (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{HOST}}})"),
    PanelSpec(
        "Corrected ECC per hour",
        "short",
        f"sum by (Hostname) (rate(DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{{{HOST}}}[1h])) * 3600",
        "{{Hostname}}",
    ),
    PanelSpec(
        "Row remap failure / pending",
        "short",
        f"max by (Hostname) (DCGM_FI_DEV_ROW_REMAP_FAILURE{{{HOST}}}) + max by (Hostname) "
        f"(fmstack_gpu_row_remap_pending{{{HOST}}})",
        "{{Hostname}}",
    ),
    PanelSpec(
        "Thermal throttling (share of time)",
        "percentunit",
        f"max by (Hostname) (rate(DCGM_FI_DEV_THERMAL_VIOLATION{{{HOST}}}[$__rate_interval])) / 1e6",
        "{{Hostname}}",
    ),
    PanelSpec("GPUs present vs expected", "short", f"fmstack_gpus{{{HOST}}} - fmstack_gpus_expected{{{HOST}}}"),
    PanelSpec("EFA transmit", "Bps", f"instance:node_amazonefa_tx_bytes:rate1m{{{HOST}}}", "{{Hostname}}"),
    PanelSpec("EFA receive", "Bps", f"instance:node_amazonefa_rx_bytes:rate1m{{{HOST}}}", "{{Hostname}}"),
    PanelSpec(
        "EFA retransmit timeouts",
        "short",
        f"sum by (Hostname) (increase(node_amazonefa_retrans_timeout_events{{{HOST}}}[$__rate_interval]))",
        "{{Hostname}}",
    ),
    PanelSpec("Lustre read", "Bps", f"instance:lustre_read_bytes:rate1m{{{HOST}}}", "{{Hostname}}"),
    PanelSpec(
        "Lustre write",
        "Bps",
        f"sum by (Hostname) (rate(lustre_write_bytes_total{{{HOST}}}[$__rate_interval]))",
        "{{Hostname}}",
    ),
    PanelSpec(
        "Exporter sources down",
        "short",
        f"sum by (Hostname, source) (1 - fmstack_exporter_source_up{{{HOST}}})",
        "{{Hostname}} {{source}}",
    ),
)

TRAINING: tuple[PanelSpec, ...] = (
    PanelSpec("Step time p50", "s", f"job_id:fmstack_train_step_duration_seconds:p50_5m{{{JOB}}}", "{{job_id}}"),
    PanelSpec(
        "Step time p99",
        "s",
        f"histogram_quantile(0.99, sum by (job_id, le) (rate(fmstack_train_step_duration_seconds_bucket{{{JOB}}}"
        "[$__rate_interval])))",
        "{{job_id}}",
    ),
    PanelSpec("Tokens per second", "short", f"job_id:fmstack_train_tokens_per_second:sum{{{JOB}}}", "{{job_id}}"),
    PanelSpec("Loss", "short", f"avg by (job_id) (fmstack_train_loss{{{JOB}}})", "{{job_id}}"),
    PanelSpec("MFU", "percentunit", f"avg by (job_id) (fmstack_train_mfu_ratio{{{JOB}}})", "{{job_id}}"),
    PanelSpec("Grad norm", "short", f"avg by (job_id) (fmstack_train_grad_norm{{{JOB}}})", "{{job_id}}"),
    PanelSpec(
        "Seconds since last step", "s", f"time() - max by (job_id) (fmstack_train_last_step_timestamp_seconds{{{JOB}}})"
    ),
    PanelSpec("Checkpoint save time", "s", f"max by (job_id) (fmstack_train_checkpoint_duration_seconds{{{JOB}}})"),
    PanelSpec("SM active (job nodes)", "percentunit", f"Hostname:DCGM_FI_PROF_SM_ACTIVE:avg{{{HOST}}}", "{{Hostname}}"),
)

INFERENCE: tuple[PanelSpec, ...] = (
    PanelSpec("TTFT p99", "s", f"model_name:fmstack_serving_ttft_seconds:p99_5m{{{MODEL}}}", "{{model_name}}"),
    PanelSpec(
        "TTFT p50",
        "s",
        "histogram_quantile(0.5, sum by (model_name, le) (rate(fmstack_serving_time_to_first_token_seconds_bucket"
        f"{{{MODEL}}}[$__rate_interval])))",
        "{{model_name}}",
    ),
    PanelSpec("Inter-token latency p99", "s", f"model_name:fmstack_serving_itl_seconds:p99_5m{{{MODEL}}}"),
    PanelSpec(
        "Requests per second",
        "reqps",
        f"sum by (model_name) (rate(fmstack_serving_requests_total{{{MODEL}}}[$__rate_interval]))",
    ),
    PanelSpec(
        "Generated tokens per second",
        "short",
        f"sum by (model_name) (rate(fmstack_serving_generation_tokens_total{{{MODEL}}}[$__rate_interval]))",
    ),
    PanelSpec(
        "TTFT SLO burn rate (1 h)",
        "short",
        f"model_name:fmstack_serving_ttft_slo_errors:ratio_rate1h{{{MODEL}}} / 0.01",
        "{{model_name}}",
    ),
)

DASHBOARDS: dict[str, tuple[str, tuple[PanelSpec, ...], tuple[str, ...]]] = {
    "cluster": ("fmstack cluster", CLUSTER, ("Hostname",)),
    "training": ("fmstack training job", TRAINING, ("job_id", "Hostname")),
    "inference": ("fmstack inference service", INFERENCE, ("model_name",)),
}
"""name -> (title, panels, template variables)."""

_VARIABLE_QUERIES = {
    "Hostname": "label_values(DCGM_FI_DEV_GPU_UTIL, Hostname)",
    "job_id": "label_values(fmstack_train_steps_total, job_id)",
    "model_name": "label_values(fmstack_serving_requests_total, model_name)",
}


def build_dashboard(name: str) -> dict[str, Any]:
    """The Grafana JSON model of one dashboard (``name`` in :data:`DASHBOARDS`)."""
    from grafanalib import core as g
    from grafanalib._gen import DashboardEncoder

    title, panels, variables = DASHBOARDS[name]
    ds = "${datasource}"
    templates = [g.Template(name="datasource", query="prometheus", type="datasource", label="Data source")]
    for var in variables:
        templates.append(
            g.Template(
                name=var, query=_VARIABLE_QUERIES[var], dataSource=ds, includeAll=True, multi=True, allValue=".*"
            )
        )
    grafana_panels = []
    for i, p in enumerate(panels):
        grafana_panels.append(
            g.TimeSeries(
                title=p.title,
                dataSource=ds,
                unit=p.unit,
                targets=[g.Target(expr=p.expr, legendFormat=p.legend, refId="A")],
                gridPos=g.GridPos(h=8, w=12, x=12 * (i % 2), y=8 * (i // 2)),
            )
        )
    dash = g.Dashboard(
        title=title,
        uid=f"fmstack-{name}",
        tags=["fmstack"],
        timezone="utc",
        templating=g.Templating(list=templates),
        panels=grafana_panels,
    ).auto_panel_ids()
    data: dict[str, Any] = json.loads(json.dumps(dash.to_json_data(), cls=DashboardEncoder))
    return data


def all_queries() -> list[tuple[str, str, str]]:
    """(dashboard, panel title, PromQL) for every panel of every dashboard."""
    return [(name, p.title, p.expr) for name, (_t, panels, _v) in DASHBOARDS.items() for p in panels]


def substitute_variables(expr: str) -> str:
    """Replace Grafana variables by what they expand to, so promtool can parse the query."""
    expr = expr.replace("$__rate_interval", "1m").replace("$__interval", "1m").replace("$__range", "1h")
    return re.sub(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?", ".*", expr)


def promql_check_rules(queries: list[tuple[str, str, str]]) -> dict[str, Any]:
    """A rule file with each query as a recording rule (``promtool check rules`` then parses every one)."""
    rules = []
    for i, (dash, _title, expr) in enumerate(queries):
        rules.append({"record": f"fmstack_dashboard_check:{dash}:{i}", "expr": substitute_variables(expr)})
    return {"groups": [{"name": "fmstack-dashboard-queries", "rules": rules}]}
