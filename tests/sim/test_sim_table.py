"""The `simulate` / `simulate compare` text tables: nothing cut at 140 columns, and no 0 s wait for a size class
whose jobs never started (session 9 review: "slurm-back…", "interrupti…", and `wait p90 s (65-512)` 0 for a
class whose 3 jobs were all still pending after 2 days)."""

from __future__ import annotations

import json
from typing import Any

from click.testing import CliRunner

from fmstack.cli.sim_cmd import simulate
from fmstack.cli.sim_render import title, wait_p90_cell

ARGS = ["--nodes", "16", "--days", "2", "--jobs", "300", "--seed", "1"]


def _pct(count: int, p90_s: float) -> dict[str, Any]:
    return {"count": count, "p50_s": p90_s, "p90_s": p90_s, "p99_s": p90_s, "mean_s": p90_s}


def test_compare_fits_140_columns_and_names_every_run_in_full() -> None:
    r = CliRunner().invoke(simulate, ["compare", *ARGS, "--policy", "fifo,slurm-backfill",
                                      "--recovery", "auto-resume,checkpoint-restart"])  # fmt: skip
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert max(len(line) for line in lines) <= 140
    assert "…" not in r.output
    for word in ("slurm-backfill", "checkpoint-restart", "interruptions", "lost GPU-h", "pending at end"):
        assert word in r.output
    # the recovery mode as the flag spells it, not the enum value of the JSON
    assert "auto-resume" in r.output and "auto_resume" not in r.output


def test_single_run_puts_the_shared_settings_in_the_title() -> None:
    r = CliRunner().invoke(simulate, [*ARGS, "--spares", "2"])
    assert r.exit_code == 0, r.output
    first = r.output.splitlines()[0]
    assert first == ("fleet twin: slurm-backfill, auto-resume, 16 x p5.48xlarge (128 GPUs) + 2 spare nodes, 2 days, "
                     "300 jobs at load 0.85, faults llama3, seed 1")  # fmt: skip


def test_wait_cell_of_a_class_with_pending_jobs_is_a_lower_bound_not_zero() -> None:
    # 3 jobs of the class, none started: `wait` is empty (it used to print 0), wait_incl_pending has all 3
    never_started = {"wait": _pct(0, 0.0), "wait_incl_pending": _pct(3, 54662.044)}
    assert wait_p90_cell(never_started) == ">=54,662"
    all_started = {"wait": _pct(170, 27.339), "wait_incl_pending": _pct(170, 27.339)}
    assert wait_p90_cell(all_started) == "27"
    no_jobs = {"wait": _pct(0, 0.0), "wait_incl_pending": _pct(0, 0.0)}
    assert wait_p90_cell(no_jobs) == "-"


def test_title_leaves_out_what_differs_between_rows() -> None:
    def row(policy: str, recovery: str) -> dict[str, Any]:
        return {"config": {"instance": "p5.48xlarge", "nodes": 64, "gpus": 512, "days": 7.0, "jobs": 1000,
                           "policy": policy, "recovery": recovery, "faults": None, "spares": 0, "seed": 3}}  # fmt: skip

    rows = [row("fifo", "elastic"), row("kueue", "elastic")]
    assert title(rows) == "fleet twin: elastic, 64 x p5.48xlarge (512 GPUs), 7 days, 1,000 jobs, faults none, seed 3"


def test_compare_checks_every_name_before_the_first_run(monkeypatch: Any) -> None:
    """`--policy fifo,nope` ran fifo in full (30 s at 2,048 nodes) before saying 'nope' was unknown."""
    from fmstack.sim.simulator import Simulator

    runs: list[object] = []
    monkeypatch.setattr(Simulator, "run", lambda self, progress=None: runs.append(self))
    r = CliRunner().invoke(simulate, ["compare", *ARGS, "--policy", "fifo,nope"])
    assert r.exit_code != 0 and "unknown policy 'nope'" in str(r.exception)
    assert runs == []


def test_json_has_no_percentile_for_an_empty_size_class() -> None:
    """A size class without jobs gives null percentiles (it gave 0.0 s, which reads as "no wait")."""
    r = CliRunner().invoke(simulate, [*ARGS, "--json"])
    assert r.exit_code == 0, r.output
    classes = json.loads(r.output)["by_size_class"]
    empty = [name for name, c in classes.items() if c["jct"]["count"] == 0]
    assert empty, "the run should leave at least one class without a completed job"
    for name in empty:
        assert classes[name]["jct"]["p50_s"] is None and classes[name]["jct"]["mean_s"] is None
    busy = [c for c in classes.values() if c["wait"]["count"] > 0]
    assert busy and all(isinstance(c["wait"]["p90_s"], float) for c in busy)
