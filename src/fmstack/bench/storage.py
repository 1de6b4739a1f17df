"""Storage bench: sequential write (made durable) and read throughput over file sizes and counts.

Local paths are written with ``os.fsync`` before the clock stops, and the written (now clean) pages are then dropped
from this machine's page cache (``posix_fadvise(POSIX_FADV_DONTNEED)``, outside the clock), so the read that follows
comes from the storage, not from RAM: without it a local disk that writes 0.4-1.0 GB/s read back at 4-18 GB/s
(2-vCPU VM, 2026-11-24), the page cache's rate. A storage server's own cache is not this machine's to drop.
fsspec URLs (``s3://bucket/prefix`` through s3fs) count a file as written when ``close()`` returns, which for S3 is
when the (multipart) upload completed.
Everything is written under a fresh ``fmstack-bench-<id>`` folder that is removed afterwards, also on error or
Ctrl-C, so a bench never leaves partial files behind.
"""

from __future__ import annotations

import inspect
import os
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fmstack.errors import InputError

CHUNK_BYTES = 4 << 20


@dataclass(frozen=True, kw_only=True, slots=True)
class StorageResult:
    """Writing then reading ``num_files`` files of ``file_bytes`` each."""

    target: str
    file_bytes: int
    num_files: int
    write_s: float
    read_s: float

    @property
    def total_bytes(self) -> int:
        return self.file_bytes * self.num_files

    @property
    def write_gbps(self) -> float:
        return self.total_bytes / self.write_s / 1e9

    @property
    def read_gbps(self) -> float:
        return self.total_bytes / self.read_s / 1e9


def default_sweep(quick: bool) -> list[tuple[int, int]]:
    """(file bytes, file count) pairs: small files many times, big files a few times."""
    if quick:
        return [(64 << 10, 8), (1 << 20, 4), (8 << 20, 1)]
    return [(64 << 10, 64), (1 << 20, 32), (16 << 20, 8), (128 << 20, 2)]


def _check_no_required_args(protocol: str, cls: Any) -> None:
    """A filesystem built from a URL alone: ftp://, sftp://, ... need a host argument, and constructing one without it
    raised TypeError (a traceback, then a second one from the half-built object's __del__)."""
    required = [
        p.name for p in list(inspect.signature(cls.__init__).parameters.values())[1:]
        if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]  # fmt: skip
    if required:
        raise ValueError(f"{protocol}:// needs {', '.join(required)} besides the URL; use a local folder or s3://")


def _is_url(target: str) -> bool:
    return "://" in target and not target.startswith("file://")


class _Local:
    """Plain files with fsync: the durable-write baseline."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def mkdir(self) -> None:
        self.root.mkdir()

    def write(self, name: str, data: bytes, size: int) -> None:
        fd = os.open(self.root / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        view = memoryview(data)
        try:
            done = 0
            while done < size:
                done += os.write(fd, view[: min(len(view), size - done)])
            os.fsync(fd)
        finally:
            os.close(fd)

    def evict(self, name: str) -> None:
        """Drop the file's pages from the page cache (clean after the fsync), so reading it hits the storage."""
        advise = getattr(os, "posix_fadvise", None)  # Linux and most Unixes; not macOS
        if advise is None:
            return
        fd = os.open(self.root / name, os.O_RDONLY)
        try:
            advise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)

    def read(self, name: str) -> int:
        got = 0
        with open(self.root / name, "rb", buffering=0) as f:
            while chunk := f.read(CHUNK_BYTES):
                got += len(chunk)
        return got

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


