"""Calibration helpers: budget shares, integer noise, interval widths and the grids of sums."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from statistics import NormalDist
from typing import Any

import numpy as np

from dpkit._exact import sqrt_upper
from dpkit.analytics._bounding import Contribution
from dpkit.analytics._engines._pandas import grid_indices
from dpkit.analytics._planner._types import Family
from dpkit.core._framework import Measurement
from dpkit.core._losses import ZCDP, PrivacyLoss, PureDP
from dpkit.core._spaces import AtomDomain, L2Distance, VectorDomain
from dpkit.errors import UnsupportedQueryError
from dpkit.mechanisms import AdditiveInfo, make_geometric
from dpkit.noise._distributions import DiscreteGaussian, DiscreteLaplace, GridNoise
from dpkit.noise._grid import choose_exponent

_NORMAL = NormalDist()  # quantiles via the stdlib (Wichura AS241): scipy.stats costs ~2 s to import


# ------------------------------------------------------------------ helpers
def ceil_log2(x: Fraction) -> int:
    """Smallest e with 2^e >= x (x > 0)."""
    e = x.numerator.bit_length() - x.denominator.bit_length()
    while Fraction(2) ** e < x:
        e += 1
    while Fraction(2) ** (e - 1) >= x:
        e -= 1
    return e


def floor_log2(x: Fraction) -> int:
    e = ceil_log2(x)
    return e if Fraction(2) ** e == x else e - 1


def grid_range(bounds: tuple[Fraction, Fraction], exponent: int) -> tuple[float, float, int, int]:
    low_f, high_f = float(bounds[0]), float(bounds[1])
    idx, _ = grid_indices(np.array([low_f, high_f]), low_f, high_f, exponent)
    return low_f, high_f, int(idx[0]), int(idx[1])


def sqrt_down(x: Fraction) -> Fraction:
    """A fraction <= sqrt(x)."""
    guess = Fraction(math.sqrt(float(x))).limit_denominator(10**12)
    while guess * guess > x:
        guess *= Fraction(999_999_999_999, 10**12)
    return guess


def rho_for(epsilon: Fraction, delta: Fraction) -> Fraction:
    """The largest ρ (on a fine grid) whose zCDP conversion at δ gives at most ε."""
    low, high = 0.0, float(epsilon)
    for _ in range(50):
        mid = (low + high) / 2
        if mid > 0 and ZCDP(Fraction(mid)).to_approx(delta).epsilon <= epsilon:
            low = mid
        else:
            high = mid
    if low <= 0:
        raise UnsupportedQueryError("the (ε, δ) budget is too small for the Gaussian mechanism")
    return Fraction(low)


@dataclass(frozen=True, slots=True)
class Share:
    """A part of the query budget: ε (pure) or ρ (zCDP)."""

    family: Family
    amount: Fraction

    def scaled(self, factor: Fraction) -> Share:
        return Share(self.family, self.amount * factor)

    def loss(self) -> PrivacyLoss:
        return PureDP(self.amount) if self.family == "pure" else ZCDP(self.amount)

    def epsilon(self) -> Fraction:
        """For pure-DP mechanisms (the exponential mechanism) inside a zCDP query: ε²/2 <= ρ."""
        return self.amount if self.family == "pure" else sqrt_down(2 * self.amount)


def integer_gaussian(l2_squared: int, rho: Fraction) -> Measurement[Any]:
    """Discrete Gaussian noise on integer vectors at L2 distance <= sqrt(l2_squared): ρ-zCDP.

    σ² = s²/(2ρ) for s >= sqrt(l2_squared) (exact when it is a perfect square), so the privacy
    map gives exactly ρ at d_in = s (Canonne, Kamath & Steinke 2020, Thm. 14, coordinate-wise).
    """
    root = math.isqrt(l2_squared)
    s = Fraction(root) if root * root == l2_squared else sqrt_upper(Fraction(l2_squared))
    sigma2 = s * s / (2 * rho)
    lattice = DiscreteGaussian(sigma2)

    def function(data: Any) -> Any:
        values = np.asarray(data, dtype=np.int64)
        return values + lattice.sample(values.size).reshape(values.shape)

    return Measurement(
        VectorDomain(AtomDomain("int")),
        L2Distance(),
        "zcdp",
        function,
        lambda d: ZCDP(d * d / (2 * sigma2)),
        name="discrete_gaussian",
        noise=GridNoise(lattice, 0),
        d_in=s,
        info=AdditiveInfo(sigma2=sigma2),
    )


def integer_noise(share: Share, l1: int, l2_squared: int) -> Measurement[Any]:
    if share.family == "pure":
        return make_geometric(sensitivity=l1, epsilon=share.amount)
    return integer_gaussian(l2_squared, share.amount)


_WIDE = 50.0  # above this σ (in lattice steps) the discrete Gaussian's moments are σ's own


def _wide_gaussian(measurement: Measurement[Any]) -> float | None:
    """σ of a wide discrete Gaussian (whose stats would need a huge summation window), else None.

    For σ >= 50 the discrete Gaussian's pmf equals the continuous density at the integers up to
    a relative error below e^{-2π²σ²} (Poisson summation), so its variance, E|Z| and quantiles are
    the continuous ones to far better than float precision.
    """
    lattice = getattr(measurement.noise, "lattice", None)
    if isinstance(lattice, DiscreteGaussian) and lattice.sigma > _WIDE:
        return lattice.sigma
    return None


def noise_halfwidth(measurement: Measurement[Any], alpha: float) -> float:
    """The smallest h with P(|noise| > h) <= alpha, in the measurement's output units."""
    sigma = _wide_gaussian(measurement)
    if sigma is not None:
        return float(math.ceil(float(_NORMAL.inv_cdf(1 - alpha / 2)) * sigma))
    return float(measurement.noise.interval_halfwidth(alpha))


