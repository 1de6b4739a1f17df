"""Prometheus text exposition (format 0.0.4) for prometheus-client metric families.

Why not ``prometheus_client.generate_latest``: it always writes ``# TYPE <name>_total counter`` for counters,
while dcgm-exporter and the aws-samples EFA exporter expose counters without ``_total``
(``DCGM_FI_DEV_ECC_DBE_VOL_TOTAL``, ``node_amazonefa_tx_bytes``); dashboards and rules written for them need the
names verbatim (shared/reference/observability.md §0 item 5). Here a counter family's TYPE line uses the name its
samples carry: ``<name>_total`` when prometheus-client added the suffix, the bare name otherwise.
Format: https://prometheus.io/docs/instrumenting/exposition_formats/ (text-based format).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _escape_label(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def format_value(value: float) -> str:
    """Go-style float formatting as Prometheus writes it: ``+Inf``, ``-Inf``, ``NaN``, ``1`` -> ``1.0``."""
    if value == math.inf:
        return "+Inf"
    if value == -math.inf:
        return "-Inf"
    if math.isnan(value):
        return "NaN"
    return repr(float(value))


def render_text(families: Iterable[Any]) -> bytes:
    """Render metric families (objects with ``name``, ``documentation``, ``type``, ``samples``) as text."""
    out: list[str] = []
    for fam in families:
        mtype = {"unknown": "untyped", "info": "gauge", "stateset": "gauge"}.get(fam.type, fam.type)
        samples = [s for s in fam.samples if not s.name.endswith("_created")]
        name = fam.name
        if fam.type == "counter" and any(s.name == name + "_total" for s in samples):
            name += "_total"
        out.append(f"# HELP {name} {_escape_help(fam.documentation)}\n# TYPE {name} {mtype}\n")
        for s in samples:
            if s.labels:
                labels = ",".join(f'{k}="{_escape_label(v)}"' for k, v in s.labels.items())
                out.append(f"{s.name}{{{labels}}} {format_value(s.value)}\n")
            else:
                out.append(f"{s.name} {format_value(s.value)}\n")
    return "".join(out).encode("utf-8")
