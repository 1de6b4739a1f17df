"""A tiny filesystem seam for sysfs / procfs readers: the real one (:class:`OsFs`) and an in-memory one.

Readers only list directories and read small text files, so the seam has four methods: ``listdir``,
``read_text``, ``read_dir`` and ``read_dir_columns`` (a directory's files and their contents at once, as pairs or
as two columns: EFA reads 36 counter files per port, 1,152 a scrape on a p5, and one call per directory keeps the
per-file cost down; :class:`OsFs` keeps the files open between scrapes). :class:`DictFs` holds a
recorded tree in memory (loaded from a fixture directory) and can hide files or whole subtrees to play
"a sysfs file vanished" (before or after it was listed) or "a device went away" in tests and benchmarks.
"""

from __future__ import annotations

import contextlib
import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from typing import Protocol


class FileSystem(Protocol):
    """Relative paths with '/' separators, from the filesystem's root."""

    def listdir(self, path: str) -> list[str]:
        """Names in a directory; raises OSError if it does not exist."""
        ...

    def read_text(self, path: str) -> str:
        """A file's text; raises OSError if it does not exist or cannot be read."""
        ...

    def read_dir(self, path: str) -> list[tuple[str, str | bytes | None]]:
        """``(name, content)`` for every entry of a directory, sorted by name; content is None where the entry was
        listed but could not be read (it vanished, or is a directory). Raises OSError if the directory is missing.
        """
        ...

    def read_dir_columns(self, path: str) -> tuple[tuple[str, ...], list[str | bytes | None]]:
        """``read_dir`` as two columns, the names and their contents (what a reader that keeps the names as a
        structure key and parses the contents in bulk wants)."""
        ...

    def sweep(self, path: str = "") -> int:
        """Let go of what is held for directories under ``path`` not read since the last sweep of ``path`` (a
        reader calls it once per scrape, after reading its tree); returns the files closed."""
        ...


_MTIME_MARGIN_NS = 1_000_000_000
"""A directory listing is reused only if the directory had not changed for this long when it was listed: file
timestamps come from a coarse clock, so a change right after a listing could otherwise keep the same mtime."""


@dataclass(slots=True)
class _HeldDir:
    names: tuple[str, ...]
    """The names of the last listing."""
    entries: dict[str, tuple[int, int]]
    """name -> (descriptor, inode) of the files held."""
    fds: list[int] | None
    """Every listed name's descriptor, in order, when the listing may be reused (all held, directory unchanged
    for a while); None otherwise."""
    signature: tuple[int, int] | None
    """(inode, mtime in ns) of the directory at the listing."""


