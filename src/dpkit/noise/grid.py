"""The output grid: continuous-valued mechanisms release multiples of 2^k.

Floating-point noise leaks: ``x + float_noise`` can reveal x through which floats are reachable
(Mironov 2012) and through rounding of the sum (Haney et al. 2022). dpkit never adds float noise.
A continuous-valued mechanism with grid exponent k:

1. rounds its input to the nearest multiple of g = 2^k, *exactly*: x·2^-k is exact in binary
   floating point (barring overflow, which is refused), and round-half-up is done as
   ``f = floor(a); f + (a - f >= 1/2)`` where ``a - f`` is exact too;
2. adds integer noise sampled exactly (:mod:`dpkit.noise._exact`) in grid units;
3. returns ``n·2^k`` as float64, exact because |n| < 2^53 (refused otherwise).

Rounding to nearest is shift-consistent: ⌊a + 1/2⌋ - ⌊b + 1/2⌋ <= ⌈a - b⌉, so inputs at most Δ
apart land at most ⌈Δ/g⌉ grid steps apart (:func:`grid_steps`). The privacy map of every grid
mechanism uses this grid sensitivity; when Δ is a multiple of g the rounding costs nothing.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from dpkit.errors import InvalidDataError, InvalidParameterError

__all__ = ["choose_exponent", "from_grid", "grid_spacing", "grid_steps", "to_grid"]

_MAX_INDEX = 2.0**52


def grid_spacing(exponent: int) -> Fraction:
    """g = 2^exponent, exactly."""
    return Fraction(2) ** exponent


def choose_exponent(scale: Fraction, resolution_bits: int = 20) -> int:
    """The default grid: the power of two with ``scale / g`` in [2^bits, 2^(bits+1)).

    With 20 bits the grid is a millionth of the noise scale: invisible in accuracy, and the
    sensitivity rounding (at most one grid step) inflates the noise by at most ~1e-6.
    """
    if scale <= 0:
        raise InvalidParameterError("scale", scale, "> 0")
    log2 = scale.numerator.bit_length() - scale.denominator.bit_length()
    # adjust so that 2^log2 <= scale < 2^(log2+1)
    while Fraction(2) ** log2 > scale:
        log2 -= 1
    while Fraction(2) ** (log2 + 1) <= scale:
        log2 += 1
    return log2 - resolution_bits


def grid_steps(distance: Fraction, exponent: int) -> int:
    """⌈distance / 2^exponent⌉: how many grid steps apart two rounded inputs can be."""
    return math.ceil(distance / grid_spacing(exponent))


def to_grid(values: object, exponent: int, name: str = "data") -> np.ndarray:
    """Round float data to the nearest multiple of 2^exponent; return the multiples as int64.

    Raises :class:`InvalidDataError` for NaN/inf or values too large for the grid.
    """
    array = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(array)):
        raise InvalidDataError(
            name,
            "contains NaN or infinite values",
            "Clean or impute them first; dpkit never guesses how to treat them.",
        )
    scaled = np.ldexp(array, -exponent)
    if scaled.size and float(np.max(np.abs(scaled))) >= _MAX_INDEX:
        limit = math.ldexp(_MAX_INDEX, exponent)
        raise InvalidDataError(
            name,
            f"a value's magnitude is at least {limit:g}, too large for the output grid 2^"
            f"{exponent}",
            "Pass a larger grid_exponent or rescale the data.",
        )
    floor = np.floor(scaled)
    rounded = floor + ((scaled - floor) >= 0.5)
    return rounded.astype(np.int64)


def from_grid(indices: np.ndarray, exponent: int, name: str = "output") -> np.ndarray:
    """n·2^exponent as float64, exactly (refuses |n| >= 2^53, where floats lose integers)."""
    if indices.size and int(np.max(np.abs(indices))) >= 2**53:
        raise InvalidDataError(
            name,
            "the noisy value does not fit exactly in a float64 at this grid",
            "Pass a larger grid_exponent.",
        )
    return np.ldexp(indices.astype(np.float64), exponent)
