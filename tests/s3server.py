"""A real S3-compatible server for tests: moto_server on a free 127.0.0.1 port, waited for until it answers."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

START_TIMEOUT_S = 90.0
"""moto_server imports most of moto before it listens: seconds on an idle machine, tens on a loaded 2-core CI box."""


@contextmanager
def moto_server() -> Iterator[str]:
    """Yield the endpoint URL of a running moto_server; skip the test where it is not installed."""
    exe = shutil.which("moto_server")
    if exe is None:
        pytest.skip("moto_server not installed (pip install 'moto[server]')")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)  # fmt: skip
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors="replace")[-2000:] if proc.stderr else ""
                raise RuntimeError(f"moto_server exited with {proc.returncode} before listening: {err}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"moto_server did not listen on port {port} within {START_TIMEOUT_S:g} s"
                    ) from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
