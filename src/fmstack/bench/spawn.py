"""Run a function on N local ranks (torch.multiprocessing, spawn) and collect rank 0's result.

Workers get ``(rank, *args, queue)`` and talk back with tuples: ``("step", ...)`` for progress,
``("done", *payload)`` from rank 0 when finished, ``("error", message)`` from any rank that failed. Ranks left
running (a hang, a timeout, Ctrl-C) are terminated (then killed) before this returns, so no process outlives the
bench; after ``done`` the ranks get ``EXIT_GRACE_S`` in all to exit, so a rank stuck in its teardown costs seconds,
not the job's timeout.

Ranks end with :func:`end_rank`: a barrier (no rank tears down while another still sends), ``destroy_process_group``,
then an exit that skips the interpreter's finalization (see there why).
"""

from __future__ import annotations

import queue as queue_mod
import socket
import time
from collections.abc import Callable
from typing import Any

EXIT_GRACE_S = 10.0
"""Seconds the ranks get, in all, to exit after rank 0's ``done``. A clean exit takes 0.1-0.3 s with
:func:`end_rank` (1.3-1.8 s through the interpreter's finalization, 2-vCPU VM under load, 2026-11-24)."""

KILL_GRACE_S = 2.0
"""Seconds a terminated rank gets to exit before it is killed."""


def end_rank(out: Any) -> None:
    """End a rank that finished: barrier, ``destroy_process_group``, flush ``out`` and exit at once (``os._exit``).

    Call it last in the rank's target, after every DDP model and other user of the group is released. The barrier
    keeps a rank from tearing its group down while a peer still sends (torch's shutdown notes: every rank calls
    ``destroy_process_group`` once, when no collective is pending). The exit skips the interpreter's finalization,
    as multiprocessing's fork children do: a DDP model built on the default group keeps the gloo backend (its worker,
    transport loop and store threads) alive past ``destroy_process_group`` (torch 2.13, CPU), so those threads would
    otherwise be torn down during finalization, where a thread still joinable aborts the process (``terminate
    called without an active exception``) and the teardown takes 1-2 s.
    """
    import os
    import sys

    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    out.close()
    out.join_thread()  # everything put on the queue reaches the pipe before the exit
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


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
    exit_grace_s: float = EXIT_GRACE_S,
) -> tuple[Any, ...]:
    """Start ``num_ranks`` processes of ``target(rank, *args, queue)``; return rank 0's ``done`` payload once every
    rank has exited, or has been stopped ``exit_grace_s`` after ``done``."""
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
        _reap(procs, exit_grace_s)
        return payload
    finally:
        _reap(procs, 0.0)


def _reap(procs: list[Any], grace_s: float) -> None:
    """Wait up to ``grace_s`` in all for the processes to exit; terminate those left, kill those that outlive
    ``KILL_GRACE_S`` after that."""
    deadline = time.monotonic() + grace_s
    for p in procs:
        p.join(timeout=max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + KILL_GRACE_S
    for p in procs:
        p.join(timeout=max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(timeout=KILL_GRACE_S)
