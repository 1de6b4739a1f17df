"""Replay the Pollux simulator's 8 workloads with `fmstack.sim.elastic` and compare with their published results.

Needs a checkout of petuum/adaptdl at branch ``osdi21-artifact`` (``simulator/workloads/`` and
``simulator/results-jobload/<policy>-1.0/summary.json``). Usage:
python3 scripts/check_pollux_workloads.py ADAPTDL_SIMULATOR_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from fmstack.sim.elastic import read_workload, replay

POLICIES = ("pollux", "tiresias", "optimus")


def main(root: Path) -> None:
    pub = {p: json.loads((root / f"results-jobload/{p}-1.0/summary.json").read_text())["avgs"] for p in POLICIES}
    tot = {p: [0.0, 0.0] for p in POLICIES}
    print("| workload | " + " | ".join(f"{p} ours / published" for p in POLICIES) + " |")
    print("|---|" + "---|" * len(POLICIES))
    for w in range(1, 9):
        rows = read_workload(root / f"workloads/workload-{w}.csv")
        cells = []
        for p in POLICIES:
            ours, theirs = replay(p, rows).avg_jct_s, pub[p][f"workload-{w}"]
            tot[p][0] += ours
            tot[p][1] += theirs
            cells.append(f"{ours:,.0f} / {theirs:,.0f} ({ours / theirs:.2f})")
        print(f"| {w} | " + " | ".join(cells) + " |")
    means = [f"{a / 8:,.0f} / {b / 8:,.0f} ({a / b:.2f})" for a, b in tot.values()]
    print("| mean | " + " | ".join(means) + " |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
