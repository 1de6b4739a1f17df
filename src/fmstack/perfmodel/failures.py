"""Failure models: how often a training job of N GPUs is interrupted, and by what.

A fleet's published interruption counts become a rate per node-hour. A job is a series system of its
nodes (any failure stops it), so its failure rate is the sum of its nodes' rates and its MTBF is the
inverse (the series model of Kokolis et al., HPCA 2025, arXiv 2410.21680, which reports rates per 1,000
node-days). Causes that sit on a GPU (``per_gpu`` categories) scale with the GPU count, the rest with the
node count, so a node of 4 GPUs is not charged the GPU faults of 8.

Default ``llama3``: 419 unexpected interruptions on 16,384 H100 (2,048 nodes) in 54 days (Llama 3 herd
paper, arXiv 2407.21783, Table 5): job MTBF 54 x 24 h / 419 = 3.09 h = 185.6 min, per node 3.79 failures per
1,000 node-days. Failure arrivals are exponential (memoryless), as Young (1974) and Daly (2006) assume.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from fmstack.errors import InputError

HOURS_PER_DAY = 24.0
S_PER_HOUR = 3600.0


class _Category(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    count: int = Field(ge=0)
    node_loss: bool
    per_gpu: bool = False


class _ModelFile(BaseModel):
    """One failure model as written in ``failure_rates.yaml`` (counts over a fleet, or a rate)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    description: str = ""
    source: str = Field(min_length=1)
    gpus_per_node: int = Field(gt=0)
    fleet_gpus: int | None = Field(default=None, gt=0)
    period_days: float | None = Field(default=None, gt=0)
    unexpected_interruptions: int | None = Field(default=None, ge=0)
    planned_interruptions: int = Field(default=0, ge=0)
    failures_per_1000_node_days: float | None = Field(default=None, gt=0)
    categories: dict[str, _Category] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _rate_given_once(self) -> _ModelFile:
        counts = (self.fleet_gpus, self.period_days, self.unexpected_interruptions)
        if self.failures_per_1000_node_days is None and None in counts:
            raise ValueError(
                "give fleet_gpus, period_days and unexpected_interruptions, or failures_per_1000_node_days"
            )
        if self.categories and self.unexpected_interruptions is not None:
            total = sum(c.count for c in self.categories.values())
            if total != self.unexpected_interruptions:
                raise ValueError(
                    f"category counts sum to {total} != unexpected_interruptions({self.unexpected_interruptions})"
                )
        return self


class Generator(Protocol):
    """The part of ``numpy.random.Generator`` the samplers use (the simulator passes its own)."""

    def exponential(self, scale: float) -> float: ...

    def random(self) -> float: ...


@dataclass(frozen=True, kw_only=True, slots=True)
class FailureModel:
    """Failure rate per node-hour of a reference fleet, its cause mix, and optional user overrides."""

    name: str
    source: str
    failures_per_node_hour: float
    """Unexpected interruptions per node-hour of the reference fleet."""
    planned_per_node_hour: float = 0.0
    """Planned interruptions (maintenance, firmware) per node-hour; counted only with ``include_planned``."""
    gpus_per_node: int
    """GPUs per node of the reference fleet."""
    category_shares: dict[str, float] = field(default_factory=lambda: {"unknown": 1.0})
    """Share of unexpected interruptions by cause; sums to 1."""
    node_loss_categories: frozenset[str] = frozenset()
    """Causes that take a node out until repaired or replaced (need a spare or a wait)."""
    per_gpu_categories: frozenset[str] = frozenset()
    """Causes whose rate scales with the number of GPUs rather than nodes."""
    include_planned: bool = False
    job_mtbf_s: float | None = None
    """User override: a fixed job-level MTBF, whatever the job size."""

    @property
    def gpu_share(self) -> float:
        return sum(self.category_shares.get(c, 0.0) for c in self.per_gpu_categories)

    @property
    def node_loss_share(self) -> float:
        """Fraction of unexpected interruptions that remove a node (Llama 3: (268 + 32 + 21) / 419 = 0.766)."""
        return sum(self.category_shares.get(c, 0.0) for c in self.node_loss_categories)

    @property
    def failures_per_1000_node_days(self) -> float:
        return self.failures_per_node_hour * HOURS_PER_DAY * 1000.0

    def rate_per_s(self, num_gpus: int, gpus_per_node: int | None = None) -> float:
        """Interruptions per second of a job on ``num_gpus`` (series system of its nodes)."""
        if num_gpus <= 0:
            raise InputError("num_gpus", f"must be a positive number of GPUs, got {num_gpus}")
        if self.job_mtbf_s is not None:
            return 1.0 / self.job_mtbf_s
        per_node = gpus_per_node if gpus_per_node is not None else self.gpus_per_node
        if per_node <= 0:
            raise InputError("gpus_per_node", f"must be positive, got {per_node}")
        nodes = num_gpus / per_node
        gpu_share = self.gpu_share
        node_equivalents = gpu_share * num_gpus / self.gpus_per_node + (1.0 - gpu_share) * nodes
        rate_h = self.failures_per_node_hour * node_equivalents
        if self.include_planned:
            rate_h += self.planned_per_node_hour * nodes
        return rate_h / S_PER_HOUR

    def node_failures_per_hour(self, gpus_per_node: int) -> float:
        """Unexpected interruptions per hour of one node of ``gpus_per_node`` GPUs (the fleet twin strikes each node
        at this rate): lambda_node x (1 + s_gpu x (gpus_per_node / g_ref - 1)), the node equivalents of
        :meth:`rate_per_s` for one node. Llama 3 on 4-GPU nodes: 268/419 x 4/8 + 151/419 = 285/419 of the 8-GPU
        node's rate. ``job_mtbf_s`` (a job-level figure) and planned interruptions do not enter."""
        if gpus_per_node <= 0:
            raise InputError("gpus_per_node", f"must be positive, got {gpus_per_node}")
        return self.failures_per_node_hour * (1.0 + self.gpu_share * (gpus_per_node / self.gpus_per_node - 1.0))

    def node_category_shares(self, gpus_per_node: int) -> dict[str, float]:
        """Cause shares of the interruptions of a node of ``gpus_per_node`` GPUs: per-GPU causes weigh
        ``gpus_per_node / g_ref`` as much as on the reference node (Llama 3 on 4-GPU nodes: GPU 134/285)."""
        if gpus_per_node == self.gpus_per_node or not self.per_gpu_categories:
            return dict(self.category_shares)
        w = gpus_per_node / self.gpus_per_node
        raw = {c: v * (w if c in self.per_gpu_categories else 1.0) for c, v in self.category_shares.items()}
        total = sum(raw.values())
        return {c: v / total for c, v in raw.items()}

    def mtbf_s(self, num_gpus: int, gpus_per_node: int | None = None) -> float:
        """Mean time between interruptions of a job on ``num_gpus``, seconds."""
        return 1.0 / self.rate_per_s(num_gpus, gpus_per_node)

    def expected_failures(self, num_gpus: int, duration_s: float, gpus_per_node: int | None = None) -> float:
        return self.rate_per_s(num_gpus, gpus_per_node) * duration_s

    def sample_interarrival_s(self, rng: Generator, num_gpus: int, gpus_per_node: int | None = None) -> float:
        """Time to the next interruption, drawn from the exponential law with the job's MTBF."""
        return float(rng.exponential(self.mtbf_s(num_gpus, gpus_per_node)))

    def sample_category(self, rng: Generator, shares: dict[str, float] | None = None) -> str:
        """A cause drawn by its share (categories in file order, so the same seed gives the same cause);
        ``shares``: other shares of the same causes (:meth:`node_category_shares`)."""
        shares = self.category_shares if shares is None else shares
        u = float(rng.random())
        acc = 0.0
        for name, share in shares.items():
            acc += share
            if u < acc:
                return name
        return next(reversed(shares))


