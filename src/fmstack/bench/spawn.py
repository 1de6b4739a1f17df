"""Run a function on N local ranks (torch.multiprocessing, spawn) and collect rank 0's result.

Workers get ``(rank, *args, queue)`` and talk back with tuples: ``("step", ...)`` for progress,
``("done", *payload)`` from rank 0 when finished, ``("error", message)`` from any rank that failed. Ranks left
running (a hang, a timeout, Ctrl-C) are terminated before this returns, so no process outlives the bench.
"""

from __future__ import annotations

import queue as queue_mod
import socket
import time
from collections.abc import Callable
from typing import Any


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (for the process group's rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_ranks(
    target: Callable[..., None],
    args: tuple[Any, ...],
    *,
    num_ranks: int,
    what: str,
    timeout_s: float,
    on_step: Callable[[], None] | None = None,
) -> tuple[Any, ...]:
    """Start ``num_ranks`` processes of ``target(rank, *args, queue)``; return rank 0's ``done`` payload."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=target, args=(r, *args, out), daemon=True) for r in range(num_ranks)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                msg = out.get(timeout=1.0)
            except queue_mod.Empty:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{what} timed out after {timeout_s:.0f} s") from None
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead:
                    raise RuntimeError(f"{what}: a rank exited with code {dead[0].exitcode}") from None
                continue
            if msg[0] == "step":
                if on_step:
                    on_step()
            elif msg[0] == "error":
                raise RuntimeError(f"{what} failed: {msg[1]}")
            elif msg[0] == "done":
                payload: tuple[Any, ...] = tuple(msg[1:])
                break
        for p in procs:
            p.join(timeout=30)
        return payload
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
