"""Public validation and the clamping of private data into declared bounds.

Everything here is a deterministic function of public parameters and, for :func:`prepare`, of
the data *after* clamping: NaN is mapped to the lower bound and ±inf (and any other value outside
the bounds) is clamped, so no data value can make a later step raise. See docs/sensitivity.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dpkit._arrays import as_float64
from dpkit._exact import Number, check_epsilon, fraction_of
from dpkit.errors import InvalidParameterError

__all__ = ["STATISTICS", "Bounds", "Statistic", "check_beta", "make_statistic", "prepare"]

STATISTICS = (
    "count",
    "sum",
    "mean",
    "median",
    "quantile",
    "trimmed_mean",
    "max",
    "min",
    "range",
    "variance",
    "distinct",
)


@dataclass(frozen=True, slots=True)
class Bounds:
    """Declared (public) bounds L < U, finite; data are clamped into [L, U]."""

    lower: float
    upper: float

    @staticmethod
    def of(lower: Number, upper: Number) -> Bounds:
        lo = float(fraction_of("lower", lower))
        hi = float(fraction_of("upper", upper))
        if not (math.isfinite(lo) and math.isfinite(hi)) or not lo < hi:
            raise InvalidParameterError(
                "upper", upper, f"a finite number greater than lower={lower!r}"
            )
        if max(abs(lo), abs(hi)) >= 2.0**200:
            raise InvalidParameterError("upper", upper, "of magnitude below 2^200")
        return Bounds(lo, hi)

    @property
    def width(self) -> float:
        return self.upper - self.lower


@dataclass(frozen=True, slots=True)
class Statistic:
    """A statistic of a clamped sample of public size n, as dpkit.sensitivity computes it.

    ``name`` is one of :data:`STATISTICS`; ``q`` the quantile level (quantile/median/min/max);
    ``trim`` the fraction trimmed from each end (trimmed_mean; 0 for sum and mean).
    """

    name: str
    q: Fraction = Fraction(1, 2)
    trim: Fraction = Fraction(0)

    def rank(self, n: int) -> int:
        """1-based rank r = clamp(⌈q·n⌉, 1, n) of the order statistic a quantile returns."""
        return min(n, max(1, math.ceil(self.q * n)))

    def trimmed(self, n: int) -> int:
        """t = ⌊trim·n⌋ values trimmed from each end."""
        return math.floor(self.trim * n)


def make_statistic(name: str, q: Number | None = None, trim: Number | None = None) -> Statistic:
    """Validate a statistic's name and parameters (public; before any data is read)."""
    if name not in STATISTICS:
        raise InvalidParameterError("statistic", name, "one of " + ", ".join(STATISTICS))
    if name == "quantile":
        if q is None:
            raise InvalidParameterError("q", q, "a number in [0, 1] for statistic='quantile'")
        level = fraction_of("q", q)
        if not 0 <= level <= 1:
            raise InvalidParameterError("q", q, "in [0, 1]")
        return Statistic(name, q=level)
    if q is not None:
        raise InvalidParameterError("q", q, "None unless statistic='quantile'")
    if name == "median":
        return Statistic("quantile", q=Fraction(1, 2))
    if name == "max":
        return Statistic("quantile", q=Fraction(1))
    if name == "min":
        return Statistic("quantile", q=Fraction(0))
    if name == "trimmed_mean":
        if trim is None:
            raise InvalidParameterError("trim", trim, "a fraction in [0, 1/2) to trim per end")
        amount = fraction_of("trim", trim)
        if not 0 <= amount < Fraction(1, 2):
            raise InvalidParameterError("trim", trim, "in [0, 1/2)")
        return Statistic("trimmed_mean", trim=amount)
    if trim is not None:
        raise InvalidParameterError("trim", trim, "None unless statistic='trimmed_mean'")
    if name in ("sum", "mean"):
        return Statistic(name, trim=Fraction(0))
    return Statistic(name)


def check_beta(beta: Number) -> float:
    """β > 0 (finite)."""
    value = check_epsilon(beta, "beta")
    return float(value)


def check_n(n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise InvalidParameterError("n", n, "an integer >= 1 (the public number of units)")
    if n >= 2**40:
        raise InvalidParameterError("n", n, "below 2^40")
    return int(n)


def prepare(data: Any, bounds: Bounds, n: int | None = None) -> np.ndarray:
    """Sorted clamped values, padded: ``xp[0] = L``, ``xp[1..n]`` the data, ``xp[n+1] = U``.

    NaN becomes L; ±inf and out-of-range values are clamped. Non-numeric input and a length
    other than the declared public ``n`` are errors about the *schema*, never about values.
    """
    array = np.asarray(data)
    if array.dtype != object and array.dtype.kind not in "biuf":
        raise InvalidParameterError("data", f"dtype {array.dtype}", "a numeric array")
    values = as_float64(array).reshape(-1)  # None is NaN, huge ints saturate: never refused
    if n is not None and values.size != n:
        raise InvalidParameterError(
            "data", f"{values.size} values", f"exactly the declared public n={n}"
        )
    if values.size == 0:
        raise InvalidParameterError("data", "0 values", "at least one value")
    values = np.where(np.isnan(values), bounds.lower, values)
    np.clip(values, bounds.lower, bounds.upper, out=values)
    values.sort()
    out = np.empty(values.size + 2)
    out[0], out[-1] = bounds.lower, bounds.upper
    out[1:-1] = values
    return out