def noise_variance(measurement: Measurement[Any]) -> float:
    sigma = _wide_gaussian(measurement)
    return sigma * sigma if sigma is not None else float(measurement.noise.variance())


def noise_expected_abs(measurement: Measurement[Any]) -> float:
    sigma = _wide_gaussian(measurement)
    if sigma is not None:
        return sigma * math.sqrt(2 / math.pi)
    return float(measurement.noise.expected_abs())


def linear_noise_halfwidth(
    measurement: Measurement[Any], weights: Sequence[float], alpha: float
) -> float:
    """An h with P(|Σ_j w_j Z_j| > h) <= alpha for independent copies Z_j of the measurement's
    lattice noise (discrete Laplace or discrete Gaussian), in lattice units.

    Never a normal approximation (it under-covers the heavier-tailed discrete Laplace):

    * one non-zero weight: the exact quantile, ``|w|·tail_bound(alpha)``;
    * several: the smaller of two valid bounds — the union bound ``‖w‖₁·tail_bound(alpha/k)``
      over the k non-zero terms, and a Chernoff bound ``min_s (K(s) + ln(2/alpha)) / s`` with
      K the cumulant generating function of the sum (discrete Laplace:
      Σ log[(1-p)² / ((1-p e^{s w_j})(1-p e^{-s w_j}))]; the discrete Gaussian is sub-Gaussian
      with parameter σ (Canonne, Kamath & Steinke 2020), so K(s) <= s²σ²‖w‖₂²/2).
    """
    w = np.array([abs(float(v)) for v in weights if v != 0], dtype=np.float64)
    if w.size == 0:
        return 0.0
    lattice = getattr(measurement.noise, "lattice", None)
    sigma = _wide_gaussian(measurement)

    def tail(a: float) -> float:
        if sigma is not None:
            return float(math.ceil(float(_NORMAL.inv_cdf(1 - a / 2)) * sigma))
        assert lattice is not None
        return float(lattice.tail_bound(a))

    if w.size == 1:
        return float(w[0]) * tail(alpha)
    union = float(w.sum()) * tail(alpha / w.size)
    log_two_over_alpha = math.log(2 / alpha)
    if isinstance(lattice, DiscreteGaussian):
        chernoff = lattice.sigma * float(np.sqrt(np.sum(w * w))) * math.sqrt(2 * log_two_over_alpha)
    elif isinstance(lattice, DiscreteLaplace) and math.exp(-1.0 / float(lattice.scale)) == 0.0:
        chernoff = math.inf  # p underflows (a large ε): the union bound is already exact, 0
    elif isinstance(lattice, DiscreteLaplace):
        p = math.exp(-1.0 / float(lattice.scale))
        s_max = -math.log(p) / float(w.max())  # the MGF is finite for |s·w_j| < ln(1/p)
        s = s_max * np.linspace(1e-4, 1 - 1e-4, 4000)
        sw = np.outer(s, w)
        with np.errstate(divide="ignore", invalid="ignore"):
            cumulant = np.sum(
                2 * math.log1p(-p) - np.log1p(-p * np.exp(sw)) - np.log1p(-p * np.exp(-sw)),
                axis=1,
            )
        bounds = (cumulant + log_two_over_alpha) / s
        chernoff = float(np.nanmin(bounds)) if np.isfinite(bounds).any() else math.inf
    else:
        chernoff = math.inf
    # a relative margin for the float arithmetic of the bound
    return min(union, chernoff * (1 + 1e-9))


