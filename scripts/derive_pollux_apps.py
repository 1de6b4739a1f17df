"""Derive src/fmstack/sim/data/pollux/apps.json from the Pollux simulator's measurements (run once, by hand).

Input: a checkout of petuum/adaptdl at branch ``osdi21-artifact`` (commit c793c70, Apache-2.0), directory
``simulator/traces/<app>/`` with ``placements.csv`` / ``scalability.csv`` (measured step and sync time per GPU
placement and local batch size) and ``validation-<batch size>.csv`` (per epoch: progress, iterations, gradient
square norm and variance). Output, per application:

* the 7 parameters of Pollux's step-time model (compute ``alpha_c + beta_c * local_bsz``; network
  ``alpha + beta * (replicas - 2)`` inter- or intra-node; step = p-norm with exponent gamma of the two), fitted
  here by least squares on log times to all measured rows (our fit, our code; scipy is needed only here);
* per epoch the progress reached at its end (min over the measured batch sizes, as their simulator does) and,
  per measured batch size, the gradient statistics and iteration count, rounded to 4 significant digits;
* batch-size limits and epoch counts as the simulator's ``applications.py`` sets them.

Usage: python3 scripts/derive_pollux_apps.py ADAPTDL_SIMULATOR_DIR > src/fmstack/sim/data/pollux/apps.json
"""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

# max epochs and local batch-size cap per application, as in the simulator's applications.py
APPS = {"bert": (2, None), "cifar10": (100, None), "ncf": (10, None), "imagenet": (90, None),
        "deepspeech2": (80, None), "yolov3": (50, 8)}  # fmt: skip


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def _sig(x: float) -> float:
    return float(f"{x:.4g}")


def _predict(p: np.ndarray, nodes: np.ndarray, reps: np.ndarray, bsz: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ac, bc, an, bn, ar, br, gamma = p
    compute = ac + bc * bsz
    net = np.where(
        nodes > 1, an + bn * np.maximum(reps - 2, 0), np.where(reps > 1, ar + br * np.maximum(reps - 2, 0), 0.0)
    )
    step = (compute**gamma + net**gamma) ** (1.0 / gamma)
    return compute, step


def fit(
    nodes: np.ndarray, reps: np.ndarray, bsz: np.ndarray, compute: np.ndarray, step: np.ndarray
) -> tuple[list[float], float]:
    def loss(p: np.ndarray) -> float:
        c, s = _predict(p, nodes, reps, bsz)
        err = np.sqrt(np.mean((np.log(c) - np.log(compute)) ** 2)) + np.sqrt(np.mean((np.log(s) - np.log(step)) ** 2))
        return float(err + 1e-3 * (p[6] - 1) ** 2)

    bounds = [(1e-8, None)] * 6 + [(1.0, 10.0)]
    best = None
    for g0 in (1.0, 2.0, 4.0):
        r = minimize(loss, np.array([1e-2, 1e-3, 1e-1, 1e-2, 1e-2, 1e-3, g0]), bounds=bounds, method="L-BFGS-B")
        if best is None or r.fun < best.fun:
            best = r
    assert best is not None
    return [_sig(v) for v in best.x], float(best.fun)


def derive(root: Path) -> dict[str, object]:
    out: dict[str, object] = {}
    for app, (max_epochs, max_local_cap) in APPS.items():
        d = root / "traces" / app
        place = _rows(d / "placements.csv")
        scal = _rows(d / "scalability.csv")
        nodes = [len(r["placement"]) for r in place] + [int(r["num_nodes"]) for r in scal]
        reps = [sum(map(int, r["placement"])) for r in place] + [int(r["num_replicas"]) for r in scal]
        rows = place + scal
        bsz = [float(r["local_bsz"]) for r in rows]
        step = np.array([float(r["step_time"]) for r in rows])
        sync = np.array([float(r["sync_time"]) for r in rows])
        params, err = fit(np.array(nodes), np.array(reps), np.array(bsz), step - sync, step)
        vals = {int(p.stem.split("-")[1]): _rows(p) for p in d.glob("validation-*.csv")}
        sizes = sorted(vals)
        epochs = min(max_epochs, min(len(v) for v in vals.values()))
        local = [int(r["local_bsz"]) for r in place]
        out[app] = {
            "perf_params": dict(
                zip(("alpha_c", "beta_c", "alpha_n", "beta_n", "alpha_r", "beta_r", "gamma"), params, strict=True)
            ),
            "fit_rmsle": round(err, 4),
            "init_batch_size": sizes[0],
            "max_batch_size": sizes[-1],
            "min_local_bsz": min(local),
            "max_local_bsz": max_local_cap or max(local),
            "max_epochs": epochs,
            "batch_sizes": sizes,
            "progress_end": [_sig(min(float(vals[b][e]["progress"]) for b in sizes)) for e in range(epochs)],
            "iterations": {str(b): [_sig(float(vals[b][e]["iteration"])) for e in range(epochs)] for b in sizes},
            "grad_sqr": {str(b): [_sig(float(vals[b][e]["grad_sqr"])) for e in range(epochs)] for b in sizes},
            "grad_var": {str(b): [_sig(float(vals[b][e]["grad_var"])) for e in range(epochs)] for b in sizes},
        }
        if math.isnan(err):
            raise SystemExit(f"fit failed for {app}")
    return out


if __name__ == "__main__":
    json.dump(derive(Path(sys.argv[1])), sys.stdout, indent=1)
    sys.stdout.write("\n")
