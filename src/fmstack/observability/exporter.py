"""The exporter: sources read at scrape time into a fresh ``CollectorRegistry`` per instance, served over HTTP.

A source is anything with a ``name`` and a ``collect()`` that yields prometheus-client metric families (the
custom-collector pattern of ``prometheus_client/gc_collector.py``). Each scrape runs every source inside a guard:
a source that raises is reported as ``fmstack_exporter_source_up{source} 0`` and counted in
``fmstack_exporter_source_errors_total{source}``; the rest of the scrape is served unchanged. A source that raises
:class:`SourceDown` is down all the same, and the families it carries (what the source knows without reading, such
as a configured expected count) are still served. Per-source time is
``fmstack_exporter_source_duration_seconds{source}`` (like node_exporter's ``node_scrape_collector_*``), and
``fmstack_exporter_source_last_success_timestamp_seconds{source}`` the last time it was read successfully.
A source that can hang (NVML) is wrapped in :class:`~fmstack.observability.poller.PolledSource`: it is read on a
background thread and the scrape serves its last good read, so a hung read never holds the scrape.
With ``hostname``, these families carry a ``Hostname`` label as the GPU and EFA series do. With ``info``,
``fmstack_exporter_build_info{version, <info labels>}`` says what served the scrape (``gpu_backend``: nvml, fake,
none), so data from the scripted fake can be told from a real GPU's.

The HTTP server binds 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from fmstack.observability.exposition import CONTENT_TYPE, LabelCache, render_text

DEFAULT_BIND = "127.0.0.1"
DEFAULT_PORT = 9400
"""dcgm-exporter's port (shared/reference/observability.md §1): fmstack replaces it on a node."""


class SourceDown(OSError):
    """A source could not be read; ``families`` are served anyway: its configuration (an expected device count), never
    a value it failed to read, so that a rule can tell "down where devices are expected" from "down"."""

    def __init__(self, message: str, families: Sequence[Metric] = ()) -> None:
        super().__init__(message)
        self.families = list(families)


class Source(Protocol):
    """One place metrics come from (NVML, EFA sysfs, Lustre, the application)."""

    name: str

    def collect(self) -> Iterable[Metric]: ...


class Exporter:
    """Holds the sources, their health counters and its own registry; :meth:`render` is one scrape."""

    def __init__(
        self,
        sources: Sequence[Source],
        clock: Callable[[], float] = time.perf_counter,
        *,
        hostname: str | None = None,
        wall_clock: Callable[[], float] = time.time,
        info: dict[str, str] | None = None,
    ) -> None:
        names = [s.name for s in sources]
        if len(set(names)) != len(names):
            raise ValueError(f"source names must be unique, got {names}")
        self.sources = list(sources)
        self._clock = clock
        self._wall_clock = wall_clock
        self.hostname = hostname
        self.info = info
        """Labels of ``fmstack_exporter_build_info`` besides ``version`` (e.g. ``gpu_backend``); None: not exported."""
        self.last_success: dict[str, float] = {}
        self._lock = threading.Lock()
        self.errors: dict[str, int] = dict.fromkeys(names, 0)
        self.last_error: dict[str, str] = {}
        self.scrapes = 0
        self._labels = LabelCache()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Guard(self))

    def collect(self) -> Iterator[Metric]:
        host = [] if self.hostname is None else [self.hostname]
        names = ["source"] + (["Hostname"] if host else [])
        up = GaugeMetricFamily("fmstack_exporter_source_up", "1 if the source was read in this scrape", labels=names)
        errs = CounterMetricFamily("fmstack_exporter_source_errors", "Scrapes in which the source failed", labels=names)
        dur = GaugeMetricFamily(
            "fmstack_exporter_source_duration_seconds", "Time to read the source in this scrape", labels=names
        )
        last = GaugeMetricFamily(
            "fmstack_exporter_source_last_success_timestamp_seconds",
            "When the source was last read successfully (a polled source: its last background read)",
            labels=names,
        )
        with self._lock:
            self.scrapes += 1
            for source in self.sources:
                start = self._clock()
                try:
                    families = list(source.collect())
                    ok = True
                except Exception as exc:  # a failing source must never break the scrape
                    families, ok = (exc.families if isinstance(exc, SourceDown) else []), False
                    self.errors[source.name] += 1
                    self.last_error[source.name] = f"{type(exc).__name__}: {exc}"
                yield from families
                if ok:
                    polled = getattr(source, "last_success_s", None)
                    self.last_success[source.name] = self._wall_clock() if polled is None else float(polled)
                labels = [source.name, *host]
                up.add_metric(labels, 1.0 if ok else 0.0)
                errs.add_metric(labels, float(self.errors[source.name]))
                dur.add_metric(labels, self._clock() - start)
                if source.name in self.last_success:
                    last.add_metric(labels, self.last_success[source.name])
            scrapes = CounterMetricFamily("fmstack_exporter_scrapes", "Scrapes served by this exporter")
            scrapes.add_metric([], float(self.scrapes))
        yield from (up, errs, dur, last, scrapes)
        if self.info is not None:
            from fmstack import __version__

            names = ["version", *self.info, *(["Hostname"] if host else [])]
            build = GaugeMetricFamily("fmstack_exporter_build_info", "fmstack version and GPU backend", labels=names)
            build.add_metric([__version__, *self.info.values(), *host], 1.0)
            yield build

    def render(self) -> bytes:
        """One scrape as Prometheus text."""
        return render_text(self.registry.collect(), self._labels)

    def serve(self, bind: str = DEFAULT_BIND, port: int = DEFAULT_PORT) -> ThreadingHTTPServer:
        """Serve ``/metrics`` on a daemon thread; returns the server (``.server_address`` has the bound port).

        Starts the polling thread of every polled source first."""
        for source in self.sources:
            start = getattr(source, "start", None)
            if callable(start):
                start()
        server = ThreadingHTTPServer((bind, port), _handler(self))
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, name="fmstack-exporter", daemon=True).start()
        return server


class _Guard:
    """The one collector registered in the exporter's own registry."""

    def __init__(self, exporter: Exporter) -> None:
        self._exporter = exporter

    def collect(self) -> Iterator[Metric]:
        return self._exporter.collect()


def _handler(exporter: Exporter) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] == "/metrics":
                body, ctype, code = exporter.render(), CONTENT_TYPE, 200
            elif self.path == "/":
                body, ctype, code = b'<html><body><a href="/metrics">/metrics</a></body></html>', "text/html", 200
            else:
                body, ctype, code = b"not found\n", "text/plain", 404
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet: a scrape every few seconds is not news

    return Handler
