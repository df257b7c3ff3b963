"""Stable transformations: clamp, exact bounded sum, count.

Each is a :class:`~dpkit.core._framework.Transformation` whose stability map is derived from the
declared bounds, never from the data. The bounded sum is computed *exactly*: values are rounded
to a grid of spacing 2^k and summed as integers, so the declared sensitivity holds under finite
arithmetic — a float sum's rounding can otherwise exceed it (Casacuberta et al. 2022,
"Widespread underestimation of sensitivity in differentially private libraries").
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from dpkit._arrays import as_float64
from dpkit._exact import Number, fraction_of, sensitivity_of
from dpkit.core._framework import Transformation
from dpkit.core._spaces import AbsoluteDistance, AtomDomain, SymmetricDistance, VectorDomain
from dpkit.errors import InvalidDataError, InvalidParameterError
from dpkit.noise._grid import choose_exponent, exact_index_sum, from_grid, grid_spacing, to_grid

__all__ = ["make_bounded_sum", "make_clamp", "make_count"]


def _bounds(bounds: tuple[Number, Number]) -> tuple[Fraction, Fraction]:
    """Exact (lower, upper), each float rounded outward (a wider box is the safe side)."""
    try:
        lower_raw, upper_raw = bounds
    except (TypeError, ValueError):
        raise InvalidParameterError("bounds", bounds, "a pair (lower, upper)") from None
    lower = fraction_of("bounds[0]", lower_raw)
    if isinstance(lower_raw, float | np.floating):
        lower = min(lower, Fraction(float(lower_raw)))
    upper = sensitivity_of("bounds[1]", upper_raw)
    if lower > upper:
        raise InvalidParameterError("bounds", bounds, "(lower, upper) with lower <= upper")
    return lower, upper


def _float_vector(data: Any, name: str = "data") -> np.ndarray:
    """The rows as a 1-d float64 array with NaN rows dropped.

    Refuses only what the *shape* decides (public). NaN rows are dropped, as SQL aggregates skip
    NULL: dropping a row is 1-stable under the symmetric distance, and refusing instead would
    make a neighbour with one NaN row fail where the other releases.
    """
    array = as_float64(data)
    if array.ndim != 1:
        raise InvalidDataError(name, f"expected a 1-d array of numbers, got shape {array.shape}")
    return array[~np.isnan(array)]


def make_clamp(bounds: tuple[Number, Number]) -> Transformation:
    """Clamp every value into [lower, upper] (1-stable under the symmetric distance).

    ±inf clamp to the bounds; NaN rows are dropped (as SQL aggregates skip NULL), which is
    1-stable too. Nothing about the values can make it raise.

    Example:
        >>> import dpkit as dp
        >>> from dpkit.transformations import make_clamp
        >>> make_clamp((0, 10))([-5.0, 3.0, 20.0]).tolist()
        [0.0, 3.0, 10.0]
    """
    lower, upper = _bounds(bounds)
    lo, hi = float(lower), float(upper)
    if Fraction(lo) < lower:
        lo = float(np.nextafter(lo, np.inf))  # stay inside the declared bounds
    if Fraction(hi) > upper:
        hi = float(np.nextafter(hi, -np.inf))

    def function(data: Any) -> np.ndarray:
        return np.clip(_float_vector(data), lo, hi)

    return Transformation(
        VectorDomain(AtomDomain("float")),
        SymmetricDistance(),
        VectorDomain(AtomDomain("float", bounds=(lower, upper))),
        SymmetricDistance(),
        function,
        lambda d_in: d_in,
        name="clamp",
    )


def make_bounded_sum(
    bounds: tuple[Number, Number], *, grid_exponent: int | None = None
) -> Transformation:
    """The exact sum of values in [lower, upper]; sensitivity d_in · max(|lower|, |upper|).

    Values are clamped into the bounds (NaN rows dropped, as :func:`make_clamp` does), rounded to
    the grid 2^k (default: 2^-30 of the largest bound) and the grid indices summed exactly, with
    no overflow for any number of rows. Adding or removing one row moves the sum by one rounded
    value, at most max(|r(lower)|, |r(upper)|); that is the stability map. Clamping here (not
    refusing values outside the bounds) keeps whether the sum succeeds independent of the data.

    Returns the sum as a float when a float holds it exactly (fewer than 2^53 grid steps), else as
    an exact :class:`~fractions.Fraction`; the grid mechanisms round either exactly.

    Example:
        >>> from dpkit.transformations import make_bounded_sum
        >>> make_bounded_sum((0, 10))([0.1, 0.2, 0.3])  # each value on the grid 2^-27, exactly
        0.6000000014901161
        >>> make_bounded_sum((0, 10))([25.0, float("nan"), -3.0])  # clamped to 10 and 0
        10.0
    """
    lower, upper = _bounds(bounds)
    magnitude = max(abs(lower), abs(upper))
    if magnitude == 0:
        raise InvalidParameterError("bounds", bounds, "not both zero (the sum would be constant)")
    exponent = grid_exponent if grid_exponent is not None else choose_exponent(magnitude, 30)
    g = grid_spacing(exponent)
    step_bound = max(
        abs(to_grid([float(lower)], exponent)[0]), abs(to_grid([float(upper)], exponent)[0])
    )
    # the rounded extreme values can exceed the exact bounds by half a step: use the rounded ones
    per_row = max(Fraction(int(step_bound)) * g, magnitude)
    lo, hi = float(lower), float(upper)

    def function(data: Any) -> float | Fraction:
        array = np.clip(_float_vector(data), lo, hi)
        total = exact_index_sum(to_grid(array, exponent))
        if abs(total) < 2**53:
            return float(from_grid(np.array([total]), exponent)[0])
        return Fraction(total) * g

    return Transformation(
        VectorDomain(AtomDomain("float", bounds=(lower, upper))),
        SymmetricDistance(),
        AtomDomain("float"),
        AbsoluteDistance(),
        function,
        lambda d_in: d_in * per_row,
        name="bounded_sum",
    )


def make_count() -> Transformation:
    """The number of rows; sensitivity d_in under the symmetric distance.

    Example:
        >>> from dpkit.transformations import make_count
        >>> make_count()([1, 2, 3])
        3
    """

    def function(data: Any) -> int:
        return int(np.shape(np.asarray(data))[0]) if np.ndim(data) else 1

    return Transformation(
        VectorDomain(AtomDomain("float")),
        SymmetricDistance(),
        AtomDomain("int"),
        AbsoluteDistance(),
        function,
        lambda d_in: d_in,
        name="count",
    )
