"""How much of the GPU's peak an operation gets: GEMM efficiency by size, attention, memory-bound ops.

Defaults are data (``data/efficiency.yaml``, per GPU architecture and precision, or per GPU where that GPU
was measured apart from its architecture, each with its justification); a measured calibration profile (``fmstack bench --out``) replaces them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, overload

import numpy as np
import yaml
from numpy.typing import NDArray

from fmstack.catalog.schema import GPU
from fmstack.catalog.topology import Cluster
from fmstack.errors import InputError
from fmstack.perfmodel.calibration import CalibrationProfile, Curve


@dataclass(frozen=True, kw_only=True, slots=True)
class Efficiency:
    """Efficiency model of one GPU: GEMM curve per precision, attention and memory-bound fractions."""

    gemm: dict[str, Curve]
    attention: float
    memory: float
    source: str
    grouped_memory: float | None = None
    """Fraction of HBM bandwidth a grouped (routed-expert) GEMM reads its weights at, where a measurement
    exists for the architecture (``data/efficiency.yaml``); None: the dense weight reads' fraction
    (:attr:`weight_read_memory`)."""

    weight_memory: float | None = None
    """Fraction of HBM bandwidth the dense linear layers read their weights at in a memory-bound (decode) step, where a
    profile measured it (``gemv`` at 1 GiB: 2,845 GB/s on an H100 against a kernel copy's 3,015; the step's own layer
    shapes streamed at 2,687-2,700, benchmarks/results/decode-loop-h100-2026-11-24.md); None: the ``memory``
    fraction."""

    @property
    def weight_read_memory(self) -> float:
        """HBM fraction of the dense weight reads (``weight_memory``, else ``memory``)."""
        return self.memory if self.weight_memory is None else self.weight_memory

    @property
    def expert_memory(self) -> float:
        """HBM fraction of the routed experts' weight reads (``grouped_memory``, else the dense weight reads'
        :attr:`weight_read_memory`: a grouped GEMM streams weights no faster than a dense one)."""
        return self.weight_read_memory if self.grouped_memory is None else self.grouped_memory

    @overload
    def gemm_at(self, precision: str, flops_per_call: float) -> float: ...
    @overload
    def gemm_at(self, precision: str, flops_per_call: NDArray[np.float64]) -> NDArray[np.float64]: ...
    def gemm_at(self, precision: str, flops_per_call: float | NDArray[np.float64]) -> float | NDArray[np.float64]:
        curve = self.gemm.get(precision) or self.gemm["bf16"]
        if isinstance(flops_per_call, float):  # one configuration
            return curve.at(max(flops_per_call, 1.0))
        return curve.at(np.maximum(np.asarray(flops_per_call, dtype=np.float64), 1.0))


EfficiencyFor = Callable[[Cluster], Efficiency]
"""A cluster's efficiency, for a search over several clusters (a calibration profile's where it applies; a search
given none uses :func:`default_efficiency`)."""


@lru_cache(maxsize=1)
def _load_defaults() -> dict[str, Any]:
    """The packaged defaults file, parsed once per process (immutable data, not state)."""
    text = (resources.files("fmstack.perfmodel") / "data" / "efficiency.yaml").read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    assert isinstance(data, dict)
    return data


def default_efficiency(gpu: GPU) -> Efficiency:
    """The documented default curves for ``gpu``: its own entry where one is measured (GB200), else its architecture's."""
    return _default_for(gpu.name if gpu.name in _load_defaults() else gpu.architecture)


@lru_cache(maxsize=16)
def _default_for(architecture: str) -> Efficiency:
    table = _load_defaults()
    entry = table.get(architecture)
    if entry is None:
        raise InputError(
            "gpu",
            f"no default efficiency for architecture {architecture!r}; known: {', '.join(table)}; "
            "pass --calibration with a measured profile",
        )
    curves = {k: Curve(x=v["x"], y=v["y"]) for k, v in entry.items() if isinstance(v, dict)}
    grouped = entry.get("grouped_memory")
    return Efficiency(
        gemm=curves,
        attention=float(entry["attention"]),
        memory=float(entry["memory"]),
        source=str(entry["source"]),
        grouped_memory=None if grouped is None else float(grouped),
    )


def check_profile_gpu(profile: CalibrationProfile, gpu: GPU) -> None:
    """InputError unless ``profile`` was measured on ``gpu`` (its ``device.catalog_gpu`` names that catalog GPU).

    A profile measured on another GPU, or on a device the catalog does not know (a CPU: ``catalog_gpu`` null), says
    nothing about ``gpu``'s efficiency: its fractions of another device's peak would be applied to this one's.
    """
    measured = profile.device.catalog_gpu
    if measured is not None and measured.strip().lower() == gpu.name.strip().lower():
        return
    on = f"catalog GPU {measured}" if measured else "no catalog GPU"
    anyway = " or pass --calibration-force to apply it anyway" if measured else ""
    raise InputError(
        "calibration",
        f"profile measured on {profile.device.name!r} ({profile.device.kind}, {on}) but the cluster's GPU is "
        f"{gpu.name}; a profile calibrates only the GPU it was measured on: measure on {gpu.name} "
        f"(fmstack bench all --device cuda --out profile.json){anyway}",
    )


