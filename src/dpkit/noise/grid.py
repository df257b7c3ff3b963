"""The output grid: continuous-valued mechanisms release multiples of 2^k.

Floating-point noise leaks: ``x + float_noise`` can reveal x through which floats are reachable
(Mironov 2012) and through rounding of the sum (Haney et al. 2022). dpkit never adds float noise.
A continuous-valued mechanism with grid exponent k:

1. rounds its input to the nearest multiple of g = 2^k, *exactly*: x·2^-k is exact in binary
   floating point, and round-half-up is done as ``f = floor(a); f + (a - f >= 1/2)`` where
   ``a - f`` is exact too; an input beyond ±2^62 grid steps (or infinite) *saturates* at
   ±2^62 steps instead of being refused (see below);
2. adds integer noise sampled exactly (:mod:`dpkit.noise._exact`) in grid units, saturating the
   noisy index at the int64 range;
3. returns ``n·2^k`` as float64 (exact while |n| < 2^53; beyond, the nearest float — rounding a
   released value is post-processing).

Saturation, not refusal, is what keeps failures independent of the data: if a value 2^32 were
refused and its neighbour 2^32 - 1 released, the exception itself would tell them apart. Clamping
to [-2^62, 2^62] steps is 1-Lipschitz, so inputs at distance Δ stay within ⌈Δ/g⌉ steps and the
privacy maps are unchanged; only the *accuracy* statement needs |x| < 2^62·g, which the docs say.
NaN is refused: it is at no finite distance from any input, so no neighbour of a NaN input
releases (an input with NaN and one without are never neighbours under an L1/L2 metric).

Rounding to nearest is shift-consistent: ⌊a + 1/2⌋ - ⌊b + 1/2⌋ <= ⌈a - b⌉, so inputs at most Δ
apart land at most ⌈Δ/g⌉ grid steps apart (:func:`grid_steps`). The privacy map of every grid
mechanism uses this grid sensitivity; when Δ is a multiple of g the rounding costs nothing.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from dpkit.errors import InvalidDataError, InvalidParameterError

__all__ = [
    "SATURATION",
    "add_saturating",
    "choose_exponent",
    "exact_index_sum",
    "from_grid",
    "grid_spacing",
    "grid_steps",
    "to_grid",
]

_MAX_INDEX = 2.0**52
SATURATION = 2**62
"""Inputs saturate at ±2^62 grid steps (exactly representable in float64 and int64)."""


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

    Values beyond ±2^62 steps, and ±inf, saturate at ±2^62 steps (a 1-Lipschitz clamp: the
    grid sensitivity ⌈Δ/g⌉ still holds). Raises :class:`InvalidDataError` for NaN only, which
    is at no finite distance from any other input.

    Example:
        >>> to_grid([0.3, 2.0**80, -float("inf")], 0).tolist()
        [0, 4611686018427387904, -4611686018427387904]
    """
    if isinstance(values, Fraction | int) and not isinstance(values, bool):
        steps = math.floor(Fraction(values) / grid_spacing(exponent) + Fraction(1, 2))
        return np.array(max(-SATURATION, min(SATURATION, steps)), dtype=np.int64)
    array = np.asarray(values, dtype=np.float64)
    if np.isnan(array).any():
        raise InvalidDataError(
            name,
            "contains NaN",
            "NaN is at no finite distance from any value; drop or impute it first (make_clamp "
            "drops NaN rows).",
        )
    with np.errstate(over="ignore"):
        scaled = np.ldexp(array, -exponent)
    scaled = np.clip(scaled, -float(SATURATION), float(SATURATION))
    floor = np.floor(scaled)
    rounded = floor + ((scaled - floor) >= 0.5)
    return rounded.astype(np.int64)


def exact_index_sum(indices: np.ndarray) -> int:
    """The exact sum of int64 grid indices, as a Python int (no overflow for any length).

    Each index is split as hi·2^31 + lo with 0 <= lo < 2^31; the parts are summed in int64 over
    chunks of 2^31 values, where neither sum can overflow, and combined in Python integers.
    """
    flat = np.asarray(indices, dtype=np.int64).reshape(-1)
    total = 0
    chunk = 2**31
    for start in range(0, flat.size, chunk):
        part = flat[start : start + chunk]
        low = part & (2**31 - 1)
        high = part >> 31
        total += int(np.sum(high, dtype=np.int64)) * 2**31 + int(np.sum(low, dtype=np.int64))
    return total


def add_saturating(indices: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """``indices + noise`` in int64, saturating at the int64 range instead of wrapping.

    Saturating the exact sum is post-processing of it, so it costs no privacy.
    """
    total = indices + noise
    overflow = ((indices >= 0) == (noise >= 0)) & ((total >= 0) != (indices >= 0))
    if overflow.any():
        limit = np.iinfo(np.int64)
        total = np.where(overflow, np.where(indices >= 0, limit.max, limit.min), total)
    return total


def from_grid(indices: np.ndarray, exponent: int, name: str = "output") -> np.ndarray:
    """n·2^exponent as float64: exact while |n| < 2^53, else the nearest float (this is only
    ever applied to released values, where rounding is post-processing)."""
    with np.errstate(over="ignore"):
        return np.ldexp(indices.astype(np.float64), exponent)
