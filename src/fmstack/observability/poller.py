"""Read a slow or hang-prone source (NVML) on one background thread; scrapes serve its last good read.

NVML calls can block for a long time around Xid 79 / 119 (GPU fallen off the bus, GSP timeouts). Read inside the
scrape, one hung call would hold the exporter's lock, stall the EFA and Lustre sources with it and pile up HTTP
threads. :class:`PolledSource` instead reads its inner source every ``interval_s`` on a single daemon thread
(never more than one read in flight, so a hung call costs one thread, not one per scrape). A scrape returns the
families of the last successful read at once, or raises :class:`SourceStale` (the exporter reports the source
down) when that read is older than ``interval_s + deadline_s``: a read that has not come back within its
deadline, or reads that keep failing, take the source down while every other source is still served.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

from prometheus_client.core import Metric

from fmstack.observability.exporter import Source


class SourceStale(RuntimeError):
    """The polled source has no read recent enough to serve."""


class PolledSource:
    """Wraps a :class:`~fmstack.observability.exporter.Source`: reads it in the background, serves the cache."""

    def __init__(
        self,
        inner: Source,
        interval_s: float,
        deadline_s: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not interval_s > 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.inner = inner
        self.name = inner.name
        self.interval_s = interval_s
        self.deadline_s = interval_s if deadline_s is None else deadline_s
        if not self.deadline_s > 0:
            raise ValueError(f"deadline_s must be > 0, got {self.deadline_s}")
        self._clock = clock
        self._lock = threading.Lock()
        self._families: list[Metric] = []
        self.last_success_s: float | None = None
        """Wall-clock time (``clock``) at which the last successful read finished; None before the first."""
        self.last_error: str = ""
        self.read_started_s: float | None = None
        """When the read now in flight started (None when idle)."""
        self._stop = threading.Event()
        self._first = threading.Event()
        self._thread: threading.Thread | None = None

    def poll_once(self) -> None:
        """One read of the inner source (what the thread does every interval; tests call it directly)."""
        with self._lock:
            self.read_started_s = self._clock()
        try:
            families = list(self.inner.collect())
        except Exception as exc:  # kept for the scrape to report; the thread keeps polling
            with self._lock:
                self.last_error = f"{type(exc).__name__}: {exc}"
                self.read_started_s = None
            return
        with self._lock:
            self._families = families
            self.last_success_s = self._clock()
            self.last_error = ""
            self.read_started_s = None

    def start(self) -> None:
        """Start the polling thread (idempotent) and wait up to ``deadline_s`` for its first read to end."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=f"fmstack-poll-{self.name}", daemon=True)
        self._thread.start()
        self._first.wait(self.deadline_s)

    def stop(self, join_s: float = 0.0) -> None:
        """Ask the thread to stop after its current read (a hung read keeps its daemon thread); with ``join_s``,
        wait up to that long for it to end."""
        self._stop.set()
        if join_s > 0 and self._thread is not None:
            self._thread.join(join_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            start = time.monotonic()
            self.poll_once()
            self._first.set()
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - start)))

    def collect(self) -> Iterator[Metric]:
        now = self._clock()
        with self._lock:
            families, last, error, started = self._families, self.last_success_s, self.last_error, self.read_started_s
        if last is None or now - last > self.interval_s + self.deadline_s:
            why = "no successful read yet" if last is None else f"last successful read {now - last:.1f} s ago"
            if started is not None and now - started > self.deadline_s:
                why += f"; a read has been in flight for {now - started:.1f} s (deadline {self.deadline_s:g} s)"
            if error:
                why += f"; last error: {error}"
            raise SourceStale(why)
        return iter(families)
