"""Session 14 operations review (helper C): the HTML report counts jobs still pending at the end, every job of a
run is in exactly one end state, and trace jobs submitted after the horizon are named, not silently dropped."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from fmstack.catalog import Catalog
from fmstack.cli.sim_cmd import simulate
from fmstack.sim.config import SimConfig
from fmstack.sim.metrics import summarise
from fmstack.sim.recovery import RecoverySettings, parse_mode
from fmstack.sim.simulator import Simulator
from fmstack.sim.workload import Job
from tests.sim.conftest import FlatSpeed


def _end_states(jobs: dict[str, Any]) -> int:
    return jobs["completed"] + jobs["timed_out"] + jobs["running_at_end"] + jobs["pending_at_end"] + jobs["not_arrived"]


def test_html_wait_table_counts_pending_jobs(tmp_path: Path) -> None:
    """kueue-strict at load 2 leaves jobs pending; the report's p90 wait is the text table's (pending included,
    a lower bound marked >=), and its headline says how many are pending. Until 2026-11-24 it showed the p90 of
    started jobs only (3,913 s on this run against >= 92,775 s) and no pending count."""
    page = tmp_path / "r.html"
    args = ["--nodes", "8", "--days", "2", "--jobs", "60", "--policy", "kueue-strict", "--load", "2"]
    r = CliRunner().invoke(simulate, [*args, "--html", str(page), "--json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.output)
    pending = s["jobs"]["pending_at_end"]
    assert pending > 0
    text = page.read_text()
    assert f"pending at end {pending}" in text
    cls = s["by_size_class"]["1-8"]
    n_pending = cls["wait_incl_pending"]["count"] - cls["wait"]["count"]
    assert n_pending > 0
    row = re.search(r"<tr><td>1-8</td>(.*?)</tr>", text)
    assert row is not None
    cells = re.findall(r"<td>([^<]*)</td>", row.group(1))
    assert cells[:2] == [str(cls["wait"]["count"]), str(n_pending)]
    assert cells[3] == f"&ge;{cls['wait_incl_pending']['p90_s']:.0f}"
    assert "auto-resume" in text.split("</h1>")[0]  # the mode as --recovery spells it


def test_trace_jobs_after_the_horizon_are_counted_and_named(tmp_path: Path) -> None:
    """Three jobs, two submitted after a 1-day run (days 2.31 and 3.47): they are jobs.not_arrived, a warning says
    so and names the --days that includes them (300,000 s = 3.472 days, rounded up to 3.48)."""
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_s,num_gpus,duration_s\n1,0,8,100\n2,200000,8,100\n3,300000,8,100\n")
    r = CliRunner().invoke(simulate, ["--trace", str(trace), "--nodes", "4", "--days", "1", "--json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    j = s["jobs"]
    assert (j["submitted"], j["completed"], j["pending_at_end"], j["not_arrived"]) == (3, 1, 0, 2)
    assert _end_states(j) == j["submitted"]
    assert any("2 jobs of the trace are submitted after the end of the run" in w and "day 3.48" in w
               for w in s["warnings"])  # fmt: skip


class _FailureAt(Simulator):
    """One host failure on job 1's first node at 86,100 s, 300 s before the end of a 1-day run."""

    def _next_fault(self) -> float:
        return 86100.0 if not self.fault_log else 1e12

    def _on_fault(self, _: Any) -> None:
        self._strike(self.jobs[1].alloc[0][0], "host", planned=False)


@pytest.mark.parametrize("policy", ["slurm-backfill", "kueue"])
def test_job_in_requeue_delay_at_the_end_is_pending(catalog: Catalog, policy: str) -> None:
    """checkpoint-restart: detected at 86,100 + 300 s = the horizon, the job is requeued, eligible again after the
    requeue delay (Slurm 120 s, Kueue's first backoff 60 s), i.e. after the end. squeue shows such a job PENDING;
    until 2026-11-24 it was in no count (pending 0, running 0, completed 0 of 1)."""
    cfg = SimConfig(nodes=2, days=1.0, faults="llama3", planned=False, policy=policy,
                    recovery=RecoverySettings(mode=parse_mode("checkpoint-restart")))  # fmt: skip
    job = Job(job_id=1, submit_s=0.0, num_gpus=8, work_s=200000.0, time_limit_s=400000.0)
    sim = _FailureAt(cfg, catalog, speed=FlatSpeed(), jobs=[job]).run()
    assert sim.jobs[1].eligible_s == 86400.0 + (120.0 if policy == "slurm-backfill" else 60.0)
    j = summarise(sim)["jobs"]
    assert (j["pending_at_end"], j["requeue_delay_at_end"], j["running_at_end"], j["restarts"]) == (1, 1, 0, 1)
    assert _end_states(j) == 1


@pytest.mark.parametrize("policy", ["fifo", "slurm-backfill", "kueue", "kueue-strict"])
@pytest.mark.parametrize("recovery", ["checkpoint-restart", "elastic"])
def test_every_job_ends_in_one_state(catalog: Catalog, policy: str, recovery: str) -> None:
    """submitted = completed + timed out + running + pending + not arrived, on an overloaded fleet with failures."""
    cfg = SimConfig(nodes=8, days=1.0, jobs=150, load=1.5, policy=policy, faults="meta-rsc1", seed=2,
                    recovery=RecoverySettings(mode=parse_mode(recovery)))  # fmt: skip
    j = summarise(Simulator(cfg, catalog, speed=FlatSpeed()).run())["jobs"]
    assert j["pending_at_end"] > 0
    assert _end_states(j) == j["submitted"] == 150


def test_chrome_trace_faults_are_not_on_a_jobs_row(catalog: Catalog) -> None:
    """The one failure of :class:`_FailureAt` is an instant event of process 1 ("faults"); job 1's segments stay in
    process 0. Before, the failure sat on tid 0 of process 0, the row a job 0 would have."""
    from fmstack.sim.export import to_chrome_trace

    cfg = SimConfig(nodes=2, days=1.0, faults="llama3", planned=False,
                    recovery=RecoverySettings(mode=parse_mode("checkpoint-restart")))  # fmt: skip
    job = Job(job_id=1, submit_s=0.0, num_gpus=8, work_s=200000.0, time_limit_s=400000.0)
    events = json.loads(to_chrome_trace(_FailureAt(cfg, catalog, speed=FlatSpeed(), jobs=[job]).run()))["traceEvents"]
    instants = [e for e in events if e["ph"] == "i"]
    assert [(e["pid"], e["ts"]) for e in instants] == [(1, 86_100_000_000)]
    assert {e["pid"] for e in events if e["ph"] == "X"} == {0}
    assert sorted(e["args"]["name"] for e in events if e["ph"] == "M") == ["faults", "jobs"]
