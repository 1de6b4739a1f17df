"""Prometheus text exposition (format 0.0.4) for prometheus-client metric families.

Why not ``prometheus_client.generate_latest``: it always writes ``# TYPE <name>_total counter`` for counters,
while dcgm-exporter and the aws-samples EFA exporter expose counters without ``_total``
(``DCGM_FI_DEV_ECC_DBE_VOL_TOTAL``, ``node_amazonefa_tx_bytes``); dashboards and rules written for them need the
names verbatim (shared/reference/observability.md §0 item 5). Here a counter family's TYPE line uses the name its
samples carry: ``<name>_total`` when prometheus-client added the suffix, the bare name otherwise.
Format: https://prometheus.io/docs/instrumenting/exposition_formats/ (text-based format).

Sources write most of their families themselves (:class:`BlockMetric`, from :mod:`fmstack.observability.blocks`
layouts); :func:`render_text` copies their text and renders the other families sample by sample.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from prometheus_client.core import Metric
from prometheus_client.samples import Sample

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _escape_label(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


_SPECIAL = {"inf": "+Inf", "-inf": "-Inf", "nan": "NaN"}
_TYPES = {"unknown": "untyped", "info": "gauge", "stateset": "gauge"}


def format_value(value: float) -> str:
    """Go-style float formatting as Prometheus writes it: ``+Inf``, ``-Inf``, ``NaN``, ``1`` -> ``1.0``."""
    text = repr(value) if type(value) is float else repr(float(value))
    return _SPECIAL.get(text, text)


class LabelCache:
    """Rendered ``{k="v",...}`` strings by label tuple; one per exporter, so repeated scrapes skip escaping.

    Bounded: cleared when it exceeds ``max_entries`` (label churn, e.g. many Xid series, cannot grow it forever).
    """

    def __init__(self, max_entries: int = 100_000) -> None:
        self.max_entries = max_entries
        self.entries: dict[tuple[tuple[str, str], ...], str] = {}

    def render(self, labels: dict[str, str]) -> str:
        key = tuple(labels.items())
        text = self.entries.get(key)
        if text is None:
            if len(self.entries) >= self.max_entries:
                self.entries.clear()
            text = self.entries[key] = render_labels(labels)
        return text


def render_labels(labels: dict[str, str]) -> str:
    """``{k="v",...}`` in the dict's order, values escaped as the text format requires."""
    return "{" + ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels.items()) + "}"


class BlockMetric(Metric):
    """A family whose exposition ``text`` (header and sample lines) its source wrote, from a
    :class:`~fmstack.observability.blocks.SeriesLayout`; ``samples`` is built on demand for other consumers."""

    def __init__(
        self,
        name: str,
        documentation: str,
        typ: str,
        text: str,
        series: Sequence[tuple[str, dict[str, str]]],
        values: Sequence[str],
    ) -> None:
        super().__init__(name, documentation, typ)
        self.text = text
        self.series = series
        """Each sample's name and labels."""
        self.value_texts = values
        """Each sample's value as written (``repr`` of the float, ``+Inf``, ``NaN``, or an integer's digits)."""

    @property
    def samples(self) -> list[Sample]:
        return self._extra + [
            Sample(name, labels, float(v)) for (name, labels), v in zip(self.series, self.value_texts, strict=True)
        ]

    @samples.setter
    def samples(self, value: list[Sample]) -> None:
        self._extra = value  # Metric.__init__ sets []; samples added this way make render_text take the generic path


def value_texts(values: Sequence[float]) -> list[str]:
    """Float values as the text format writes them (``repr``; ``+Inf``, ``-Inf``, ``NaN``)."""
    if all(map(math.isfinite, values)):
        return list(map(repr, map(float, values)))
    return [_special(float(v)) for v in values]


def _special(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def _header(name: str, documentation: str, mtype: str) -> str:
    return f"# HELP {name} {_escape_help(documentation)}\n# TYPE {name} {mtype}\n"


def family_header(name: str, documentation: str, typ: str) -> str:
    """``# HELP`` and ``# TYPE`` lines of a family whose samples carry ``name`` (prometheus-client type names)."""
    return _header(name, documentation, _TYPES.get(typ, typ))


def render_text(families: Iterable[Any], cache: LabelCache | None = None) -> bytes:
    """Render metric families (objects with ``name``, ``documentation``, ``type``, ``samples``) as text."""
    labels_of = (cache or LabelCache()).render
    # Sources share one labels dict across a device's samples: render it once per scrape. The entry keeps the
    # dict alive, so its id cannot be reused by another dict while this function runs.
    by_id: dict[int, tuple[dict[str, str], str]] = {}
    out: list[str] = []
    append = out.append
    for fam in families:
        if type(fam) is BlockMetric and not fam._extra:  # its source wrote the text
            append(fam.text)
            continue
        samples = fam.samples
        if not samples:
            continue  # an empty family says nothing; its TYPE line could not be named right for counters
        mtype = _TYPES.get(fam.type, fam.type)
        name = fam.name
        if fam.type == "counter" and samples[0].name == name + "_total":
            name += "_total"
        append(_header(name, fam.documentation, mtype))
        for s in samples:
            if s.name.endswith("_created"):
                continue
            labels = s.labels
            if labels:
                entry = by_id.get(id(labels))
                if entry is None:
                    entry = by_id[id(labels)] = (labels, labels_of(labels))
                text = entry[1]
                value = repr(s.value) if type(s.value) is float else format_value(s.value)
                append(f"{s.name}{text} {_SPECIAL.get(value, value)}\n")
            else:
                append(f"{s.name} {format_value(s.value)}\n")
    return "".join(out).encode("utf-8")