MAX_ROWS_FOR_INTERVALS = 2**40
"""Sum intervals include the rounding of up to this many rows (about 1.1 trillion)."""


@dataclass(frozen=True, slots=True)
class SumGrid:
    """The two grids of a noisy sum.

    The engine rounds each value to the *fine* grid 2^fine (as fine as a row's value allows in
    a BIGINT: |value| / 2^fine <= 2^62) and sums the integers exactly (HUGEINT in DuckDB,
    DECIMAL(38, 0) in Spark, Python int in the reference engine). The exact total is then
    rounded once to the *noise* grid 2^coarse, where the noise is added. One unit's ``c`` rows
    in a group move the fine total by at most ``c·M`` (M = the bound's magnitude in fine units)
    and so the rounded total by at most ``⌈c·M/r⌉ <= c·per_row`` noise steps (rounding to
    nearest is shift-consistent: ⌊a + ½⌋ - ⌊b + ½⌋ <= ⌈a - b⌉), with ``per_row = ⌈M/r⌉`` and
    ``r = 2^(coarse - fine)``: the sensitivity is that of rounding each row to the noise grid.

    The released total differs from the exact sum of the clamped values by the noise, plus at
    most ``2^coarse / 2`` (rounding the total) plus ``n · 2^fine / 2`` (rounding the n rows):
    :meth:`rounding_bound` adds the last for n up to :data:`MAX_ROWS_FOR_INTERVALS`, which is
    below 2^-22 of the bound's magnitude (and below 1e-6 of the noise scale when ε / L1 <= 4).
    """

    fine: int
    coarse: int
    fine_per_row: int

    @property
    def ratio(self) -> int:
        return 1 << (self.coarse - self.fine)

    @property
    def per_row(self) -> int:
        """A row's largest |value| in noise-grid steps (rounded up)."""
        return -(-self.fine_per_row // self.ratio)

    def to_coarse(self, total: int) -> int:
        """An exact fine-grid total rounded (half up) to the noise grid."""
        r = self.ratio
        return total if r == 1 else (total + r // 2) // r

    def rounding_bound(self, rows: int = MAX_ROWS_FOR_INTERVALS) -> float:
        """The most the rounding moves a total of up to ``rows`` rows, in value units."""
        total = 0.0 if self.ratio == 1 else math.ldexp(0.5, self.coarse)
        return total + rows * math.ldexp(0.5, self.fine)


def fine_exponent(magnitude: Fraction, coarse: int, headroom: int = 62) -> int:
    """The finest grid on which |value| <= magnitude is at most 2^headroom steps (and 2^-e a
    finite double), never coarser than the noise grid."""
    top = ceil_log2(max(magnitude, Fraction(1, 2**1000)))
    return max(min(coarse, top - headroom), -1000)


def sum_grid(bounds: tuple[Fraction, Fraction], coarse: int) -> SumGrid:
    """The :class:`SumGrid` of a sum clamped to ``bounds`` with noise on grid 2^coarse."""
    magnitude = max(abs(bounds[0]), abs(bounds[1]))
    fine = fine_exponent(magnitude, coarse)
    _, _, lo, hi = grid_range(bounds, fine)
    return SumGrid(fine, coarse, max(abs(lo), abs(hi)))


def value_exponent_for_sum(
    share: Share, contrib: Contribution, magnitude: Fraction, per_row: Fraction
) -> int:
    """Grid exponent for a summed value: ~2^-20 of the noise scale, sums kept in int64."""
    if share.family == "pure":
        scale = contrib.rows_l1 * per_row / share.amount
    else:
        scale = Fraction(math.sqrt(contrib.rows_l2_squared)) * per_row / sqrt_down(2 * share.amount)
    exponent = choose_exponent(scale) if scale > 0 else 0
    return max(exponent, ceil_log2(max(magnitude, Fraction(1, 2**1000))) - 30)