def check_profile_has_catalog_peak(profile: CalibrationProfile) -> None:
    """InputError for a profile of a device the catalog does not know (a CPU), even with --calibration-force, and for
    GEMM efficiencies above 1 (faster than the catalog's peak: the model would take them at their word).

    Its efficiencies are fractions of the device's own best measured rate (``peak_source`` measured), so the curve
    tops out near 1.0 by construction: applied to a GPU it would claim that GPU's whole peak.
    """
    if profile.device.catalog_gpu is None:
        raise InputError(
            "calibration",
            f"profile measured on {profile.device.name!r} ({profile.device.kind}, no catalog GPU): its efficiencies "
            "are fractions of that device's own best measured rate, not of a catalog peak, so it cannot calibrate a "
            "GPU even with --calibration-force; measure on the cluster's GPU (fmstack bench all --device cuda --out "
            "profile.json)",
        )
    for dtype, curve in profile.gemm_efficiency.items():
        if max(curve.y) > 1.0:
            raise InputError(
                "calibration",
                f"gemm_efficiency.{dtype} reaches {max(curve.y):.3g} of {profile.device.catalog_gpu}'s dense peak: no "
                f"GEMM runs faster than its peak, so the profile was not measured on that GPU as its catalog entry "
                f"describes it (another board or clock, or fp32 run as TF32); measure again, or fix the catalog entry",
            )


MIN_STREAMING_BYTES = 1 << 28
"""A memory curve calibrates an HBM fraction only if its largest point moves at least 256 MiB per call: smaller
buffers can sit in a GPU's L2 (50 MB on an H100, 126 MB on a B200), where a 4 MiB gemv read 764 GB/s and a 16 MiB
copy 4,521 GB/s on an H100 (bench-memory-kernel-copy.txt), neither of them HBM. ``bench memory --quick`` stops at
8 MiB."""


def efficiency_from_profile(profile: CalibrationProfile, gpu: GPU, *, force: bool = False) -> Efficiency:
    """Measured GEMM efficiency curves (and memory bandwidth fraction) replace the defaults for ``gpu``.

    The profile must have been measured on ``gpu`` (:func:`check_profile_gpu`) unless ``force``.
    Precisions the profile did not measure keep their defaults; the attention fraction keeps its default
    scaled by the measured / default GEMM plateau ratio (attention kernels are Tensor-core bound too); the memory
    fraction is copy's rate at its largest size over the peak, the dense weight-read fraction gemv's (when the
    profile has it: ``fmstack bench memory --device cuda``), each only from a curve that reaches
    :data:`MIN_STREAMING_BYTES`; the grouped-GEMM weight-read fraction keeps its default (the profile runs no grouped
    GEMM).
    """
    if not force:
        check_profile_gpu(profile, gpu)
    check_profile_has_catalog_peak(profile)
    base = default_efficiency(gpu)
    gemm = dict(base.gemm)
    for dtype, curve in profile.gemm_efficiency.items():
        gemm[dtype] = curve
    ratio = 1.0
    if "bf16" in profile.gemm_efficiency:
        measured = profile.gemm_efficiency["bf16"].y[-1]
        ratio = measured / base.gemm["bf16"].y[-1]
    memory, weights = base.memory, base.weight_memory
    peak_bw = profile.device.peak_memory_bw_gbps
    source = f"calibration profile of {profile.device.name} measured {profile.measured_at:%Y-%m-%d}"
    cached = []
    streams: tuple[tuple[str, Curve | None], ...] = (
        ("copy", profile.memory_bw_gbps),
        ("gemv", profile.memory_curves.get("gemv")),
    )
    for name, stream in streams:
        if stream is None or not peak_bw:
            continue
        if stream.x[-1] < MIN_STREAMING_BYTES:
            cached.append(f"{name} ends at {stream.x[-1] / 2**20:,.0f} MiB")
        elif name == "copy":
            memory = min(1.0, stream.y[-1] / peak_bw)
        else:
            weights = min(1.0, stream.y[-1] / peak_bw)
    if cached:
        source += f" ({', '.join(cached)}, within the caches: the default HBM fraction kept)"
    return Efficiency(
        gemm=gemm,
        attention=min(1.0, base.attention * ratio),
        memory=memory,
        weight_memory=weights,
        grouped_memory=base.grouped_memory,
        source=source,
    )
