"""Open a local HTML file in Debian's headless Chromium and report what it rendered.

Shared by the report tests (plan, scale, serve, simulate). Chromium is started with the flags
DESIGN.md lists (no network, fresh profile). Returns the DOM after scripts ran and the console errors.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
]


@dataclass
class Rendered:
    dom: str
    console_errors: list[str]


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("headless chromium not installed (scripts/test.sh installs Debian's chromium)")
    raise AssertionError  # unreachable


def render(page: Path, *, timeout_s: float = 90.0) -> Rendered:
    """The DOM of ``page`` after its scripts ran, and the console errors Chromium logged."""
    exe = chromium()
    with tempfile.TemporaryDirectory() as profile:
        log = Path(profile) / "chrome_debug.log"
        proc = subprocess.run(
            [exe, *FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
             "--virtual-time-budget=5000", "--dump-dom", page.resolve().as_uri()],
            capture_output=True, text=True, timeout=timeout_s,
        )  # fmt: skip
        stderr = proc.stderr + (log.read_text(errors="replace") if log.exists() else "")
    errors = [ln for ln in stderr.splitlines() if "CONSOLE" in ln and ("ERROR" in ln or "Uncaught" in ln)]
    return Rendered(dom=proc.stdout, console_errors=errors)
