"""Atomic writes (fmstack.fileio): refusals before a run, and the written file's permissions."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from fmstack.errors import InputError
from fmstack.fileio import atomic_write_text, check_output_path


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_folder_or_a_missing_folder_is_refused_and_nothing_is_left(tmp_path: Path) -> None:
    with pytest.raises(
        InputError, match=f"^html: {tmp_path} is a directory; give a file name, e.g. {tmp_path}/plan.html$"
    ):
        check_output_path(tmp_path, field="html", example="plan.html")
    with pytest.raises(InputError, match="is a directory"):  # was IsADirectoryError from os.replace, after the run
        atomic_write_text(tmp_path, "x", field="html")
    with pytest.raises(InputError, match=f"folder {tmp_path / 'no'} does not exist"):
        atomic_write_text(tmp_path / "no" / "r.html", "x", field="html")
    assert list(tmp_path.iterdir()) == []


def test_a_new_file_gets_the_umask_default_and_a_replaced_one_keeps_its_mode(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        new = atomic_write_text(tmp_path / "r.html", "a")
        assert _mode(new) == 0o644  # as open() creates it; a bare mkstemp file was 0600
        new.chmod(0o640)
        atomic_write_text(new, "b")
        assert new.read_text() == "b" and _mode(new) == 0o640
        atomic_write_text(new, "c", mode=0o600)
        assert _mode(new) == 0o600
    finally:
        os.umask(old)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html"]  # no temporary file left
