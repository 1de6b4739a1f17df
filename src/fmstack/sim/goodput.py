"""Throughput, statistical efficiency and goodput of the Pollux simulator's six training applications.

Model (Qiao et al., "Pollux: Co-adaptive Cluster Scheduling for Goodput-Optimized Deep Learning", OSDI 2021,
section 3): a step on ``replicas`` GPUs over ``nodes`` nodes with ``atomic_bsz`` samples per GPU takes
``T = (T_compute^gamma + T_network^gamma)^(1/gamma)`` with ``T_compute = alpha_c + beta_c * atomic_bsz`` and
``T_network = alpha + beta * (replicas - 2)`` (inter-node ``alpha_n, beta_n`` when ``nodes > 1``, intra-node
``alpha_r, beta_r`` when ``replicas > 1``, none for one GPU); each gradient-accumulation step adds ``T_compute``.
Statistical efficiency of batch size ``M`` against the initial batch ``M0`` (scale ``S = M / M0``): one step
makes ``gain = (var + sqr) / (var / S + sqr)`` initial-batch steps of progress (``sqr``, ``var``: gradient square
norm and variance). Goodput = gain / step time, in initial-batch steps per second.

Parameters: ``data/pollux/apps.json``, derived by ``scripts/derive_pollux_apps.py`` from the measurements the
Pollux simulator ships (petuum/adaptdl, branch osdi21-artifact, ``simulator/traces``, Apache-2.0): the seven
step-time parameters are our least-squares fit to their measured step / sync times; the per-epoch progress and
gradient statistics per measured batch size are theirs, rounded to 4 significant digits.
"""

from __future__ import annotations

import bisect
import json
import math
from dataclasses import dataclass
from functools import cache
from importlib.resources import files

import numpy as np

from fmstack.perfmodel.num import Num, maximum, where