class OsFs:
    """The real filesystem under ``root`` (``/`` on a node; a fixture directory in tests).

    Counter files read through :meth:`read_dir_columns` stay open between calls (up to ``keep_open`` of them) and
    are re-read with ``os.pread`` at offset 0: one system call per file instead of open, read and close. sysfs
    renders an attribute afresh on every read from offset 0 (``seq_file`` restarts its ``show`` when the position
    goes back to 0), so a held descriptor reads the current value. The directory is listed again (one
    ``os.scandir``) unless its inode and mtime are those of the last listing and that mtime was over a second
    old when it was listed (adding, removing or renaming a file changes a directory's mtime; sysfs directories
    are made once when the device appears). A held file is dropped and its name opened again when a listing
    shows another inode under that name (the file was replaced, or the device went away and came back) or when
    reading it fails (a removed sysfs node answers ``ENODEV``); a name no longer listed is closed, and so are
    the files of a directory not read between two :meth:`sweep` calls (a device that went away). When
    ``keep_open`` descriptors are held, further files are read the plain way. Not safe for concurrent calls
    (the exporter serialises scrapes). ``keep_open`` defaults to half the process's soft ``RLIMIT_NOFILE``, at
    most 4,096 (a p5.48xlarge has 1,152 EFA counter files).
    """

    def __init__(self, root: str | os.PathLike[str] = "/", keep_open: int | None = None) -> None:
        self.root = Path(root)
        self._root = os.fspath(root)
        self.keep_open = default_keep_open() if keep_open is None else keep_open
        self._held: dict[str, _HeldDir] = {}
        self._held_count = 0
        self._read: set[str] = set()
        """Directories read by read_dir_columns since the last sweep that covered them."""
        self.rereads = 0
        """Directories read from held descriptors without listing them."""

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(os.path.join(self._root, path)))

    def read_text(self, path: str) -> str:
        with open(os.path.join(self._root, path), encoding="utf-8", errors="replace") as fh:
            return fh.read()

    def read_dir(self, path: str) -> list[tuple[str, str | bytes | None]]:
        names, datas = self.read_dir_columns(path)
        return list(zip(names, datas, strict=True))

    def read_dir_columns(self, path: str) -> tuple[tuple[str, ...], list[str | bytes | None]]:
        """The held descriptors re-read if the directory is unchanged, else one ``os.scandir`` (names and inodes)
        and per file a ``pread`` on a held descriptor, or a raw ``os.open`` / ``os.read`` (no Path objects, no
        text-mode file object) for a file not held yet."""
        directory = os.path.join(self._root, path)
        self._read.add(directory)
        held = self._held.get(directory)
        if held is not None and held.fds is not None:
            datas = _reread(directory, held)
            if datas is not None:
                self.rereads += 1
                return held.names, datas
        return self._list_and_read(directory)

    def _list_and_read(self, directory: str) -> tuple[tuple[str, ...], list[str | bytes | None]]:
        listed_at = time.time_ns()
        held = self._held.pop(directory, None)
        entries = held.entries if held is not None else {}
        try:
            st = os.stat(directory)  # before listing: a change after this point shows at the next call
            with os.scandir(directory) as it:
                listing = sorted([(entry.name, entry.inode()) for entry in it])
        except OSError:
            self._release(entries)
            raise
        kept: dict[str, tuple[int, int]] = {}
        prefix = directory + "/"
        datas: list[str | bytes | None] = []
        for name, inode in listing:
            entry = entries.pop(name, None)
            data: bytes | None = None
            if entry is not None:
                if entry[1] == inode:
                    try:
                        data = _pread_all(entry[0])
                    except OSError:
                        data = None
                if data is None:  # replaced or gone under the descriptor: open the name again below
                    self._release({name: entry})
                else:
                    kept[name] = entry
            if data is None:
                data = self._open_and_read(prefix + name, name, inode, kept)
            datas.append(data)
        self._release(entries)  # names no longer listed
        names = tuple(name for name, _ in listing)
        if kept:
            stable = listed_at - st.st_mtime_ns > _MTIME_MARGIN_NS
            fds = [kept[name][0] for name in names] if stable and len(kept) == len(names) else None
            self._held[directory] = _HeldDir(names, kept, fds, (st.st_ino, st.st_mtime_ns))
        return names, datas

    def _open_and_read(self, path: str, name: str, inode: int, kept: dict[str, tuple[int, int]]) -> bytes | None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None  # vanished after listing, or cannot be opened
        try:
            data = _pread_all(fd)
        except OSError:
            os.close(fd)
            return None  # a directory, or gone
        if self._held_count < self.keep_open:
            kept[name] = (fd, inode)
            self._held_count += 1
        else:
            os.close(fd)
        return data

    def _release(self, entries: dict[str, tuple[int, int]]) -> None:
        for fd, _ in entries.values():
            os.close(fd)
        self._held_count -= len(entries)

    def sweep(self, path: str = "") -> int:
        """Close the held files of every directory under ``path`` not read since the last sweep of ``path``: a
        directory no longer read (its device went away, or the reader stopped listing it) would otherwise keep
        its descriptors, and its share of ``keep_open``, until the same path was read again."""
        top = os.path.join(self._root, path).rstrip("/")
        prefix = top + "/"
        read = self._read
        stale = [d for d in self._held.keys() - read if d.startswith(prefix) or d == top]  # usually none
        if all(map(str.startswith, read, repeat(prefix))):  # usually: this path's reader is the only one
            read.clear()
        else:
            read -= {d for d in read if d.startswith(prefix) or d == top}
        closed = 0
        for directory in stale:
            entries = self._held.pop(directory).entries
            closed += len(entries)
            self._release(entries)
        return closed

    @property
    def held_files(self) -> int:
        """Descriptors held open for re-reading."""
        return self._held_count

    def close(self) -> None:
        """Close every held descriptor (the next read opens files again)."""
        for held in self._held.values():
            self._release(held.entries)
        self._held.clear()
        self._read.clear()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter exit os may be half torn down
            self.close()


def _reread(
    directory: str, held: _HeldDir, pread: Callable[[int, int, int], bytes] = os.pread
) -> list[str | bytes | None] | None:
    """The held files' contents if the directory is as listed and every read succeeds; None otherwise."""
    try:
        st = os.stat(directory)
        if (st.st_ino, st.st_mtime_ns) != held.signature or held.fds is None:
            return None
        datas: list[str | bytes | None] = [pread(fd, 4096, 0) for fd in held.fds]
        if max(map(len, datas)) >= 4096:  # type: ignore[arg-type]
            return [_pread_all(fd) for fd in held.fds]  # a file of a page or more: read all of each
        return datas
    except OSError:
        return None  # gone, or a file removed under its descriptor (ENODEV on sysfs): list it again


