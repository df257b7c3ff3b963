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

:func:`release_on_grid` does 1–3 for a release without the ±2^62-step saturation of the index:
a value beyond 2^52 steps is already a multiple of g (its float spacing is at least g), so the
exact noisy value x + n·g is formed there by one IEEE addition of two exact floats, which rounds
it correctly to the nearest float (post-processing of the exact sum). Only ±inf is clamped, at
±the largest float. Before it, a large ε (a fine grid) made every value beyond 2^62·g saturate:
``make_laplace(1, epsilon=1e10)(1e6)`` released about 256 — a silently wrong number.

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
    "release_on_grid",
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


_LARGEST = float(np.finfo(np.float64).max)
_EXACT_INDEX = 2**52
"""Below this many steps a grid index is handled in int64; at or beyond, the value itself is a
multiple of the grid spacing (floats from 2^52 on are integers), so it needs no rounding."""


def release_on_grid(values: object, exponent: int, noise: np.ndarray) -> np.ndarray:
    """``r(x) + n·2^exponent`` for each value x and noise index n, rounded once to the nearest
    float: the released values of an additive grid mechanism, correct at every magnitude.

    ``r`` rounds half-up to the grid (:func:`to_grid`) after clamping ±inf to ±the largest float
    (a 1-Lipschitz clamp, so inputs at distance Δ stay within ⌈Δ/g⌉ steps). Values within 2^52
    steps take the int64 path (:func:`to_grid`, :func:`add_saturating`, :func:`from_grid`).
    Beyond, x is a multiple of g already and the exact sum x + n·g is formed by one IEEE
    addition of the exact floats x and n·g (n·g is exact while |n| < 2^53 and g is a normal or
    subnormal power of two), which rounds the exact sum correctly; in the remaining corner
    cases (astronomically large noise, a grid outside the float range) the sum is formed in
    exact rationals. Either way the released float is a function of the exact noisy value only.
    Outputs beyond the float range saturate at ±the largest float (post-processing).

    Raises :class:`InvalidDataError` for NaN, like :func:`to_grid`.

    Example:
        >>> release_on_grid([2.0**80, -float("inf")], -30, np.array([3, -1])).tolist()
        [1.2089258196146292e+24, -1.7976931348623157e+308]
    """
    noise = np.asarray(noise, dtype=np.int64).reshape(-1)
    if isinstance(values, Fraction | int) and not isinstance(values, bool):
        g = grid_spacing(exponent)
        value = max(-Fraction(_LARGEST), min(Fraction(_LARGEST), Fraction(values)))
        steps = math.floor(value / g + Fraction(1, 2))
        if abs(steps) < _EXACT_INDEX:
            tiled = np.full(noise.size, steps, dtype=np.int64)
            return from_grid(add_saturating(tiled, noise), exponent)
        return _release_exact([value] * noise.size, exponent, noise)
    array = np.asarray(values, dtype=np.float64).reshape(-1)
    if array.shape != noise.shape:
        raise InvalidParameterError(
            "noise", noise.shape, f"one noise index per value {array.shape}"
        )
    return _release_blocks(array, exponent, noise)


_BLOCK = 1 << 14  # values per block of the fused release: its buffers stay in the L2 cache