BSZ_CANDIDATES = 50
"""Total batch sizes tried, geometrically spaced, when a job picks its batch size (as Pollux's optimiser)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class AppModel:
    """One training application: step-time parameters, batch-size limits and per-epoch measurements."""

    name: str
    alpha_c: float
    beta_c: float
    alpha_n: float
    beta_n: float
    alpha_r: float
    beta_r: float
    gamma: float
    init_batch_size: int
    max_batch_size: int
    min_local_bsz: int
    max_local_bsz: int
    max_epochs: int
    batch_sizes: tuple[int, ...]
    progress_end: tuple[float, ...]
    """Progress (initial-batch steps) at the end of each epoch; the job completes at the last one."""
    iterations: dict[int, tuple[float, ...]]
    grad_sqr: dict[int, tuple[float, ...]]
    grad_var: dict[int, tuple[float, ...]]

    @property
    def total_progress(self) -> float:
        return self.progress_end[-1]

    def compute_s(self, atomic_bsz: float) -> float:
        return self.alpha_c + self.beta_c * atomic_bsz

    def _step(self, nodes: Num, replicas: Num, atomic_bsz: Num, accum_steps: Num) -> Num:
        """The step-time model on numbers (a job's step) or broadcast arrays (the batch-size search's candidate grid):
        one formula for both (:mod:`fmstack.perfmodel.num` keeps numbers out of NumPy in the replay's hot loop)."""
        compute = self.alpha_c + self.beta_c * atomic_bsz
        extra = maximum(replicas - 2, 0.0)
        net = where(
            nodes > 1, self.alpha_n + self.beta_n * extra, where(replicas > 1, self.alpha_r + self.beta_r * extra, 0.0)
        )
        g = self.gamma
        return (compute**g + net**g) ** (1.0 / g) + accum_steps * compute

    def step_s(self, nodes: int, replicas: int, atomic_bsz: float, accum_steps: int = 0) -> float:
        """Wall time of one optimizer step (with ``accum_steps`` extra accumulation passes)."""
        return float(self._step(float(nodes), float(replicas), atomic_bsz, float(accum_steps)))

    def _interp(self, table: dict[int, tuple[float, ...]], batch_size: float, epoch: int) -> float:
        sizes = self.batch_sizes
        e = min(max(epoch, 0), self.max_epochs - 1)
        b = min(max(batch_size, sizes[0]), sizes[-1])
        i = bisect.bisect_left(sizes, b)
        if sizes[i] == b:
            return table[sizes[i]][e]
        lo, hi = sizes[i - 1], sizes[i]
        return ((b - lo) * table[hi][e] + (hi - b) * table[lo][e]) / (hi - lo)

    def grad_stats(self, batch_size: float, epoch: int) -> tuple[float, float]:
        """(sqr, var) measured in ``epoch`` at ``batch_size`` (linear between measured batch sizes)."""
        return self._interp(self.grad_sqr, batch_size, epoch), self._interp(self.grad_var, batch_size, epoch)

    def iteration(self, batch_size: float, epoch: int) -> float:
        """Steps at ``batch_size`` to complete epochs 0..``epoch`` (Optimus' remaining-work estimate)."""
        return self._interp(self.iterations, batch_size, epoch)

    def _gain(self, batch_size: Num, sqr: float, var: float) -> Num:
        """Statistical efficiency on a number or an array of batch sizes (``gain`` without its zero guard)."""
        return (var + sqr) / (var / (batch_size / self.init_batch_size) + sqr)

    def gain(self, batch_size: float, sqr: float, var: float) -> float:
        """Initial-batch steps of progress per step at ``batch_size`` (1 where the statistics are all zero)."""
        return float(self._gain(batch_size, sqr, var)) if var / (batch_size / self.init_batch_size) + sqr > 0 else 1.0

    def fixed_config(self, batch_size: int, replicas: int) -> tuple[int, int]:
        """(atomic_bsz, accum_steps) running a fixed total ``batch_size`` on ``replicas`` GPUs (the simulator's rule:
        split into accumulation steps above the largest local batch, at least one on a single GPU above M0)."""
        local = math.ceil(batch_size / replicas - 1e-8)
        accum = math.ceil(local / self.max_local_bsz - 1e-8) - 1
        if replicas == 1 and batch_size > self.init_batch_size:
            accum = max(1, accum)
        atomic = math.ceil(local / (accum + 1) - 1e-8)
        return min(atomic, self.max_batch_size // (replicas * (accum + 1))), accum

    def _candidates(
        self, nodes: np.ndarray, replicas: np.ndarray, sqr: float, var: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Goodput, atomic batch and accumulation steps of each candidate total batch size (columns) for each
        (nodes, replicas) row: ``BSZ_CANDIDATES`` sizes geometric from max(M0, min local x replicas) to the largest;
        a local batch above the largest atomic one accumulates, and one GPU above M0 accumulates at least once (as
        Pollux's optimiser); goodput 0 where the configuration is not allowed."""
        n = replicas[:, None].astype(float)
        lo = np.maximum(self.init_batch_size, self.min_local_bsz * n)
        t = np.linspace(0.0, 1.0, BSZ_CANDIDATES)[None, :]
        total = np.exp(np.log(lo) + t * (math.log(self.max_batch_size) - np.log(lo)))
        local = total / n
        accum = np.ceil(local / self.max_local_bsz - 1e-8) - 1
        accum = np.where((n == 1) & (local > self.init_batch_size + 1e-8), np.maximum(accum, 1), accum)
        atomic = np.ceil(local / (accum + 1) - 1e-8)
        good = self._gain(n * atomic * (accum + 1), sqr, var) / self._step(nodes[:, None], n, atomic, accum)
        ok = (atomic >= self.min_local_bsz) & (atomic <= self.max_local_bsz) & (lo <= self.max_batch_size)
        return np.where(ok, good, 0.0), atomic, accum

    def best_config(self, nodes: int, replicas: int, sqr: float, var: float) -> tuple[float, int, int]:
        """(goodput, atomic_bsz, accum_steps) maximising goodput over total batch sizes (Pollux's batch-size choice
        with accumulation), for gradient statistics (sqr, var); goodput 0 if no batch size fits."""
        good, atomic, accum = self._candidates(np.array([nodes]), np.array([replicas]), sqr, var)
        k = int(np.argmax(good[0]))
        if good[0, k] <= 0:
            return 0.0, 0, 0
        return float(good[0, k]), int(atomic[0, k]), int(accum[0, k])

    def goodput_curve(self, max_replicas: int, gpus_per_node: int, sqr: float, var: float) -> np.ndarray:
        """Best goodput on n = 0..max_replicas GPUs packed on ceil(n / gpus_per_node) nodes (index 0: 0.0)."""
        reps = np.arange(1, max_replicas + 1)
        good, _, _ = self._candidates(-(-reps // gpus_per_node), reps, sqr, var)
        return np.concatenate(([0.0], good.max(axis=1)))


@cache
def load_apps() -> dict[str, AppModel]:
    """The six applications of the Pollux simulator (read once per process; the models are immutable)."""
    raw = json.loads(files("fmstack.sim").joinpath("data/pollux/apps.json").read_text(encoding="utf-8"))
    apps: dict[str, AppModel] = {}
    for name, d in raw.items():

        def per_size(key: str, d: dict[str, object] = d) -> dict[int, tuple[float, ...]]:
            table = d[key]
            assert isinstance(table, dict)
            return {int(b): tuple(v) for b, v in table.items()}

        apps[name] = AppModel(
            name=name, **d["perf_params"], init_batch_size=d["init_batch_size"], max_batch_size=d["max_batch_size"],
            min_local_bsz=d["min_local_bsz"], max_local_bsz=d["max_local_bsz"], max_epochs=d["max_epochs"],
            batch_sizes=tuple(d["batch_sizes"]), progress_end=tuple(d["progress_end"]),
            iterations=per_size("iterations"), grad_sqr=per_size("grad_sqr"), grad_var=per_size("grad_var"),
        )  # fmt: skip
    return apps
