"""Families a source renders itself, from a layout compiled once per structure of what it read.

A source such as EFA reads row by row (one ``hw_counters`` directory: 23 counters of one device and port), while
the text format wants family by family (``node_amazonefa_tx_bytes`` of every device, then the next counter). The
structure (which series, with which labels, in which families) stays the same from scrape to scrape; only the
values change. A :class:`SeriesLayout` is built from that structure once: the order of the families, the
permutation from read order to family order (an ``operator.itemgetter``), and for each family a list holding
its rendered ``# HELP`` / ``# TYPE`` header and every series' ``name{labels} `` prefix, with a free slot after
each prefix for the value. A scrape fills the slots with the values' text (one slice assignment per family) and
joins the list: no ``add_metric``, no ``Sample``, no label escaping per scrape.

The families are :class:`~fmstack.observability.exposition.BlockMetric` objects: prometheus-client ``Metric``
objects whose text is already written and whose ``samples`` are built on demand, so any other consumer (the
tests' reference rendering, the client's parser) sees the same family. The text is what
:func:`~fmstack.observability.exposition.render_text` writes for those samples (tests/observability/
test_exposition.py checks the two byte for byte).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from operator import itemgetter
from typing import Any, Generic, TypeVar

from prometheus_client.core import Metric

from fmstack.observability.exposition import BlockMetric, family_header, render_labels

FamilyKey = tuple[Hashable, str, str, str]
"""(key, metric name, documentation, prometheus-client type): series with equal keys form one family, which takes
the name, documentation and type of its first series."""

Series = tuple[FamilyKey, str, dict[str, str]]
"""One value's family, sample name (the family's name, or ``<name>_bucket`` ...) and labels."""


def row_series(rows: Iterable[tuple[dict[str, str], Iterable[FamilyKey]]]) -> list[Series]:
    """Series of rows that each hold one label set and one value per family (sample name = family name)."""
    return [(fk, fk[1], labels) for labels, keys in rows for fk in keys]


class SeriesLayout:
    """Series in read order compiled to family order.

    Families come in order of first appearance, or sorted by ``rank(key)`` when given (stable); a family's
    series keep read order: the order a dict of families filled series by series gives. Lines of samples whose
    name ends in ``_created`` are not written (as :func:`~fmstack.observability.exposition.render_text` does).
    """

    def __init__(self, series: Sequence[Series], rank: Callable[[Any], int] | None = None) -> None:
        by_key: dict[Hashable, list[tuple[int, Series]]] = {}
        for index, item in enumerate(series):
            by_key.setdefault(item[0][0], []).append((index, item))
        self.size = len(series)
        """Values a scrape hands to :meth:`families` (read order)."""
        perm: list[int] = []
        self._families: list[tuple[str, str, str, list[tuple[str, dict[str, str]]], int, int, _Slots, _Slots]] = []
        for key in list(by_key) if rank is None else sorted(by_key, key=rank):
            members = by_key[key]
            _, name, doc, typ = members[0][1][0]
            Metric(name, doc, typ)  # validates name and type once, so BlockMetric need not at every scrape
            start = len(perm)
            perm += [index for index, _ in members]
            samples = [(sample_name, labels) for _, (_, sample_name, labels) in members]
            header_name = name + "_total" if typ == "counter" and samples[0][0] == name + "_total" else name
            slots = _slots(family_header(header_name, doc, typ), samples)
            self._families.append((name, doc, typ, samples, start, len(perm), *slots))
        self._order: Callable[[Sequence[str]], tuple[str, ...]] = (
            itemgetter(*perm) if len(perm) > 1 else (lambda v: tuple(v[i] for i in perm))
        )

    def families(self, texts: Sequence[str], integral: bool = False) -> list[BlockMetric]:
        """One family per key from ``texts``, the values' text in read order (``size`` of them).

        ``integral``: the texts are decimal integers below 2**53 (``918273645123``), written with ``.0`` appended
        as ``repr`` writes such a float (the layout holds the ``.0`` in its fixed text).
        """
        if len(texts) != self.size:
            raise ValueError(f"layout holds {self.size} values, got {len(texts)}")
        ordered = self._order(texts)
        out = []
        new = BlockMetric.__new__
        for name, doc, typ, samples, start, stop, plain, with_point in self._families:
            values = ordered[start:stop]
            buf, pick = with_point if integral else plain
            if len(buf) > 1:
                buf[1::2] = values if pick is None else pick(values)
            fam = new(BlockMetric)
            fam.name, fam.documentation, fam.type, fam.unit, fam._extra = name, doc, typ, "", []
            fam.text, fam.series, fam.value_texts = "".join(buf), samples, values
            out.append(fam)
        return out


_Slots = tuple[list[str], Callable[[Sequence[str]], Sequence[str]] | None]
"""A family's fixed text with an empty slot (odd positions) per written value, and which values fill the slots
(None: all of them, in order)."""


def _slots(header: str, samples: list[tuple[str, dict[str, str]]]) -> tuple[_Slots, _Slots]:
    """Fixed text for float value texts and for integer value texts (followed by ``.0``)."""
    written = [i for i, (sample_name, _) in enumerate(samples) if not sample_name.endswith("_created")]
    pick: Callable[[Sequence[str]], Sequence[str]] | None = None
    if len(written) != len(samples):
        pick = (lambda v: tuple(v[i] for i in written)) if len(written) < 2 else itemgetter(*written)
    out = []
    for end in ("\n", ".0\n"):
        buf = [header]
        for i in written:
            sample_name, labels = samples[i]
            buf[-1] += sample_name + (render_labels(labels) if labels else "") + " "
            buf += ["", end]
        out.append((buf, pick))
    return out[0], out[1]


L = TypeVar("L", bound=SeriesLayout)


class LayoutCache(Generic[L]):
    """Layouts by structure key, bounded (structure churn, e.g. devices coming and going, cannot grow it)."""

    def __init__(self, max_entries: int = 64) -> None:
        self.max_entries = max_entries
        self.entries: dict[Hashable, L] = {}

    def get(self, key: Hashable) -> L | None:
        return self.entries.get(key)

    def put(self, key: Hashable, layout: L) -> L:
        if len(self.entries) >= self.max_entries:
            self.entries.clear()
        self.entries[key] = layout
        return layout