def _release_blocks(array: np.ndarray, exponent: int, noise: np.ndarray) -> np.ndarray:
    """:func:`release_on_grid` for a float vector, block by block (every step is elementwise).

    A block whose scaled values x·2^-k all lie strictly within ±2^52 (no NaN, no big values)
    and whose noise indices lie within ±2^52 takes a fused float path that gives the same
    floats as :func:`_release_general`: x·2^-k is the same correctly rounded product as
    ``ldexp``; the half-up rounding ⌊s⌋ + [s - ⌊s⌋ >= 1/2] is computed as ⌊2s⌋ - ⌊s⌋ (equal:
    ⌊2s⌋ = 2⌊s⌋ + ⌊2(s - ⌊s⌋)⌋; doubling and floors are exact at this size); there is nothing
    to clamp or saturate; r(x) + n is an integer below 2^53 in magnitude, so adding it in
    float64 is exact; and the final scaling by 2^k is again one correctly rounded product.
    Any other block goes through :func:`_release_general`, which also raises on NaN.
    """
    size = array.shape[0]
    out = np.empty(size, dtype=np.float64)
    down = 2.0**-exponent if -1074 <= -exponent <= 1023 else None
    up = 2.0**exponent if -1074 <= exponent <= 1023 else None
    block = min(size, _BLOCK)
    scaled = np.empty(block, dtype=np.float64)
    floor = np.empty(block, dtype=np.float64)
    with np.errstate(over="ignore", under="ignore"):
        for start in range(0, size, _BLOCK):
            stop = min(size, start + _BLOCK)
            m = stop - start
            x, n, ss, ff = array[start:stop], noise[start:stop], scaled[:m], floor[:m]
            if down is None:
                np.ldexp(x, -exponent, out=ss)
            else:
                np.multiply(x, down, out=ss)
            lowest, highest = float(np.min(ss)), float(np.max(ss))  # NaN fails both tests
            fast = lowest > -_MAX_INDEX and highest < _MAX_INDEX
            fast = fast and int(np.min(n)) > -(2**52) and int(np.max(n)) < 2**52
            if not fast:
                out[start:stop] = _release_general(x, exponent, n)
                continue
            np.floor(ss, out=ff)
            ss *= 2.0
            np.floor(ss, out=ss)
            np.subtract(ss, ff, out=ff)  # r(x) = ⌊2s⌋ - ⌊s⌋, below 2^52 in magnitude
            ff += n  # exact: |r(x) + n| < 2^53
            if up is None:
                np.ldexp(ff, exponent, out=out[start:stop])
            else:
                np.multiply(ff, up, out=out[start:stop])
    return out


def _release_general(array: np.ndarray, exponent: int, noise: np.ndarray) -> np.ndarray:
    """:func:`release_on_grid` for a float vector, any values: the int64 path, and the exact
    sum for values beyond 2^52 grid steps."""
    indices = to_grid(array, exponent)  # refuses NaN
    out = from_grid(add_saturating(indices, noise), exponent)
    with np.errstate(over="ignore"):
        big = np.abs(np.ldexp(array, -exponent)) >= float(_EXACT_INDEX)
    if not big.any():
        return out
    # |x| >= 2^52·g: x is a multiple of g (floats from 2^52 on are integers), so r(x) = x
    x = np.clip(array[big], -_LARGEST, _LARGEST)
    n = noise[big]
    if -1074 <= exponent <= 971 - 53 and bool(np.all(np.abs(n) < 2**53)):
        with np.errstate(over="ignore"):
            total = x + np.ldexp(n.astype(np.float64), exponent)  # one correct rounding
        out[big] = np.clip(total, -_LARGEST, _LARGEST)
    else:
        out[big] = _release_exact([Fraction(float(v)) for v in x], exponent, n)
    return out


def _release_exact(values: list[Fraction], exponent: int, noise: np.ndarray) -> np.ndarray:
    """The corner cases of :func:`release_on_grid`, in exact rationals (values of huge
    magnitude only: a grid outside the float range, or noise beyond 2^53 steps)."""
    g = grid_spacing(exponent)
    limit = Fraction(_LARGEST)
    out = np.empty(len(values), dtype=np.float64)
    for i, (value, n) in enumerate(zip(values, noise.tolist(), strict=True)):
        clamped = max(-limit, min(limit, value))
        exact = (math.floor(clamped / g + Fraction(1, 2)) + int(n)) * g
        try:
            out[i] = max(-_LARGEST, min(_LARGEST, float(exact)))
        except OverflowError:
            out[i] = _LARGEST if exact > 0 else -_LARGEST
    return out


def from_grid(indices: np.ndarray, exponent: int, name: str = "output") -> np.ndarray:
    """n·2^exponent as float64: exact while |n| < 2^53, else the nearest float (this is only
    ever applied to released values, where rounding is post-processing)."""
    with np.errstate(over="ignore"):
        return np.ldexp(indices.astype(np.float64), exponent)
