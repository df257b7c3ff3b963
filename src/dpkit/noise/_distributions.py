"""Noise distributions on the integer lattice, and their view in real units on a grid.

A lattice distribution knows how to sample itself exactly and gives its pmf, cdf, E|Z|, Var Z and
tail quantiles in closed form (or by exact summation). Distributions whose log-pmf is
``-rate·level(k)`` for an integer-valued ``level`` (discrete Laplace, staircase, ladder) expose
``level`` and ``rate`` so that :mod:`dpkit.testing` can check pure-DP claims *exactly*.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol, runtime_checkable

import numpy as np

from dpkit._exact import check_alpha
from dpkit.noise._exact import discrete_gaussian, discrete_laplace
from dpkit.noise._gauss_table import build_table, sample_table

__all__ = [
    "DiscreteGaussian",
    "DiscreteLaplace",
    "GridNoise",
    "LatticeNoise",
    "TieredLatticeNoise",
]


@runtime_checkable
class LatticeNoise(Protocol):
    """Integer-valued noise symmetric about 0."""

    def sample(self, size: int) -> np.ndarray: ...
    def log_pmf(self, k: np.ndarray) -> np.ndarray: ...
    def cdf(self, k: np.ndarray) -> np.ndarray: ...
    def expected_abs(self) -> float: ...
    def variance(self) -> float: ...
    def tail_bound(self, alpha: float) -> int:
        """The smallest h with P(|Z| > h) <= alpha."""
        ...

    def support_radius(self, mass: float) -> int:
        """An h with P(|Z| > h) <= mass (used to bound numeric sums)."""
        ...


@runtime_checkable
class TieredLatticeNoise(LatticeNoise, Protocol):
    """log pmf(k) = const - rate·level(k) with integer levels, and a periodic tail:
    level(k + period) = level(k) + level_step for k >= tail_start (and symmetrically)."""

    @property
    def rate(self) -> Fraction: ...
    @property
    def tail_start(self) -> int: ...
    @property
    def period(self) -> int: ...
    @property
    def level_step(self) -> int: ...

    def level(self, k: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True, slots=True)
class DiscreteLaplace:
    """P(Z = k) = (1-p)/(1+p) · p^|k| with p = e^{-1/scale} (two-sided geometric)."""

    scale: Fraction

    @property
    def rate(self) -> Fraction:
        return 1 / self.scale

    tail_start = 0
    period = 1
    level_step = 1

    def _log_p(self) -> float:
        """log p = -1/scale, computed without underflow (p itself is 0.0 in float64 for scales
        below ~1/745: a query at large ε)."""
        try:
            return -float(1 / self.scale)
        except OverflowError:  # 1/scale beyond float64: p is 0 to any precision
            return -sys.float_info.max

    def _p(self) -> float:
        return math.exp(self._log_p())

    def level(self, k: np.ndarray) -> np.ndarray:
        return np.abs(np.asarray(k, dtype=np.int64))

    def sample(self, size: int) -> np.ndarray:
        return discrete_laplace(self.scale, size)

    def log_pmf(self, k: np.ndarray) -> np.ndarray:
        p = self._p()
        with np.errstate(over="ignore"):
            steps = np.abs(np.asarray(k, dtype=np.float64)) * self._log_p()
        return np.log1p(-p) - np.log1p(p) + steps

    def cdf(self, k: np.ndarray) -> np.ndarray:
        p = self._p()
        k = np.asarray(k, dtype=np.float64)
        with np.errstate(over="ignore"):
            decay = np.exp(np.abs(k) * self._log_p())  # p^|k|
            neg = decay / (1 + p)
            pos = 1.0 - p * decay / (1 + p)
        return np.where(k < 0, neg, pos)

    def expected_abs(self) -> float:
        p = self._p()
        return 2 * p / ((1 - p) * (1 + p))

    def variance(self) -> float:
        p = self._p()
        return 2 * p / (1 - p) ** 2

    def tail_bound(self, alpha: float) -> int:
        alpha = check_alpha(alpha)
        p = self._p()
        log_p = self._log_p()
        # P(|Z| > h) = 2 p^{h+1} / (1 + p); with log p from the scale (p underflows to 0 at
        # scales below ~1/745, where log(p) used to raise and the bound is 0)
        if p == 0.0:
            return 0
        h = math.ceil(math.log(alpha * (1 + p) / 2) / log_p) - 1
        while h > 0 and 2 * p**h / (1 + p) <= alpha:
            h -= 1
        while 2 * p ** (h + 1) / (1 + p) > alpha:
            h += 1
        return max(h, 0)

    def support_radius(self, mass: float) -> int:
        return self.tail_bound(mass)


@dataclass(frozen=True, slots=True)
class DiscreteGaussian:
    """P(Z = k) ∝ e^{-k²/(2σ²)} on the integers (Canonne, Kamath & Steinke 2020)."""

    sigma2: Fraction

    @property
    def sigma(self) -> float:
        return math.sqrt(float(self.sigma2))

    def sample(self, size: int) -> np.ndarray:
        # the table sampler (same law, exact, ~2x faster; docs/noise.md "The table sampler")
        # for 1 <= σ <= 2^35, CKS's sampler elsewhere
        table = build_table(self.sigma2)
        if table is None:
            return discrete_gaussian(self.sigma2, size)
        return sample_table(table, size)

    def _window(self) -> np.ndarray:
        radius = math.ceil(40 * self.sigma) + 2
        return np.arange(-radius, radius + 1, dtype=np.int64)

    def _log_norm(self) -> float:
        from scipy.special import logsumexp  # imported when used: scipy takes ~0.4 s to load

        k = self._window().astype(np.float64)
        return float(logsumexp(-k * k / (2 * float(self.sigma2))))

    def log_pmf(self, k: np.ndarray) -> np.ndarray:
        k = np.asarray(k, dtype=np.float64)
        return -k * k / (2 * float(self.sigma2)) - self._log_norm()

    def cdf(self, k: np.ndarray) -> np.ndarray:
        window = self._window()
        pmf = np.exp(self.log_pmf(window))
        cumulative = np.cumsum(pmf)
        idx = np.searchsorted(window, np.asarray(k, dtype=np.int64), side="right") - 1
        return np.where(idx < 0, 0.0, cumulative[np.clip(idx, 0, None)])

    def expected_abs(self) -> float:
        k = self._window()
        return float(np.sum(np.abs(k) * np.exp(self.log_pmf(k))))

    def variance(self) -> float:
        # For σ >= 100 the deficit σ² - Var (Poisson summation: about 4π²σ⁴·e^{-2π²σ²}) is far
        # below one ulp of σ², and the window of 80σ points would exhaust memory for the σ of a
        # huge contribution bound (a MemoryError while planning, found by the property test)
        if self.sigma2 >= 10_000:
            return float(self.sigma2)
        k = self._window()
        return float(np.sum(k.astype(np.float64) ** 2 * np.exp(self.log_pmf(k))))

    def tail_bound(self, alpha: float) -> int:
        alpha = check_alpha(alpha)
        k = np.arange(0, self._window()[-1] + 2)
        pmf = np.exp(self.log_pmf(k))
        # P(|Z| > h) = 2·Σ_{j>h} p(j), summed from the far tail inwards (no cancellation)
        tail_from = np.cumsum(pmf[::-1])[::-1]  # tail_from[h] = Σ_{j>=h} p(j)
        beyond = 2 * tail_from[1:]  # beyond[h] = P(|Z| > h)
        return int(np.argmax(beyond <= alpha))

    def support_radius(self, mass: float) -> int:
        return self.tail_bound(mass)


@dataclass(frozen=True, slots=True)
class GridNoise:
    """A lattice distribution seen in real units: the noise is ``Z · 2^exponent``."""

    lattice: LatticeNoise
    exponent: int

    @property
    def spacing(self) -> float:
        return math.ldexp(1.0, self.exponent)

    def pmf(self, x: np.ndarray) -> np.ndarray:
        """P(noise = x); zero off the grid."""
        x = np.asarray(x, dtype=np.float64)
        k = np.ldexp(x, -self.exponent)
        on_grid = k == np.round(k)
        return np.where(on_grid, np.exp(self.lattice.log_pmf(np.round(k))), 0.0)

    def cdf(self, x: np.ndarray) -> np.ndarray:
        """P(noise <= x)."""
        k = np.floor(np.ldexp(np.asarray(x, dtype=np.float64), -self.exponent))
        return self.lattice.cdf(k)

    def expected_abs(self) -> float:
        """E|noise|."""
        return self.lattice.expected_abs() * self.spacing

    def variance(self) -> float:
        """Var(noise)."""
        return self.lattice.variance() * self.spacing**2

    def interval_halfwidth(self, alpha: float = 0.05) -> float:
        """The smallest h on the grid with P(|noise| > h) <= alpha."""
        return self.lattice.tail_bound(alpha) * self.spacing

    def confidence_interval(
        self, released: float | np.ndarray, alpha: float = 0.05
    ) -> tuple[np.ndarray, np.ndarray]:
        """A (1-α) interval for the exact (grid-rounded) value: released ± halfwidth."""
        h = self.interval_halfwidth(alpha)
        released = np.asarray(released, dtype=np.float64)
        return released - h, released + h
