"""Element-wise helpers that take Python floats or NumPy arrays alike.

One formula serves one configuration (plain floats: microseconds, no NumPy per-call overhead) and millions
(float64 arrays). With floats every helper uses ``math`` / builtins, with arrays the NumPy function; both give
the same IEEE-754 results for these operations (comparisons, min / max, floor / ceil, gcd, sqrt).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
Num = float | FloatArray
"""A Python float when every input is a scalar (fast path: one estimate in microseconds), else an array."""
Cond = bool | npt.NDArray[np.bool_]
_SCALAR = (float, int)
_BOOL = (bool, np.bool_)
# isinstance with a tuple, and loops without generators: these run ~50 times per estimate


def where(cond: Cond, a: Num, b: Num) -> Num:
    if isinstance(cond, _BOOL):
        return a if cond else b
    return np.where(cond, a, b)


def maximum(a: Num, b: Num) -> Num:
    if isinstance(a, _SCALAR) and isinstance(b, _SCALAR):
        return max(a, b)
    return np.maximum(a, b)


def minimum(values: list[Num]) -> Num:
    """Element-wise minimum of floats or arrays."""
    for v in values:
        if not isinstance(v, _SCALAR):
            return np.asarray(functools.reduce(np.minimum, values), dtype=np.float64)
    return min(values)


def ceil(x: Num) -> Num:
    return float(math.ceil(x)) if isinstance(x, _SCALAR) else np.ceil(x)


def floor(x: Num) -> Num:
    return float(math.floor(x)) if isinstance(x, _SCALAR) else np.floor(x)


def sqrt(x: Num) -> Num:
    return math.sqrt(x) if isinstance(x, float) else np.sqrt(x)


def ceil_log2(x: Num) -> Num:
    return float(math.ceil(math.log2(x))) if isinstance(x, float) else np.ceil(np.log2(x))


def gcd(a: Num, b: Num) -> Num:
    """Greatest common divisor of whole numbers held as floats."""
    if isinstance(a, _SCALAR) and isinstance(b, _SCALAR):
        return float(math.gcd(int(a), int(b)))
    return np.gcd(np.asarray(a).astype(np.int64), np.asarray(b).astype(np.int64)).astype(np.float64)


def logical_not(cond: Cond) -> Cond:
    return not cond if isinstance(cond, _BOOL) else ~cond


def any_true(cond: Cond) -> bool:
    return bool(cond) if isinstance(cond, _BOOL) else bool(cond.any())


def all_finite(x: Num) -> bool:
    return math.isfinite(x) if isinstance(x, float) else bool(np.all(np.isfinite(x)))


def full_like(x: Num, value: float) -> Num:
    """``value`` in the shape of ``x`` (a float for a float)."""
    return value if isinstance(x, _SCALAR) else np.full(np.shape(x), value, dtype=np.float64)