def default_keep_open() -> int:
    """Half the soft limit on open files, at most 4,096: the rest stays free for sockets and other files."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 4096
    return max(0, min(4096, soft // 2))


def _pread_all(fd: int, _pread: Callable[[int, int, int], bytes] = os.pread) -> bytes:
    data = _pread(fd, 4096, 0)  # a sysfs attribute is at most a page: one read
    if len(data) == 4096:  # a larger (non-sysfs) file: read the rest
        chunks = [data]
        while chunk := _pread(fd, 65536, sum(map(len, chunks))):
            chunks.append(chunk)
        data = b"".join(chunks)
    return data


class DictFs:
    """An in-memory tree: ``{"sys/class/infiniband/rdmap0/ports/1/hw_counters/tx_bytes": "123\\n", ...}``."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = dict(files)
        self._hidden_files: set[str] = set()
        self._hidden_prefixes: list[str] = []
        self._broken: set[str] = set()
        self._children: dict[str, list[str]] = {}
        self._columns: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
        """directory -> (names, full paths) for read_dir_columns while nothing is hidden or broken"""
        for path in self.files:
            parts = path.split("/")
            for depth in range(len(parts)):
                parent, child = "/".join(parts[:depth]), parts[depth]
                kids = self._children.setdefault(parent, [])
                if child not in kids:
                    kids.append(child)
        for kids in self._children.values():
            kids.sort()

    @classmethod
    def from_tree(cls, root: Path) -> DictFs:
        """Load every file under ``root`` (a recorded fixture tree)."""
        files = {
            p.relative_to(root).as_posix(): p.read_text(encoding="utf-8")
            for p in sorted(root.rglob("*"))
            if p.is_file()
        }
        return cls(files)

    def _hidden(self, path: str) -> bool:
        if not self._hidden_files and not self._hidden_prefixes:
            return False
        return path in self._hidden_files or any(path == p or path.startswith(p + "/") for p in self._hidden_prefixes)

    def listdir(self, path: str) -> list[str]:
        path = path.strip("/")
        if path not in self._children or self._hidden(path):
            raise FileNotFoundError(path)
        if not self._hidden_files and not self._hidden_prefixes:
            return list(self._children[path])
        prefix = path + "/" if path else ""
        return [c for c in self._children[path] if not self._hidden(prefix + c)]

    def read_dir(self, path: str) -> list[tuple[str, str | bytes | None]]:
        """Same answers as ``listdir`` then ``read_text`` per name (hidden files unlisted, broken ones None)."""
        names = self.listdir(path)
        path = path.strip("/")
        prefix = path + "/" if path else ""
        files, broken = self.files, self._broken
        out: list[tuple[str, str | bytes | None]] = []
        for name in names:
            full = prefix + name
            text = files.get(full)
            out.append((name, None if text is None or (broken and full in broken) else text))
        return out

    def read_dir_columns(self, path: str) -> tuple[tuple[str, ...], list[str | bytes | None]]:
        """Same answers as :meth:`read_dir`; with no fault injected, the names and paths are looked up once."""
        if self._hidden_files or self._hidden_prefixes or self._broken:
            entries = self.read_dir(path)
            return tuple(name for name, _ in entries), [data for _, data in entries]
        cached = self._columns.get(path)
        if cached is None:
            key = path.strip("/")
            if key not in self._children:
                raise FileNotFoundError(path)
            prefix = key + "/" if key else ""
            names = tuple(self._children[key])
            cached = self._columns[path] = (names, tuple(prefix + name for name in names))
        return cached[0], list(map(self.files.get, cached[1]))

    def read_text(self, path: str) -> str:
        text = self.files.get(path)
        if text is None:
            path = path.strip("/")
            text = self.files.get(path)
        if text is None or self._hidden(path):
            raise FileNotFoundError(path)
        if self._broken and path in self._broken:
            raise FileNotFoundError(f"{path} (vanished after it was listed)")
        return text

    def sweep(self, path: str = "") -> int:
        """Nothing is held in memory: closes nothing."""
        return 0

    def file_paths(self) -> list[str]:
        return sorted(self.files)

    def dir_paths(self, depth: int) -> list[str]:
        """Directories exactly ``depth`` components deep (e.g. 4: ``sys/class/infiniband/<device>``)."""
        return sorted(p for p in self._children if p and p.count("/") == depth - 1)

    def hide(self, path: str) -> None:
        self._hidden_files.add(path)

    def break_file(self, path: str) -> None:
        """Still listed, but reading fails: the file vanished between ``listdir`` and ``open``."""
        self._broken.add(path)

    def hide_prefix(self, path: str) -> None:
        self._hidden_prefixes.append(path.strip("/"))

    def restore(self) -> None:
        self._hidden_files.clear()
        self._hidden_prefixes.clear()
        self._broken.clear()
