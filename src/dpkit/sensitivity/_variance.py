"""The variance released with smooth sensitivity, computed exactly (no float error to bound).

**The released function.** Each value is clamped into the declared bounds [L, U] (NaN → L, ±inf
clamped) and rounded to the public grid L + h·j, j ∈ {0, ..., M}, M = 2^g, h = (U − L)/M (the
integer j = rint((x − L)·M/(U − L)) clipped to [0, M]; any deterministic per-value map would do).
The statistic is the population variance of the rounded values,

    f(x) = h²·(n·Σj² − (Σj)²)/n²,

computed **exactly** from the integer sums (Python ints; numpy int64 where a bound proves it
cannot overflow: Σj <= n·M <= 2^60, and Σj² in chunks of 2^14 terms of at most 2^48 each) and
rounded to the output grid 2^k exactly (a Fraction).

**Why this is private.** The rounding is a per-value map P, so substituting one value of x
substitutes one value of P(x): neighbours stay neighbours (with the same n), and the mechanism
is the smooth-sensitivity mechanism applied to P(x). Its noise must therefore be scaled to a
β-smooth upper bound on the local sensitivity *of the released function at P(x)*, and that is
what dpkit computes: S(x) = S*_{Var,β}(P(x)), the β-smooth sensitivity of the variance over
[L, U]^n (docs/sensitivity.md §2: A^(k) exact, two cases) evaluated at the rounded data.

* The grid is a subset of [L, U], so this A^(k) bounds the variance's distance-k sensitivity
  restricted to grid datasets, and A^(k)(y) <= A^(k+1)(x) holds for all neighbours in [L, U]^n,
  grid ones included: S is a β-smooth upper bound on LS_f(P(x)) (NRS07 Lemma 3.2).
* S computed on the *unrounded* data would be a smooth bound of a different function: rounding
  can raise LS at P(x) above S*(x) (by O(h(U − L)/n)), so the release would not be covered.

**S without float error that matters.** In grid units (L = 0, U = M) the means that enter
A^(k) are N/(n − 1) with an integer numerator N, so every quantity of §2's two cases is an
integer over (n − 1): D(m)·(n − 1) and e·(n − 1) = (n − 1)·a − N are exact int64 values below
2^62 when n·M <= 2^60 (checked from the public n and g). The candidate values
(D − e)(D + e) = D² − e² and e² are then products of two exact integers, computed in float64
with relative error below 2^-50; no subtraction follows them, so every A^(k) and S* = max_k
e^{−kβ}A^(k) has relative error below 2^-40, which the 1 + 2^-30 inflation (charged as
β + 2^-29, as for every smooth release, docs/sensitivity.md §3) covers. The concave
parts' vertices (which data points to try) are exact rationals too: on a region where
m·(n − 1) = C − a, the vertex of (U − m)² − (a − m)² is (C + M)/(n + 1) and that of
(m − L)² − (a − m)² is C/(n + 1); where m is constant it is C/(n − 1). Integer floor and
ceiling division give the data points either side exactly. Cost: O(n log n) (sorting, and a
binary search per k).

The noise families and the exact output grid are those of :mod:`dpkit.sensitivity._smooth`.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from dpkit.errors import InvalidParameterError
from dpkit.sensitivity._data import Bounds, prepare

__all__ = [
    "DEFAULT_GRID_BITS",
    "check_grid_bits",
    "grid_values",
    "variance_ak_scaled",
    "variance_smooth_sensitivity",
    "variance_value",
]

DEFAULT_GRID_BITS = 20
"""Values are rounded to 2^-20 of the bounds' width by default."""

_CHUNK = 1 << 14  # Σj² in int64 chunks: 2^14 terms of at most 2^48 each stay below 2^62


def check_grid_bits(grid_bits: Any, n: int) -> int:
    """g in [1, 24] with n·2^g <= 2^60 (public; before any data is read)."""
    if isinstance(grid_bits, bool) or not isinstance(grid_bits, int | np.integer):
        raise InvalidParameterError("grid_bits", grid_bits, "an integer in [1, 24]")
    g = int(grid_bits)
    if not 1 <= g <= 24:
        raise InvalidParameterError("grid_bits", grid_bits, "an integer in [1, 24]")
    if n << g > 1 << 60:
        raise InvalidParameterError(
            "grid_bits", grid_bits, f"at most {60 - n.bit_length()} for n={n} (n·2^g <= 2^60)"
        )
    return g


def grid_values(data: Any, bounds: Bounds, n: int, grid_bits: int) -> np.ndarray:
    """The sorted grid integers j ∈ [0, 2^g] of the clamped values (NaN → L): int64."""
    xp = prepare(data, bounds, n)
    m = 1 << grid_bits
    scaled = np.rint((xp[1:-1] - bounds.lower) * (m / bounds.width))
    return np.clip(scaled, 0, m).astype(np.int64)  # monotone: still sorted


def _sum_squares(j: np.ndarray) -> int:
    total = 0
    for start in range(0, j.size, _CHUNK):
        block = j[start : start + _CHUNK]
        total += int(np.sum(block * block))  # <= 2^14 · 2^48: exact in int64
    return total


def variance_value(j: np.ndarray, bounds: Bounds, grid_bits: int) -> Fraction:
    """f = h²·(n·Σj² − (Σj)²)/n², exactly (h = (U − L)/2^g)."""
    n = j.size
    s1 = int(np.sum(j))  # <= n·2^g <= 2^60
    s2 = _sum_squares(j)
    h = Fraction(bounds.upper) - Fraction(bounds.lower)
    h /= 1 << grid_bits
    return h * h * Fraction(n * s2 - s1 * s1, n * n)


