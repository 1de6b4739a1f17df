"""The calibration profile: what `fmstack bench` measured on one machine, as curves the model reads.

`fmstack bench ... --out profile.json` writes it; perfmodel reads it with :func:`load_profile` and uses the
measured curves instead of its default efficiencies. It lives here (not in bench) because perfmodel may not
import bench. The schema is documented in docs/bench.md; ``schema_version`` changes when a field changes meaning.

Units: GB = 1e9 bytes, bandwidth in GB/s, TFLOP/s = 1e12 FLOP/s. Collective bandwidths are nccl-tests' busbw
(NVIDIA nccl-tests, doc/PERFORMANCE.md), so they compare across rank counts.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Annotated, Literal, TypeVar, overload

import numpy as np
import numpy.typing as npt
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from fmstack.errors import InputError
from fmstack.fileio import atomic_write_text

SCHEMA_VERSION = 1


class Curve(BaseModel):
    """A measured quantity y versus an operation size x (FLOPs, bytes), read piecewise linear in log10(x).

    Sizes span orders of magnitude, so interpolation runs in log10(x); outside the measured range the curve is
    clamped to its end values (no extrapolation: a bigger GEMM is assumed no faster than the biggest measured).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    x: list[float] = Field(min_length=1, description="operation size, strictly increasing, > 0")
    y: list[float] = Field(min_length=1, description="measured value at each x")

    @model_validator(mode="after")
    def _check(self) -> Curve:
        if len(self.x) != len(self.y):
            raise ValueError(f"x has {len(self.x)} points but y has {len(self.y)}; they must match")
        if any(not (0 < v < float("inf")) for v in self.x):  # NaN fails the comparison: it passed `v <= 0`
            raise ValueError("x values must be finite and > 0 (the curve is read in log10(x))")
        if any(b <= a for a, b in zip(self.x, self.x[1:], strict=False)):
            raise ValueError("x values must be strictly increasing")
        if any(not np.isfinite(v) for v in self.y):
            raise ValueError("y values must be finite")
        return self

    @overload
    def at(self, x: float) -> float: ...
    @overload
    def at(self, x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]: ...
    def at(self, x: float | npt.NDArray[np.float64]) -> float | npt.NDArray[np.float64]:
        """y at x: linear in log10(x) between points, clamped at both ends; vectorised over arrays."""
        xs = np.log10(np.asarray(self.x, dtype=np.float64))
        ys = np.asarray(self.y, dtype=np.float64)
        if isinstance(x, float):  # one value: the same NumPy functions, without the array checks
            if x <= 0:
                raise InputError("x", "curve sizes must be > 0")
            return float(np.interp(np.log10(x), xs, ys))
        arr = np.asarray(x, dtype=np.float64)
        if np.any(arr <= 0):
            raise InputError("x", "curve sizes must be > 0")
        out = np.interp(np.log10(arr), xs, ys)
        if np.ndim(x) == 0:
            return float(out)
        return out


class CollectiveCurve(Curve):
    """busbw (GB/s) versus message bytes for one collective, with how it was measured."""

    num_ranks: int = Field(ge=2)
    backend: str = Field(min_length=1, description="torch.distributed backend: gloo, nccl")


_C = TypeVar("_C", bound=Curve)


def _positive(curve: _C) -> _C:
    """Every curve of a profile is a measured rate (TFLOP/s, GB/s) or a fraction of a peak, so > 0: the model
    divides work by them (0 is a division by zero, a negative value a negative step time)."""
    if any(v <= 0 for v in curve.y):
        raise ValueError(f"y values must be > 0 (measured rates and fractions of a peak), got {min(curve.y):g}")
    return curve


Rate = Annotated[Curve, AfterValidator(_positive)]
"""A profile's curve: measured values, all > 0."""
CollectiveRate = Annotated[CollectiveCurve, AfterValidator(_positive)]


class DeviceInfo(BaseModel):
    """The measured device. For a CPU, peaks are the best rates measured on it (see ``peak_source``)."""

    # a peak of NaN, -5 or Infinity (JSON as Python writes it) was read as given: a division by zero or a NaN step
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: str = Field(min_length=1)
    kind: Literal["cpu", "cuda"]
    catalog_gpu: str | None = None
    peak_tflops: dict[str, Annotated[float, Field(gt=0)]] = Field(
        default_factory=dict, description="per dtype (fp32, bf16, fp16)"
    )
    peak_memory_bw_gbps: float | None = Field(default=None, gt=0)
    peak_source: str = Field(default="", description="where the peaks come from: catalog or measured")
    num_threads: int | None = Field(default=None, gt=0, description="torch intra-op threads during the GEMM bench")
    concurrent_processes: int = Field(
        default=1, ge=1, description="processes measuring GEMM and memory at once (per-process rates recorded)"
    )