class _Fsspec:
    """Any fsspec filesystem (s3:// through s3fs)."""

    def __init__(self, url: str, endpoint_url: str | None) -> None:
        import fsspec

        protocol = url.split("://", 1)[0]
        opts: dict[str, Any] = {}
        if protocol == "s3":
            # one quick attempt: an unreachable endpoint must fail in seconds, not after minutes of retries
            config = {"retries": {"max_attempts": 1, "mode": "standard"}, "connect_timeout": 3, "read_timeout": 30}
            opts["config_kwargs"] = config
            if endpoint_url:
                opts["client_kwargs"] = {"endpoint_url": endpoint_url}
        try:
            _check_no_required_args(protocol, fsspec.get_filesystem_class(protocol))
            self.fs = fsspec.filesystem(protocol, **opts)
        except (ImportError, ValueError) as exc:
            raise InputError("path", f"no filesystem for {protocol}:// ({exc}); for s3 install fmstack[s3]") from None
        self.root = url.rstrip("/")
        self.endpoint_url = endpoint_url

    def mkdir(self) -> None:
        """Check the bucket (first path component) can be listed: reachable endpoint, bucket exists."""
        protocol, rest = self.root.split("://", 1)
        bucket = f"{protocol}://{rest.split('/', 1)[0]}"
        try:
            self.fs.ls(bucket)
        except FileNotFoundError:
            raise InputError("path", f"{bucket} does not exist") from None
        except PermissionError as exc:
            raise InputError("path", f"no permission to list {bucket}: {_short(exc)}") from None
        except OSError:
            raise
        except Exception as exc:  # botocore's connection errors are not OSErrors
            where = self.endpoint_url or "the default endpoint"
            raise InputError("endpoint-url", f"cannot reach {where} for {bucket}: {_short(exc)}") from None

    def write(self, name: str, data: bytes, size: int) -> None:
        view = memoryview(data)
        with self.fs.open(f"{self.root}/{name}", "wb", block_size=max(5 << 20, CHUNK_BYTES)) as f:
            done = 0
            while done < size:
                n = min(len(view), size - done)
                f.write(view[:n])
                done += n

    def evict(self, name: str) -> None:
        """Nothing to drop: s3fs keeps no page cache across file objects."""

    def read(self, name: str) -> int:
        got = 0
        with self.fs.open(f"{self.root}/{name}", "rb", block_size=CHUNK_BYTES) as f:
            while chunk := f.read(CHUNK_BYTES):
                got += len(chunk)
        return got

    def cleanup(self) -> None:
        try:
            if self.fs.exists(self.root):
                self.fs.rm(self.root, recursive=True)
        except Exception:  # best effort: the original error matters more than a failed cleanup
            pass


def _open_target(target: str, endpoint_url: str | None) -> _Local | _Fsspec:
    """The backend for ``target`` with a fresh, unique bench folder inside it (not yet created)."""
    folder = f"fmstack-bench-{uuid.uuid4().hex[:12]}"
    if _is_url(target):
        return _Fsspec(f"{target.rstrip('/')}/{folder}", endpoint_url)
    base = Path(target.removeprefix("file://"))
    if not base.is_dir():
        raise InputError("path", f"{base} is not an existing directory")
    if not os.access(base, os.W_OK | os.X_OK):
        raise InputError("path", f"no write permission in {base}")
    return _Local(base / folder)


def run_storage(
    target: str,
    sweep: list[tuple[int, int]],
    *,
    endpoint_url: str | None = None,
    on_step: Callable[[], None] | None = None,
) -> list[StorageResult]:
    """Write then read each (file size, count) of ``sweep`` under ``target``; everything written is removed."""
    for size, count in sweep:
        if size <= 0 or count <= 0:
            raise InputError("file-size/count", f"{size} bytes x {count} files; allowed: both > 0")
    backend = _open_target(target, endpoint_url)
    try:
        _prepare(backend, target)
        data = os.urandom(min(CHUNK_BYTES, max(size for size, _ in sweep)))
        results = []
        for i, (size, count) in enumerate(sweep):
            names = [f"s{i}-f{j}.bin" for j in range(count)]
            start = time.perf_counter()
            for name in names:
                backend.write(name, data, size)
            write_s = time.perf_counter() - start
            for name in names:
                backend.evict(name)
            start = time.perf_counter()
            for name in names:
                got = backend.read(name)
                if got != size:
                    raise RuntimeError(f"read {got} bytes of {name}, wrote {size}")
            read_s = time.perf_counter() - start
            results.append(StorageResult(target=target, file_bytes=size, num_files=count, write_s=write_s,
                                         read_s=read_s))  # fmt: skip
            if on_step:
                on_step()
        return results
    except InputError:
        raise
    except PermissionError as exc:
        raise InputError("path", f"no write permission in {target}: {exc}") from None
    except OSError as exc:
        raise InputError("path", f"cannot use {target}: {_short(exc)}") from None
    finally:
        backend.cleanup()


def _prepare(backend: _Local | _Fsspec, target: str) -> None:
    try:
        backend.mkdir()
    except InputError:
        raise
    except PermissionError as exc:
        raise InputError("path", f"no write permission in {target}: {exc}") from None
    except Exception as exc:
        raise InputError("path", f"cannot use {target}: {_short(exc)}") from None


def check_target(target: str, endpoint_url: str | None = None) -> None:
    """Fail fast on a bad --path or endpoint (before other benches spend minutes): create and remove the folder."""
    backend = _open_target(target, endpoint_url)
    try:
        _prepare(backend, target)
    finally:
        backend.cleanup()


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:200]
