"""Checkpoint stress: SIGKILL the reference workload at random moments during saves, resume, check.

Used by ``tests/workloads/test_ckpt_stress.py`` (a few kills) and ``benchmarks/bench_checkpoint_kill.py`` (100).
Checks after every kill: each committed checkpoint is complete (every byte range its DCP metadata names exists),
the resumed run starts from the newest committed step, no committed step is lost, and the work lost is at most
two intervals (one interval plus the steps that ran while the newest save was in flight: saves are async, and the
next save waits for the previous one, so a kill during that wait loses exactly two intervals).
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from fmstack.workloads import ckpt_store


@dataclass(kw_only=True, slots=True)
class KillRecord:
    last_step_done: int
    last_committed_seen: int
    resumed_from: int = -1

    @property
    def lost_steps(self) -> int:
        return self.last_step_done - self.resumed_from


@dataclass(kw_only=True, slots=True)
class StressResult:
    kills: list[KillRecord] = field(default_factory=list)
    checkpoints_verified: int = 0
    wall_s: float = 0.0


def verify_checkpoint(path: str) -> None:
    """Raise if a committed DCP directory is incomplete: every (file, offset, length) in .metadata must exist."""
    from torch.distributed.checkpoint.filesystem import FileSystemReader

    meta = FileSystemReader(path).read_metadata()
    for item in (meta.storage_data or {}).values():
        f = Path(path) / item.relative_path
        if not f.is_file() or f.stat().st_size < item.offset + item.length:
            raise RuntimeError(f"{path}: {item.relative_path} shorter than offset+length {item.offset + item.length}")


def _argv(workdir: Path, steps: int, interval: int, sync: bool) -> list[str]:
    return [
        sys.executable, "-m", "fmstack.workloads.train", "--steps", str(steps), "--ckpt-dir", str(workdir / "ckpt"),
        "--ckpt-interval", str(interval), "--ckpt-keep", "2", "--metrics-file", str(workdir / "metrics.jsonl"),
        "--dropout", "0.1", "--batch-size", "4", *(["--ckpt-sync"] if sync else []),
    ]  # fmt: skip


def run_stress(workdir: Path, *, kills: int, steps: int, interval: int, seed: int, sync: bool = False) -> StressResult:
    """Kill ``kills`` times at a random delay (0-40 ms) after a save begins, then let the last run finish."""
    rng = random.Random(seed)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    out = StressResult()
    t0 = time.perf_counter()
    pending: KillRecord | None = None
    for attempt in range(kills + 1):
        proc = subprocess.Popen(_argv(workdir, steps, interval, sync), stdout=subprocess.PIPE, text=True, env=env)
        assert proc.stdout is not None
        last_done, last_committed, saves_seen = 0, 0, 0
        target_save = rng.randint(1, 2)  # which save of this run to kill in
        for line in proc.stdout:
            if m := re.match(r"ckpt resumed step=(\d+)", line):
                if pending is not None:
                    pending.resumed_from = int(m.group(1))
            elif m := re.match(r"step=(\d+) ", line):
                last_done = int(m.group(1))
                if pending is not None and pending.resumed_from < 0:
                    pending.resumed_from = 0  # started from scratch
            elif m := re.match(r"ckpt committed step=(\d+)", line):
                last_committed = int(m.group(1))
            elif line.startswith("ckpt save-begin") and attempt < kills:
                saves_seen += 1
                if saves_seen == target_save:
                    time.sleep(rng.uniform(0.0, 0.04))
                    proc.send_signal(signal.SIGKILL)
                    break
        proc.wait()
        if attempt < kills and proc.returncode == 0:
            raise RuntimeError(f"run {attempt} finished before it was killed: give more steps than {steps}")
        if pending is not None:
            out.kills.append(pending)
            pending = None
        if attempt < kills:
            pending = KillRecord(last_step_done=last_done, last_committed_seen=last_committed)
            for s in ckpt_store.committed_steps(str(workdir / "ckpt")):
                verify_checkpoint(ckpt_store.step_dir(str(workdir / "ckpt"), s))
                out.checkpoints_verified += 1
        elif proc.returncode != 0:
            raise RuntimeError(f"final run exited {proc.returncode}")
    out.wall_s = time.perf_counter() - t0
    return out