class CalibrationProfile(BaseModel):
    """Everything one machine's benches measured; each section is empty until its bench has run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int = SCHEMA_VERSION
    device: DeviceInfo
    measured_at: datetime
    torch_version: str | None = None
    gemm_efficiency: dict[str, Rate] = Field(default_factory=dict, description="dtype -> achieved/peak vs FLOPs")
    gemm_tflops: dict[str, Rate] = Field(default_factory=dict, description="dtype -> TFLOP/s vs FLOPs per GEMM")
    memory_bw_gbps: Rate | None = Field(default=None, description="copy bandwidth GB/s vs bytes moved")
    memory_curves: dict[str, Rate] = Field(
        default_factory=dict, description="copy, triad, gemv (cuda): GB/s vs bytes moved"
    )
    collectives: dict[str, CollectiveRate] = Field(default_factory=dict, description="op -> busbw GB/s vs bytes")
    storage_gbps: dict[str, Rate] = Field(default_factory=dict, description="write, read: GB/s vs file bytes")
    storage_target: str | None = None

    @model_validator(mode="after")
    def _version(self) -> CalibrationProfile:
        if self.schema_version != SCHEMA_VERSION:
            raise ValueError(f"schema_version {self.schema_version} unsupported; this fmstack reads {SCHEMA_VERSION}")
        return self

    def gemm_curve(self, dtype: str) -> Curve:
        """The TFLOP/s curve of ``dtype``; InputError naming the dtypes measured."""
        if dtype not in self.gemm_tflops:
            known = ", ".join(sorted(self.gemm_tflops)) or "none (run `fmstack bench gemm --out ...`)"
            raise InputError("calibration.gemm_tflops", f"no curve for dtype {dtype!r}; measured: {known}")
        return self.gemm_tflops[dtype]

    def memory_curve(self) -> Curve:
        if self.memory_bw_gbps is None:
            raise InputError("calibration.memory_bw_gbps", "not measured; run `fmstack bench memory --out ...`")
        return self.memory_bw_gbps

    def collective_curve(self, op: str) -> CollectiveCurve:
        if op not in self.collectives:
            known = ", ".join(sorted(self.collectives)) or "none (run `fmstack bench collectives --out ...`)"
            raise InputError("calibration.collectives", f"no curve for {op!r}; measured: {known}")
        return self.collectives[op]


def _describe(exc: ValidationError) -> tuple[str, str]:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"]) or "(profile)"
    msg = {"extra_forbidden": "unknown field", "missing": "missing required field"}.get(err["type"], err["msg"])
    return loc, msg


def parse_profile(data: object, where: str = "calibration") -> CalibrationProfile:
    """Validate already-parsed JSON into a profile; InputError names the bad field."""
    if not isinstance(data, dict):
        raise InputError(where, f"a calibration profile must be a JSON object, got {type(data).__name__}")
    try:
        return CalibrationProfile.model_validate(data)
    except ValidationError as exc:
        loc, msg = _describe(exc)
        raise InputError(where, f"field '{loc}': {msg}") from None


def load_profile(path: str | Path) -> CalibrationProfile:
    """Read a profile JSON file; InputError (naming the field) on a missing, unreadable or malformed file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError("calibration", f"cannot read {p}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise InputError("calibration", f"{p} is not UTF-8 JSON text (byte {exc.start}); a binary file?") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError("calibration", f"{p} is not valid JSON at line {exc.lineno}: {exc.msg}") from None
    except RecursionError:  # json's decoder recurses per nesting level: [[[[...]]]] 100,000 deep
        raise InputError("calibration", f"{p} nests JSON arrays or objects too deeply to read") from None
    return parse_profile(data, where=f"calibration {p}")


def save_profile(profile: CalibrationProfile, path: str | Path) -> Path:
    """Write atomically (temporary file, then rename): an existing file is never left half-written."""
    return atomic_write_text(path, profile.model_dump_json(indent=2) + "\n", field="out")
