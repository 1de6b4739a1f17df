"""Storage bench against a local directory and a real S3-compatible server (moto_server on 127.0.0.1).

Bad input (unwritable path, missing bucket, unreachable endpoint) gives one line and leaves nothing behind.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fmstack.bench import storage
from fmstack.bench.storage import run_storage
from fmstack.errors import InputError
from tests.s3server import moto_server

SWEEP = [(64 << 10, 3), (1 << 20, 2)]
S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",  # never probe the instance-metadata address from a test
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_local_write_read_and_nothing_left(tmp_path: Path) -> None:
    results = run_storage(str(tmp_path), SWEEP)
    assert [(r.file_bytes, r.num_files) for r in results] == SWEEP
    for r in results:
        assert r.total_bytes == r.file_bytes * r.num_files
        assert r.write_gbps == pytest.approx(r.total_bytes / r.write_s / 1e9)
        assert r.write_gbps > 0 and r.read_gbps > 0
    assert list(tmp_path.iterdir()) == []


def _resident_fraction(path: Path) -> float:
    """Share of the file's pages in the page cache (mincore(2) on a mapping, which faults nothing in)."""
    libc = ctypes.CDLL(None, use_errno=True)
    size = path.stat().st_size
    page = mmap.PAGESIZE
    pages = (size + page - 1) // page
    with open(path, "rb") as f, mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY) as mm:
        view = (ctypes.c_char * size).from_buffer(mm)
        vec = (ctypes.c_ubyte * pages)()
        try:
            rc = libc.mincore(ctypes.c_void_p(ctypes.addressof(view)), ctypes.c_size_t(size), vec)
        finally:
            del view  # the mapping cannot close while a ctypes view holds it
    assert rc == 0, os.strerror(ctypes.get_errno())
    return sum(v & 1 for v in vec) / pages


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="no posix_fadvise on this OS")
def test_local_read_comes_from_the_storage_not_the_page_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the precondition: this filesystem drops clean pages on request (tmpfs keeps them: its pages are the storage)
    probe = tmp_path / "probe.bin"
    probe.write_bytes(os.urandom(1 << 20))
    fd = os.open(probe, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    if _resident_fraction(probe) > 0.1:
        pytest.skip(f"{tmp_path} keeps dropped pages in memory (tmpfs?)")
    probe.unlink()
    seen: list[float] = []
    read = storage._Local.read

    def spy(self: storage._Local, name: str) -> int:
        seen.append(_resident_fraction(self.root / name))
        return read(self, name)

    monkeypatch.setattr(storage._Local, "read", spy)
    run_storage(str(tmp_path), [(1 << 20, 2), (4 << 20, 1)])
    # every file is read with (nearly) none of its pages in RAM: the read GB/s is the storage's; before the fix
    # the fsynced pages stayed cached and every fraction was 1.0
    assert len(seen) == 3 and max(seen) < 0.1, seen


def test_not_a_directory(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is not an existing directory"):
        run_storage(str(tmp_path / "nope"), SWEEP)
    assert list(tmp_path.iterdir()) == []


def test_no_write_permission() -> None:
    # /sys refuses new entries even to root (EPERM), so this holds whoever runs the tests
    with pytest.raises(InputError, match="no write permission in /sys"):
        run_storage("/sys", SWEEP)


def test_bad_sweep() -> None:
    with pytest.raises(InputError, match="allowed: both > 0"):
        run_storage("/tmp", [(0, 1)])


@pytest.fixture(scope="module")
def moto() -> Iterator[str]:
    pytest.importorskip("s3fs")
    with moto_server() as endpoint:
        yield endpoint


@pytest.fixture()
def s3_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in S3_ENV.items():
        monkeypatch.setenv(key, value)


def _s3fs(endpoint: str) -> object:
    import s3fs

    return s3fs.S3FileSystem(client_kwargs={"endpoint_url": endpoint})


def test_s3_write_read_and_cleanup(moto: str, s3_env: None) -> None:
    fs = _s3fs(moto)
    fs.mkdir("bench-ok")  # type: ignore[attr-defined]
    results = run_storage("s3://bench-ok/runs", SWEEP, endpoint_url=moto)
    assert [(r.file_bytes, r.num_files) for r in results] == SWEEP
    assert all(r.write_gbps > 0 and r.read_gbps > 0 for r in results)
    fs.invalidate_cache()  # type: ignore[attr-defined]
    assert fs.find("bench-ok") == []  # type: ignore[attr-defined]


def test_s3_missing_bucket(moto: str, s3_env: None) -> None:
    with pytest.raises(InputError, match="s3://no-such-bucket does not exist"):
        run_storage("s3://no-such-bucket/x", SWEEP, endpoint_url=moto)


def test_s3_unreachable_endpoint_is_one_line_and_fast(tmp_path: Path) -> None:
    pytest.importorskip("s3fs")
    dead = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    env = {**os.environ, **S3_ENV}
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "fmstack", "bench", "storage", "--path", "s3://b/x", "--endpoint-url", dead],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert time.monotonic() - start < 60
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("fmstack: error: endpoint-url: cannot reach"), proc.stderr
    assert list(tmp_path.iterdir()) == []