def variance_ak_scaled(
    j: np.ndarray, m_top: int, *, broken_shrink_only: bool = False
) -> np.ndarray:
    """G_k = n²(n − 1)·A^(k)/h² for k = 0..n, in float64 with relative error < 2^-49.

    ``j``: the sorted grid integers, ``m_top`` = M. A^(k) = h²·G_k/(n²(n − 1)). Same two cases
    as :func:`dpkit.sensitivity._local._variance_ak_all` (docs/sensitivity.md §2), in grid units
    with every mean written as N/(n − 1), N an exact integer (module docstring).
    ``broken_shrink_only`` is a deliberately WRONG A^(k) for the tests: it keeps only the
    (a − m)² term (a value moved to the mean) and drops the moves to the far bound.
    """
    n = j.size
    out = np.zeros(n + 1)
    if n == 1:
        return out
    big_m = np.int64(m_top)
    n1 = np.int64(n - 1)
    prefix = np.concatenate([[0], np.cumsum(j)]).astype(np.int64)  # <= n·M <= 2^60
    total = prefix[n]
    gs = float(m_top) ** 2 * float(n - 1) ** 2

    def g_of(a: np.ndarray, num: np.ndarray) -> np.ndarray:
        e = n1 * a - num  # (n − 1)(a − m), exact
        d = np.maximum(n1 * big_m - num, num)  # (n − 1)·max(U − m, m − L), exact
        e2 = e.astype(np.float64) ** 2
        if broken_shrink_only:
            return e2
        far = (d - e).astype(np.float64) * (d + e).astype(np.float64)
        return np.maximum(far, e2)

    for start in range(0, n + 1, 1 << 14):
        k = np.arange(start, min(n + 1, start + (1 << 14)), dtype=np.int64)
        kk = np.minimum(k, n)
        # case 1: a substituted unit, free: D(m)² with m extreme
        num_lo = prefix[n - kk]
        num_hi = total - prefix[kk] + (kk - 1) * big_m
        one = np.maximum(n1 * big_m - num_lo, num_hi).astype(np.float64) ** 2
        best = np.zeros(k.size) if broken_shrink_only else np.where(k >= 1, one, 0.0)
        kp = np.minimum(k, n - 1)
        ones = np.ones_like(kp)
        full = np.full_like(kp, n)
        # (first j, last j, C, slope): m·(n − 1) = C − slope·a on the region (1-based j)
        regions = [
            (ones, n - kp, prefix[n - kp], 1),
            (n - kp + 1, full, prefix[np.maximum(n - kp - 1, 0)], 0),
            (kp + 1, full, total - prefix[kp] + kp * big_m, 1),
            (ones, kp, total - prefix[np.minimum(kp + 1, n)] + kp * big_m, 0),
        ]
        for j_lo, j_hi, c_num, slope in regions:
            # the concave parts' vertices, exact rationals N/D (module docstring)
            vertices = [(c_num + big_m, n + 1), (c_num, n + 1)] if slope else [(c_num, n - 1)]
            cands = [j_lo, j_hi]
            for num_v, den in vertices:
                below = num_v // den  # ⌊v⌋ (num_v >= 0)
                above = -((-num_v) // den)  # ⌈v⌉
                last_le = np.searchsorted(j, below, side="right")  # 1-based last j <= v
                first_ge = np.searchsorted(j, above, side="left") + 1  # 1-based first j >= v
                cands += [last_le, first_ge]
            idx = np.clip(np.stack(cands, axis=1), j_lo[:, None], j_hi[:, None])
            valid = (j_lo <= j_hi)[:, None]
            a = j[np.clip(idx, 1, n) - 1]
            num = c_num[:, None] - slope * a
            values = np.where(valid, g_of(a, num), 0.0)
            best = np.maximum(best, values.max(axis=1))
        out[start : start + k.size] = np.minimum(best, gs)
    return out


def variance_smooth_sensitivity(
    j: np.ndarray, bounds: Bounds, grid_bits: int, beta: float
) -> float:
    """S*_{Var,β} at the rounded data (not inflated; relative error < 2^-40), at least 2^-1000.

    Computed in log space: with narrow bounds and a fine grid the scale h²/(n²(n − 1)) is
    below float64's range (a review found S* = 0 there, and a release that was not private)."""
    n = j.size
    if n == 1:
        return 0.0
    scaled = variance_ak_scaled(j, 1 << grid_bits)
    positive = scaled > 0
    if not np.any(positive):  # pragma: no cover - A^(n) is the global sensitivity, > 0
        return 0.0
    # in log space: neither e^{-kβ} nor the scale h²/(n²(n − 1)) may underflow (with narrow
    # bounds and a fine grid the scale is below 2^-1074 and S* would come out 0)
    k = np.arange(n + 1, dtype=np.float64)[positive]
    log_best = float(np.max(np.log(scaled[positive]) - beta * k))
    h2 = (Fraction(bounds.upper) - Fraction(bounds.lower)) ** 2 / (1 << (2 * grid_bits))
    factor = h2 / (n * n * (n - 1))
    log_s = log_best + math.log(factor.numerator) - math.log(factor.denominator)
    if log_s < _LOG_FLOOR:
        # any constant is a β-smooth function, so max(S*, 2^-1000) is still a smooth upper
        # bound; it keeps S in float64's normal range, where the relative margins hold
        return _FLOOR
    # |log error| <= 2^-49 (G_k) + 710·2^-52 (logs, sums), so exp(log_s) is within 2^-40
    # relative of S*: covered by the caller's 1 + 2^-30 inflation
    return math.exp(log_s)


_FLOOR = math.ldexp(1.0, -1000)
_LOG_FLOOR = math.log(_FLOOR)