def _builtin_path() -> Path:
    return Path(str(resources.files("fmstack.perfmodel") / "data" / "failure_rates.yaml"))


def _read_models(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError("failure_model", f"cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError:
        raise InputError("failure_model", f"{path} is not valid YAML") from None
    if not isinstance(data, dict) or not isinstance(data.get("models"), dict):
        raise InputError("failure_model", f"{path} must hold a mapping 'models: {{name: {{...}}}}'")
    models: dict[str, Any] = data["models"]
    return models


def _from_file(name: str, raw: Any, where: str) -> FailureModel:
    try:
        m = _ModelFile.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "(model)"
        raise InputError("failure_model", f"{where} model '{name}' field '{loc}': {err['msg']}") from None
    if m.failures_per_1000_node_days is not None:
        per_node_h = m.failures_per_1000_node_days / 1000.0 / HOURS_PER_DAY
        planned_h = 0.0
    else:
        assert m.fleet_gpus is not None and m.period_days is not None and m.unexpected_interruptions is not None
        node_hours = m.fleet_gpus / m.gpus_per_node * m.period_days * HOURS_PER_DAY
        per_node_h = m.unexpected_interruptions / node_hours
        planned_h = m.planned_interruptions / node_hours
    total = sum(c.count for c in m.categories.values())
    shares = {k: c.count / total for k, c in m.categories.items()} if total else {"unknown": 1.0}
    return FailureModel(
        name=name,
        source=m.source,
        failures_per_node_hour=per_node_h,
        planned_per_node_hour=planned_h,
        gpus_per_node=m.gpus_per_node,
        category_shares=shares,
        node_loss_categories=frozenset(k for k, c in m.categories.items() if c.node_loss),
        per_gpu_categories=frozenset(k for k, c in m.categories.items() if c.per_gpu),
    )


def _positive(value: float | None, what: str) -> None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise InputError("mtbf", f"{what} must be a positive number of seconds or hours, got {value}")


def load_failure_model(
    name: str = "llama3",
    *,
    path: str | Path | None = None,
    node_mtbf_h: float | None = None,
    job_mtbf_s: float | None = None,
    include_planned: bool = False,
) -> FailureModel:
    """A failure model by name from the built-in ``failure_rates.yaml`` (or ``path``), with overrides.

    ``node_mtbf_h`` replaces the per-node rate (1 / node MTBF) and keeps the cause mix; ``job_mtbf_s``
    pins the job's MTBF whatever its size. Non-positive values raise ``InputError('mtbf', ...)``.
    """
    _positive(node_mtbf_h, "node_mtbf_h")
    _positive(job_mtbf_s, "job_mtbf_s")
    file = Path(path) if path is not None else _builtin_path()
    models = _read_models(file)
    if name not in models:
        raise InputError("failure_model", f"unknown failure model {name!r}; known: {', '.join(sorted(models))}")
    model = _from_file(name, models[name], str(file))
    if node_mtbf_h is not None:
        model = replace(model, failures_per_node_hour=1.0 / node_mtbf_h)
    return replace(model, include_planned=include_planned, job_mtbf_s=job_mtbf_s)


def failure_model_names(path: str | Path | None = None) -> list[str]:
    return sorted(_read_models(Path(path) if path is not None else _builtin_path()))
