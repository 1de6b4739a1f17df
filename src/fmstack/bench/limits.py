"""Upper bounds on bench options, checked before anything is measured.

Before session 20 only lower bounds were checked: ``--trials 99999999999999999999`` or ``--procs`` / ``--ranks`` of the
same size started a run that never ended, ``--threads`` of it died in torch with a ValueError, and a CPU
``--max-bytes`` larger than the machine's memory measured for minutes before the allocation failed.
"""

from __future__ import annotations

import os

from fmstack.errors import InputError

MAX_TRIALS = 10_000
"""Timed batches per point: 10,000 batches of the default 0.05 s are already more than 8 minutes per point."""
MAX_MIN_TIME_S = 3600.0
"""Seconds one timed batch runs at least: an hour, where the default is 0.05 s."""
MAX_WORKERS = 1024
"""Threads, processes or ranks on one machine: more than any single host has CPUs (and than torch's thread pool and
the kernel's process table are meant for)."""
MEMORY_BENCH_ARRAYS = 3
"""The memory bench's triad holds three arrays of --max-bytes each (a = b + s*c; memory.run_memory)."""
COLLECTIVE_BUFFERS = 2
"""A collective rank holds an input and an output of up to --max-bytes each (collectives.time_collective)."""


def host_memory_bytes() -> int | None:
    """Physical memory of this machine (sysconf), or None where the platform does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def check_upper_bounds(
    *,
    device: str,
    kinds: tuple[str, ...],
    trials: int,
    min_time_s: float,
    threads: int | None,
    procs: int,
    ranks: int,
    max_bytes: int | None,
) -> None:
    """Refuse option values no run can finish with (InputError naming the option and the allowed range)."""
    if trials > MAX_TRIALS:
        raise InputError("trials", f"{trials}; allowed: 1 to {MAX_TRIALS:,} timed batches per point")
    if min_time_s > MAX_MIN_TIME_S:
        raise InputError("min-time", f"{min_time_s:g}; allowed: a finite number > 0 and <= {MAX_MIN_TIME_S:g} seconds")
    for name, value in (("threads", threads), ("procs", procs), ("ranks", ranks if "collectives" in kinds else None)):
        if value is not None and value > MAX_WORKERS:
            raise InputError(name, f"{value}; allowed: at most {MAX_WORKERS:,} on one machine")
    ram = host_memory_bytes()
    if device != "cpu" or max_bytes is None or ram is None:
        return
    if "memory" in kinds and MEMORY_BENCH_ARRAYS * max_bytes * procs > ram:
        raise InputError(
            "max-bytes",
            f"{max_bytes:,} bytes x {MEMORY_BENCH_ARRAYS} arrays (triad) x procs({procs}) exceed this machine's "
            f"{ram:,} bytes of memory; allowed: at most {ram // (MEMORY_BENCH_ARRAYS * procs):,}",
        )
    if "collectives" in kinds and COLLECTIVE_BUFFERS * max_bytes * ranks > ram:
        raise InputError(
            "max-bytes",
            f"{max_bytes:,} bytes x {COLLECTIVE_BUFFERS} buffers x ranks({ranks}) exceed this machine's {ram:,} bytes "
            f"of memory; allowed: at most {ram // (COLLECTIVE_BUFFERS * ranks):,}",
        )
