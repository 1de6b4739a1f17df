"""Commit markers, listing and retention on a plain directory (no torch)."""

from __future__ import annotations

from pathlib import Path

from fmstack.workloads import ckpt_store


def _fake_ckpt(root: Path, step: int, committed: bool) -> None:
    d = Path(ckpt_store.step_dir(str(root), step))
    d.mkdir(parents=True)
    (d / ".metadata").write_bytes(b"x")
    (d / "__0_0.distcp").write_bytes(b"y" * 10)
    if committed:
        ckpt_store.write_marker(str(root), step, {"step": step})


def test_only_committed_steps_count_and_retention(tmp_path: Path) -> None:
    for step, ok in [(2, True), (4, True), (6, False), (8, True), (10, True), (12, False)]:
        _fake_ckpt(tmp_path, step, ok)
    assert ckpt_store.committed_steps(str(tmp_path)) == [2, 4, 8, 10]
    deleted = ckpt_store.prune(str(tmp_path), keep_last=2)
    # committed 2 and 4 are beyond the last 2; partial 6 is older than the newest committed (10); partial 12 may
    # still be being written and stays
    assert deleted == [2, 4, 6]
    assert ckpt_store.all_steps(str(tmp_path)) == [8, 10, 12]
    assert ckpt_store.read_marker(str(tmp_path), 10) == {"step": 10}
    assert not list(tmp_path.rglob("*.tmp"))


def test_upload_writes_marker_last(tmp_path: Path) -> None:
    local, durable = tmp_path / "local", tmp_path / "durable"
    _fake_ckpt(local, 4, True)
    ckpt_store.upload(str(local), 4, str(durable))
    assert sorted(p.name for p in (durable / "step_00000004").iterdir()) == [".metadata", "COMMITTED", "__0_0.distcp"]
    assert ckpt_store.committed_steps(str(durable)) == [4]
