"""A tiny filesystem seam for sysfs / procfs readers: the real one (:class:`OsFs`) and an in-memory one.

Readers only list directories and read small text files, so the seam has three methods: ``listdir``,
``read_text`` and ``read_dir`` (a directory's files and their contents at once: EFA reads 36 counter files per port,
1,152 a scrape on a p5, and one call per directory keeps the per-file cost down). :class:`DictFs` holds a
recorded tree in memory (loaded from a fixture directory) and can hide files or whole subtrees to play
"a sysfs file vanished" (before or after it was listed) or "a device went away" in tests and benchmarks.
"""

from __future__ import annotations

import os
from collections.abc import Callable
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


class OsFs:
    """The real filesystem under ``root`` (``/`` on a node; a fixture directory in tests)."""

    def __init__(self, root: str | os.PathLike[str] = "/") -> None:
        self.root = Path(root)

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(self.root / path))

    def read_text(self, path: str) -> str:
        with open(self.root / path, encoding="utf-8", errors="replace") as fh:
            return fh.read()

    def read_dir(self, path: str) -> list[tuple[str, str | bytes | None]]:
        """One ``os.scandir`` and a raw ``os.open`` / ``os.read`` per file (no Path objects, no text-mode file
        object): about a third of ``open().read()``'s cost for a sysfs attribute (at most one page)."""
        directory = os.path.join(self.root, path)
        with os.scandir(directory) as entries:
            names = sorted(entry.name for entry in entries)
        prefix = directory + "/"
        out: list[tuple[str, str | bytes | None]] = []
        for name in names:
            try:
                data: bytes | None = _read_bytes(prefix + name)
            except OSError:
                data = None  # vanished after listing, or not a file
            out.append((name, data))
        return out


def _read_bytes(path: str, _open: Callable[..., int] = os.open, _read: Callable[[int, int], bytes] = os.read) -> bytes:
    fd = _open(path, os.O_RDONLY)
    try:
        data = _read(fd, 4096)  # a sysfs attribute is at most a page: one read
        if len(data) == 4096:  # a larger (non-sysfs) file: read the rest
            chunks = [data]
            while chunk := _read(fd, 65536):
                chunks.append(chunk)
            data = b"".join(chunks)
        return data
    finally:
        os.close(fd)


class DictFs:
    """An in-memory tree: ``{"sys/class/infiniband/rdmap0/ports/1/hw_counters/tx_bytes": "123\\n", ...}``."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = dict(files)
        self._hidden_files: set[str] = set()
        self._hidden_prefixes: list[str] = []
        self._broken: set[str] = set()
        self._children: dict[str, list[str]] = {}
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
