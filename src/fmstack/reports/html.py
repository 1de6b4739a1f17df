"""Self-contained HTML pages: plotly figures inlined with their JavaScript, so a report opens offline.

Every report (plan, scale, serve, simulate) builds a list of sections and calls :func:`html_page`;
:func:`write_html` writes it atomically (temporary file, then rename) so a failed run never leaves a
half-written report over the user's previous one.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fmstack.fileio import atomic_write_text

_STYLE = """
body { font-family: -apple-system, 'Segoe UI', Roboto, sans-serif; margin: 2rem auto; max-width: 1200px;
       color: #1d1d1f; padding: 0 1rem; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.2rem; margin-top: 2rem; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 0.85rem; margin: 0.5rem 0; }
th, td { border: 1px solid #ddd; padding: 0.25rem 0.5rem; text-align: right; }
th { background: #f4f4f6; } td:first-child, th:first-child { text-align: left; }
.note { color: #555; font-size: 0.85rem; }
pre { background: #f4f4f6; padding: 0.5rem; white-space: pre-wrap; word-break: break-all; font-size: 0.8rem; }
"""


@dataclass(frozen=True, kw_only=True, slots=True)
class Section:
    """One part of a report: a heading, optional text, an optional table and optional plotly figures."""

    title: str
    text: str = ""
    table_header: Sequence[str] = ()
    table_rows: Sequence[Sequence[Any]] = ()
    figures: Sequence[Any] = field(default_factory=tuple)
    """plotly ``go.Figure`` objects."""
    code: str = ""
    """A command to copy (shown preformatted, after the text)."""
    notes: Sequence[str] = ()
    """Lines shown in small print after the text and the command."""


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def html_page(title: str, sections: Sequence[Section], *, subtitle: str = "") -> str:
    """One HTML document; plotly.js is inlined once, so the page needs no network."""
    import plotly.io as pio

    parts = [f"<h1>{html.escape(title)}</h1>"]
    if subtitle:
        parts.append(f"<p class='note'>{html.escape(subtitle)}</p>")
    first_figure = True
    for section in sections:
        parts.append(f"<h2>{html.escape(section.title)}</h2>")
        if section.text:
            parts.append(f"<p>{html.escape(section.text)}</p>")
        if section.code:
            parts.append(f"<pre>{html.escape(section.code)}</pre>")
        parts.extend(f"<p class='note'>{html.escape(note)}</p>" for note in section.notes)
        if section.table_header:
            parts.append(_table(section.table_header, section.table_rows))
        for fig in section.figures:
            parts.append(pio.to_html(fig, full_html=False, include_plotlyjs=bool(first_figure), validate=True))
            first_figure = False
    body = "\n".join(parts)
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>{body}</body></html>"
    )


def write_html(path: Path | str, content: str) -> Path:
    """Write ``content`` to ``path`` atomically; InputError when the folder is missing or not writable."""
    return atomic_write_text(path, content, field="html")
