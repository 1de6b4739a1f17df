"""Preemptions per job-hour observed so far in a run, by the job's queue and priority.

With ``--ckpt-interval-rate failures+preemptions`` a job's checkpoint interval uses its interrupt rate, the failure
rate plus the preemption rate: Young (CACM 1974) and Daly (FGCS 2006) derive the optimum for interrupts that
arrive as a Poisson process and lose the work since the last checkpoint, whatever causes them, and a preempted job
loses exactly that (shared/reference/orchestration-04-failures-and-recovery.md section 4). The twin cannot know a
job's future preemptions, so it estimates the rate from the past of the same run: preemptions of running jobs of
the job's ClusterQueue (``queue``) and priority, divided by the hours jobs of that queue and priority have run
(the maximum-likelihood rate of a Poisson process: events / exposure). Kueue chooses victims by queue and priority
(reclaim from borrowing queues, lower priority first; kueue concepts/preemption.md), so jobs that share both share
the risk. Until a preemption has been seen the estimate is 0 and the interval is the failures-only one. [D]
Preemptions are not Poisson (Kueue prefers the newest victims), so this is an approximation; the estimate is taken
when a job starts or restarts and kept for that run segment.
"""

from __future__ import annotations

Key = tuple[str, float]


class PreemptionRate:
    """Counts and job-seconds of exposure per (queue, priority), integrated as jobs start and stop."""

    def __init__(self) -> None:
        self.count: dict[Key, int] = {}
        self.job_s: dict[Key, float] = {}
        self.running: dict[Key, int] = {}
        self.since_s: dict[Key, float] = {}
        self.members: dict[int, Key] = {}

    def _advance(self, key: Key, now_s: float) -> None:
        self.job_s[key] = self.job_s.get(key, 0.0) + self.running.get(key, 0) * (now_s - self.since_s.get(key, now_s))
        self.since_s[key] = now_s

    def start(self, job_id: int, key: Key, now_s: float) -> None:
        """A job of ``key`` starts running (a no-op if it is running already)."""
        if job_id in self.members:
            return
        self._advance(key, now_s)
        self.running[key] = self.running.get(key, 0) + 1
        self.members[job_id] = key

    def stop(self, job_id: int, now_s: float) -> None:
        """A job stops running (a no-op if it was not)."""
        key = self.members.pop(job_id, None)
        if key is None:
            return
        self._advance(key, now_s)
        self.running[key] -= 1

    def preempted(self, key: Key) -> None:
        self.count[key] = self.count.get(key, 0) + 1

    def per_s(self, key: Key, now_s: float) -> float:
        """Preemptions per second of a running job of ``key`` so far (0 before the first one)."""
        n = self.count.get(key, 0)
        if n == 0:
            return 0.0
        self._advance(key, now_s)
        return n / self.job_s[key] if self.job_s[key] > 0 else 0.0

    def per_job_hour(self, now_s: float) -> dict[str, float]:
        """Every key's rate per job-hour, keyed ``queue/priority`` (for the JSON)."""
        out: dict[str, float] = {}
        for key in sorted(set(self.count) | set(self.running)):
            self._advance(key, now_s)
            s = self.job_s.get(key, 0.0)
            out[f"{key[0]}/{key[1]:g}"] = round(self.count.get(key, 0) * 3600.0 / s, 6) if s > 0 else 0.0
        return out
