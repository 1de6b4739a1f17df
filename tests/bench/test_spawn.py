"""Ranks that hang in their teardown after rank 0's ``done`` cost seconds, not the job's timeout, and never outlive
``run_ranks``; ranks that end with ``end_rank`` exit at once and deliver their payload."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.torch


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead; only its parent (run_ranks, which joined it) could still reap it
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def _hang_after_done(rank: int, pid_dir: str, ignore_term: bool, out: Any) -> None:
    """Rank 0 reports, then every rank blocks as a rank stuck in its teardown would (optionally deaf to SIGTERM)."""
    if ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    Path(pid_dir, str(rank)).write_text(str(os.getpid()))
    if rank == 0:
        out.put(("done", "payload", rank))
    time.sleep(600)


def _clean(rank: int, out: Any) -> None:
    """A gloo job that ends as the benches' ranks do (``end_rank``)."""
    import torch
    import torch.distributed as dist

    from fmstack.bench.spawn import end_rank, free_port

    port = int(os.environ["FMSTACK_TEST_PORT"])
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    t = torch.ones(4)
    dist.all_reduce(t)
    if rank == 0:
        out.put(("done", t.tolist(), free_port() > 0))
    end_rank(out)


@pytest.mark.parametrize("ignore_term", [False, True], ids=["terminated", "killed"])
def test_a_rank_hanging_in_teardown_costs_the_grace_not_the_timeout(tmp_path: Path, ignore_term: bool) -> None:
    from fmstack.bench.spawn import KILL_GRACE_S, run_ranks

    start = time.monotonic()
    payload = run_ranks(_hang_after_done, (str(tmp_path), ignore_term), num_ranks=2, what="hang test",
                        timeout_s=300, exit_grace_s=1.0)  # fmt: skip
    took_s = time.monotonic() - start
    assert payload == ("payload", 0)
    # spawn start-up (about 1-3 s on the 2-vCPU VM), the 1 s grace, and for a rank deaf to SIGTERM the kill grace
    assert took_s < 15 + (KILL_GRACE_S if ignore_term else 0), took_s
    pids = [int(Path(tmp_path, str(r)).read_text()) for r in (0, 1)]
    assert not [p for p in pids if _alive(p)]


def test_ranks_that_end_with_end_rank_exit_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The payload arrives whole through the queue that ``end_rank`` flushes before its ``os._exit``."""
    from fmstack.bench.spawn import free_port, run_ranks

    monkeypatch.setenv("FMSTACK_TEST_PORT", str(free_port()))
    payload = run_ranks(_clean, (), num_ranks=2, what="clean test", timeout_s=120)
    assert payload == ([2.0, 2.0, 2.0, 2.0], True)
