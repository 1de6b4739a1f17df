"""Response lengths of an RL rollout drawn from a log-normal, set from the statistics RL frameworks log.

Reasoning RL's response lengths are skewed and long-tailed: a few responses run far past the mean, some to the
engine's token limit, and the synchronous step waits for them (RollPacker, Gao et al. 2025, arXiv 2509.21009: "a
highly skewed, long-tail distribution of response lengths"; Seer, Qin et al. 2025, arXiv 2511.14617; APRIL, Zhou
et al. 2025, arXiv 2509.18521). A log-normal is the usual shape for such lengths (docs/rl-validation.md cites the
sources). Users know their own run's statistics: veRL logs ``response_length/mean`` and
``response_length/clip_ratio``, the share of responses whose length equals ``max_response_length``
(``verl/trainer/ppo/metric_utils.py``: ``torch.eq(response_length, max_response_length).float().mean()``). So the
distribution is set from

- the mean of the *capped* lengths (what the framework logs) and the clip ratio: ``ln L ~ N(mu, sigma^2)``, the
  engine stops a response at the cap ``C`` (mass above ``C`` placed at ``C``). With ``z = Phi^-1(1 - r)``,
  ``P(L >= C) = r`` gives ``mu = ln C - sigma z`` and the capped mean is
  ``E[min(L, C)] = C (exp(sigma^2 / 2 - sigma z) Phi(z - sigma) + r)`` (the partial expectation of a log-normal,
  ``E[L; L < C] = exp(mu + sigma^2 / 2) Phi((ln C - mu - sigma^2) / sigma)``). The bracket's first term is
  ``E[exp(sigma (Z - z)); Z < z]``, strictly decreasing in sigma from ``1 - r`` to 0, so a sigma exists (one, found
  by bisection) iff ``r C < mean < C``: the capped responses alone contribute ``r C`` to the mean;
- or the coefficient of variation ``c``: ``sigma = sqrt(ln(1 + c^2))`` (the log-normal's own CV before any cap),
  and with a cap ``mu`` is solved so the capped mean is the given mean (increasing in ``mu``; bisection).

Lengths are drawn with common random numbers: ``L_i = min(C, max(1, round(exp(mu + sigma z_i))))`` with ``z_i``
standard normal from the run's seed, so a larger sigma lengthens the same draws' upper quantiles.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from fmstack.errors import InputError

_PHI = NormalDist()
SIGMA_MAX = 8.0
"""Largest log-normal sigma searched (a spread of e^8 ~ 3000x between the median and one sigma above it)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LogNormalLengths:
    """Response lengths ``min(cap, exp(mu + sigma Z))``, ``Z`` standard normal."""

    mu: float
    sigma: float
    cap: int | None = None

    def mean(self) -> float:
        """Mean of the capped lengths (before rounding to whole tokens)."""
        full = math.exp(self.mu + self.sigma**2 / 2)
        if self.cap is None:
            return full
        if self.sigma == 0.0:
            return min(math.exp(self.mu), float(self.cap))
        a = (math.log(self.cap) - self.mu) / self.sigma
        return full * _PHI.cdf(a - self.sigma) + self.cap * (1.0 - _PHI.cdf(a))

    def clip_share(self) -> float:
        """P(L >= cap); 0 without a cap."""
        if self.cap is None:
            return 0.0
        if self.sigma == 0.0:
            return 1.0 if math.exp(self.mu) >= self.cap else 0.0
        return 1.0 - _PHI.cdf((math.log(self.cap) - self.mu) / self.sigma)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray[tuple[int], np.dtype[np.int64]]:
        """``n`` whole-token lengths from ``rng`` (one standard normal per length)."""
        z = rng.standard_normal(n)
        x = np.exp(np.minimum(self.mu + self.sigma * z, 700.0))
        if self.cap is not None:
            x = np.minimum(x, float(self.cap))
        return np.maximum(1, np.rint(x)).astype(np.int64)


def _bisect(f: Callable[[float], float], lo: float, hi: float) -> float:
    """Root of an increasing ``f`` on [lo, hi] (f(lo) <= 0 <= f(hi)), to double precision."""
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if f(mid) < 0.0:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * max(1.0, abs(mid)):
            break
    return 0.5 * (lo + hi)


def from_clip_ratio(mean_len: float, cap: int, clip_ratio: float) -> LogNormalLengths:
    """The log-normal whose capped lengths have mean ``mean_len`` and reach ``cap`` with probability
    ``clip_ratio`` (module docstring); InputError when no sigma gives both."""
    r = clip_ratio
    if mean_len >= cap:  # the cap, not the ratio, is what to change
        raise InputError(
            "response-cap", f"a mean of response-len({mean_len:.0f}) at response-cap({cap}) needs every response at "
            "the cap, so no share below it; give a --response-cap above --response-len",
        )  # fmt: skip
    if r * cap >= mean_len:
        raise InputError(
            "clip-ratio", f"no log-normal has both: the capped responses alone give a mean of clip-ratio({r}) x "
            f"response-cap({cap}) = {r * cap:.0f} >= response-len({mean_len:.0f}); allowed: clip-ratio < "
            f"{mean_len / cap:.4g}",
        )  # fmt: skip
    z = _PHI.inv_cdf(1.0 - r)
    target = mean_len / cap - r

    def below(sigma: float) -> float:  # E[L/C; L < C], decreasing in sigma
        return math.exp(sigma * sigma / 2 - sigma * z) * _PHI.cdf(z - sigma)

    if below(SIGMA_MAX) > target:
        raise InputError(
            "clip-ratio", f"clip-ratio({r}) with response-len({mean_len:.0f}) and response-cap({cap}) needs a "
            f"log-normal sigma above {SIGMA_MAX:g} (almost every response a few tokens, the rest at the cap): the "
            f"mean is too close to clip-ratio x response-cap = {r * cap:.0f}",
        )  # fmt: skip
    sigma = _bisect(lambda s: target - below(s), 1e-12, SIGMA_MAX)
    return LogNormalLengths(mu=math.log(cap) - sigma * z, sigma=sigma, cap=cap)


def from_cv(mean_len: float, cv: float, cap: int | None = None) -> LogNormalLengths:
    """The log-normal with coefficient of variation ``cv`` (before the cap) whose capped lengths have mean
    ``mean_len`` (module docstring)."""
    sigma = math.sqrt(math.log1p(cv * cv))
    mu0 = math.log(mean_len) - sigma * sigma / 2
    if cap is None or sigma == 0.0:
        return LogNormalLengths(mu=mu0, sigma=sigma, cap=cap)
    if mean_len >= cap:
        raise InputError(
            "length-cv", f"a mean of response-len({mean_len:.0f}) = response-cap({cap}) needs every response at the "
            f"cap, so no spread (cv 0), got {cv}",
        )  # fmt: skip

    def excess(mu: float) -> float:
        return LogNormalLengths(mu=mu, sigma=sigma, cap=cap).mean() - mean_len

    # the cap lowers the mean, so mu >= mu0; at mu = ln C + 40 sigma the capped mean is C to double precision
    mu = _bisect(excess, mu0, math.log(cap) + 40.0 * sigma)
    return LogNormalLengths(mu=mu, sigma=sigma, cap=cap)
