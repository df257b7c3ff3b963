"""Local sensitivity LS_f(x), distance-k sensitivity A^(k)(x) and β-smooth sensitivity S*.

Neighbours differ in one privacy unit's value (substitution, ``ChangeOneDistance``); the number
of units n is public; values are clamped into the declared bounds [L, U] (NaN → L). With the
sorted clamped values padded as x_(0) = L and x_(i) = U for i > n (and L for i < 0):

=================  =============================================  ==========================
statistic          A^(k)(x) (k substitutions away)                 S* (β-smooth) cost
=================  =============================================  ==========================
count (0/1 rows)   1                                               O(n)
sum / mean         trimmed mean with t = 0 (below), ×n for sum     O(n log n)
quantile rank r    max_{0≤s≤k+1} x_(r+s) − x_(r+s−k−1)   [NRS07]   O(n log n) (exact)
max / min          quantile with r = n / r = 1                     O(n log n) (exact)
trimmed mean (t)   max_{−1≤s≤k} (x_(h+s) − x_(l+s−k))/(n−2t)        O(n log n) (exact)
range              max(U−x_(n−k), x_(n)−x_(n−1−k),
                       x_(1+k)−L, x_(2+k)−x_(1))                   O(n)  (exact)
variance (1/n)     two-case formula (:func:`_variance_ak`), O(n)   O(n log n) (exact)
distinct values    1 (n ≥ 2)                                       O(1)
=================  =============================================  ==========================

(h = n−t+1, l = t+1.) Every A^(k) and S* above is exact (docs/sensitivity.md §2 has the proofs;
the unit tests compare each with brute force over whole k-balls). The order-statistic bounds
all come from one lemma (docs/sensitivity.md §2): if y is k substitutions from x and i < j then
y_(j) − y_(i) <= max_{0≤s≤k} x_(j+s) − x_(i−k+s), and the bound is attained (move k − s of
x_(i−k+s+1..j+s−1) to L and s to U). The range's LS is a maximum of two end distances and two
end gaps, the trimmed mean's of two gaps y_(h) − y_(l), y_(h−1) − y_(l−1) (it is monotone in
each value), so the tight lemma makes their A^(k) exact.

The O(n log n) algorithm for the order-statistic family (NRS07 §3.1) writes
S* = max over a rectangle of index pairs (a, b) of (x_(b) − x_(a))·e^{−β(b−a−c)}; for a fixed a the
best b is non-decreasing in a, so divide and conquer over a finds every row's best b with O(n) work
per level. dpkit runs each level as one vectorised numpy pass.

These functions compute in float64. :func:`smooth_sensitivity` returns a value inflated by
the relative factor ``1 + 2^-30`` (covering the float error of the logs, exps and comparisons,
which is below 2^-40); the mechanisms charge the matching increase of β (ln(1 + 2^-30) < 2^-29).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dpkit._exact import Number
from dpkit.errors import InvalidParameterError
from dpkit.sensitivity._data import Bounds, Statistic, check_beta, make_statistic, prepare

__all__ = [
    "SMOOTH_SLACK",
    "distance_k_sensitivity",
    "local_sensitivity",
    "smooth_sensitivity",
    "smooth_sensitivity_sorted",
]

SMOOTH_SLACK = 2.0**-30
"""Relative inflation applied to every computed smooth sensitivity (covers float error)."""


def _at(xp: np.ndarray, index: np.ndarray | int) -> np.ndarray:
    n = xp.size - 2
    return np.asarray(xp[np.clip(index, 0, n + 1)])


def _gap_bound(xp: np.ndarray, i: int, j: int, k: int) -> float:
    """max_{0≤s≤k} x_(j+s) − x_(i−k+s): the largest y_(j) − y_(i) over y k changes away."""
    s = np.arange(k + 1)
    return float(np.max(_at(xp, j + s) - _at(xp, i - k + s)))


def _a_k_sorted(xp: np.ndarray, stat: Statistic, k: int, bounds: Bounds) -> float:
    n = xp.size - 2
    lo, hi = bounds.lower, bounds.upper
    name = stat.name
    if name == "count":
        return 1.0
    if name == "distinct":
        return 1.0 if n >= 2 else 0.0
    if name == "quantile":
        r = stat.rank(n)
        s = np.arange(k + 2)
        return float(np.max(_at(xp, r + s) - _at(xp, r + s - k - 1)))
    if name in ("sum", "mean", "trimmed_mean"):
        t = stat.trimmed(n)
        d = n - 2 * t
        h, low = n - t + 1, t + 1
        s = np.arange(-1, k + 1)
        value = float(np.max(_at(xp, h + s) - _at(xp, low + s - k)))
        return value if name == "sum" else value / d
    if name == "range":
        if n == 1:
            return 0.0
        return float(
            max(
                hi - _at(xp, n - k),
                xp[n] - _at(xp, n - 1 - k),
                _at(xp, 1 + k) - lo,
                _at(xp, 2 + k) - xp[1],
            )
        )
    if name == "variance":
        return _variance_ak(xp, bounds, k)
    raise InvalidParameterError("statistic", name, "a supported statistic")  # pragma: no cover


def _variance_ak(xp: np.ndarray, bounds: Bounds, k: int) -> float:
    """Exact A^(k) of the population variance Var = (1/n)·Σ(y_i − ȳ)², O(n) after sorting.

    Substituting y_i = a by b changes Var by ((n−1)/n²)·((b − m)² − (a − m)²), with m the mean of
    the other n − 1 values. Over b ∈ [L, U] the largest |change| is
    g(a, m) = max(D(m)² − (a − m)², (a − m)²), D(m) = max(U − m, m − L), so
    LS(y) = ((n−1)/n²)·max_i g(y_i, m_i) and A^(k) = ((n−1)/n²)·max over y in the k-ball and i.
    Two cases for the maximising (y, i):

    * i is one of the substituted units (k ≥ 1): y_i is free, so g = D(m)², largest when m is
      extreme: drop the top (bottom) k values of x and put k − 1 values at L (U) among the others.
    * i is an unchanged unit, y_i = x_j: the others hold k' = min(k, n−1) substitutions, so m
      ranges over the interval [m_min(j), m_max(j)] (the k' largest / smallest others moved to
      L / U). For fixed a = x_j, (U−m)² − (a−m)² and (m−L)² − (a−m)² are monotone in m and
      (a−m)² is convex, so the maximum of g is at m = m_min(j) or m_max(j).

    Both cases are vectorised over j with prefix sums of the sorted data.
    """
    x = xp[1:-1]
    n = x.size
    if n == 1:
        return 0.0
    # centre for numerical stability (variance is shift-invariant)
    centre = float(np.mean(x))
    y = x - centre
    lo, hi = bounds.lower - centre, bounds.upper - centre
    prefix = np.concatenate([[0.0], np.cumsum(y)])
    total = float(prefix[n])

    def g(a: np.ndarray, m: np.ndarray) -> np.ndarray:
        d = np.maximum(hi - m, m - lo)
        e2 = (a - m) ** 2
        return np.maximum(d * d - e2, e2)

    best = 0.0
    if k >= 1:
        kk = min(k, n)
        m_lo = (prefix[n - kk] + (kk - 1) * lo) / (n - 1)
        m_hi = (total - prefix[kk] + (kk - 1) * hi) / (n - 1)
        best = max(hi - m_lo, m_hi - lo) ** 2
    kp = min(k, n - 1)
    j = np.arange(1, n + 1)
    top = np.where(j > n - kp, total - prefix[n - kp - 1] - y, total - prefix[n - kp])
    bottom = np.where(j <= kp, prefix[min(kp + 1, n)] - y, prefix[kp])
    rest = total - y
    m_min = (rest - top + kp * lo) / (n - 1)
    m_max = (rest - bottom + kp * hi) / (n - 1)
    best = max(best, float(np.max(g(y, m_min))), float(np.max(g(y, m_max))))
    gs = bounds.width**2 * (n - 1) / n**2
    return min(best * (n - 1) / n**2, gs)


def _variance_ak_all(xp: np.ndarray, bounds: Bounds, *, vertex_search: bool = True) -> np.ndarray:
    """[A^(0), ..., A^(n)] of the variance at once, O(n log n), equal to :func:`_variance_ak`.

    In the "unchanged unit x_j" case of :func:`_variance_ak` the mean m of the others is, on each
    of four index regions, either constant or m = c − a/(n−1) in a = x_j. There e = a − m is
    affine in a, so (a−m)² is convex (maximum at the region's ends) and (U−m)² − (a−m)², (m−L)² −
    (a−m)² are concave quadratics (maximum at the data points either side of their vertex). So
    per k only about 24 candidate j are needed (binary search for the vertices): O(log n) per k.
    ``vertex_search=False`` is the deliberately broken variant the tests flag.
    """
    x = xp[1:-1]
    n = x.size
    out = np.zeros(n + 1)
    if n == 1:
        return out
    centre = float(np.mean(x))
    y = x - centre
    lo, hi = bounds.lower - centre, bounds.upper - centre
    prefix = np.concatenate([[0.0], np.cumsum(y)])
    total = float(prefix[n])
    p, q = 1.0 / (n - 1), n / (n - 1)
    denom = q * q - p * p
    gs = bounds.width**2 * (n - 1) / n**2
    for start in range(0, n + 1, 1 << 15):
        k = np.arange(start, min(n + 1, start + (1 << 15)))
        kk = np.minimum(k, n)
        m_lo = (prefix[n - kk] + (kk - 1) * lo) / (n - 1)
        m_hi = (total - prefix[kk] + (kk - 1) * hi) / (n - 1)
        best = np.where(k >= 1, np.maximum(hi - m_lo, m_hi - lo) ** 2, 0.0)
        kp = np.minimum(k, n - 1)
        # (first j, last j, c, slope): m = c − slope·x_j on the region
        regions = [
            (np.ones_like(kp), n - kp, (prefix[n - kp] + kp * lo) / (n - 1), p),
            (
                n - kp + 1,
                np.full_like(kp, n),
                (prefix[np.maximum(n - kp - 1, 0)] + kp * lo) / (n - 1),
                0.0,
            ),
            (kp + 1, np.full_like(kp, n), (total - prefix[kp] + kp * hi) / (n - 1), p),
            (
                np.ones_like(kp),
                kp,
                (total - prefix[np.minimum(kp + 1, n)] + kp * hi) / (n - 1),
                0.0,
            ),
        ]
        for j_lo, j_hi, c, slope in regions:
            if slope:
                vertices = [(p * (hi - c) + q * c) / denom, (q * c - p * (c - lo)) / denom]
            else:
                vertices = [c]
            cands = [j_lo, j_hi]
            for v in vertices if vertex_search else []:
                below = np.searchsorted(y, v)  # 1-based index of the last y < v
                cands += [below, below + 1]
            j = np.clip(np.stack(cands, axis=1), j_lo[:, None], j_hi[:, None])
            valid = (j_lo <= j_hi)[:, None]
            a = y[np.clip(j, 1, n) - 1]
            m = c[:, None] - slope * a
            d = np.maximum(hi - m, m - lo)
            e2 = (a - m) ** 2
            g = np.where(valid, np.maximum(d * d - e2, e2), 0.0)
            best = np.maximum(best, g.max(axis=1))
        out[start : start + k.size] = np.minimum(best * (n - 1) / n**2, gs)
    return out


def _resolve(statistic: str | Statistic, q: Number | None, trim: Number | None) -> Statistic:
    if isinstance(statistic, Statistic):
        return statistic
    return make_statistic(statistic, q=q, trim=trim)


def local_sensitivity(
    data: Any,
    statistic: str | Statistic,
    *,
    lower: Number,
    upper: Number,
    q: Number | None = None,
    trim: Number | None = None,
) -> float:
    """LS_f(x) = max over neighbours y (one unit's value substituted) of |f(x) − f(y)|.

    A teaching and analysis tool: **noise calibrated to LS_f(x) is not private**, because LS
    itself changes between neighbours and so reveals the data (see docs/sensitivity.md §1).

    Example:
        >>> from dpkit.sensitivity import local_sensitivity
        >>> local_sensitivity([1, 2, 3, 4, 100], "median", lower=0, upper=1000)
        1.0
    """
    return distance_k_sensitivity(data, statistic, 0, lower=lower, upper=upper, q=q, trim=trim)


def distance_k_sensitivity(
    data: Any,
    statistic: str | Statistic,
    k: int,
    *,
    lower: Number,
    upper: Number,
    q: Number | None = None,
    trim: Number | None = None,
) -> float:
    """A^(k)(x) = max of LS_f(y) over y at most k substitutions from x (table in module doc)."""
    stat = _resolve(statistic, q, trim)
    bounds = Bounds.of(lower, upper)
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 0:
        raise InvalidParameterError("k", k, "an integer >= 0")
    xp = prepare(data, bounds)
    return _a_k_sorted(xp, stat, int(k), bounds)


# ----------------------------------------------------------------------------- smooth
def monotone_level(
    rows_lo: np.ndarray, rows_hi: np.ndarray, cols_lo: np.ndarray, cols_hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One level of divide and conquer over a monotone argmax: each open row interval's middle
    row ``mid``, paired with every column of its column interval, flattened. Returns (mid,
    starts of each row's segment, segment of each pair, column of each pair)."""
    mid = (rows_lo + rows_hi) // 2
    lengths = cols_hi - cols_lo + 1
    starts = np.zeros(lengths.size, dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    seg = np.repeat(np.arange(lengths.size), lengths)
    col = np.arange(int(lengths.sum()), dtype=np.int64) - starts[seg] + cols_lo[seg]
    return mid, starts, seg, col


def monotone_split(
    rows_lo: np.ndarray,
    rows_hi: np.ndarray,
    cols_lo: np.ndarray,
    cols_hi: np.ndarray,
    mid: np.ndarray,
    best: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The next level: rows below each ``mid`` search columns up to its ``best`` column, rows
    above it from ``best`` on (the best column is non-decreasing in the row)."""
    left = mid - 1 >= rows_lo
    right = mid + 1 <= rows_hi
    return (
        np.concatenate([rows_lo[left], mid[right] + 1]),
        np.concatenate([mid[left] - 1, rows_hi[right]]),
        np.concatenate([cols_lo[left], best[right]]),
        np.concatenate([best[left], cols_hi[right]]),
    )


def _rect_max(
    xp: np.ndarray, a_lo: int, a_hi: int, b_lo: int, b_hi: int, beta: float, offset: int
) -> float:
    """log of max over a ∈ [a_lo, a_hi], b ∈ [b_lo, b_hi] of (x_b − x_a)·e^{−β(b − a − offset)}.

    Requires b_lo >= a_hi (so x_b >= x_a on the rectangle). For a < a', if b* is a best b for a
    then some best b for a' is >= b*, and some best b for rows below a is <= b* (the ratio
    (x_b − c)/(x_b' − c) is monotone in c; NRS07 §3.1), so divide and conquer over a is exact.
    Each level is one vectorised pass over at most n + (#rows) pairs.
    """
    if a_lo > a_hi or b_lo > b_hi:
        return -math.inf
    best = -math.inf
    rows_lo, rows_hi = np.array([a_lo]), np.array([a_hi])
    cols_lo, cols_hi = np.array([b_lo]), np.array([b_hi])
    while rows_lo.size:
        mid, starts, seg, b = monotone_level(rows_lo, rows_hi, cols_lo, cols_hi)
        total = b.size
        with np.errstate(divide="ignore", invalid="ignore"):
            values = np.log(xp[b] - xp[mid[seg]]) - beta * b
        values[np.isnan(values)] = -np.inf
        seg_max = np.maximum.reduceat(values, starts)
        hit = np.where(values == seg_max[seg], np.arange(total), total)
        first = np.minimum.reduceat(hit, starts)
        b_star = b[first]
        finite = np.isfinite(seg_max)
        if finite.any():
            level = float(np.max(seg_max[finite] + beta * (mid[finite] + offset)))
            best = max(best, level)
        rows_lo, rows_hi, cols_lo, cols_hi = monotone_split(
            rows_lo, rows_hi, cols_lo, cols_hi, mid, b_star
        )
    return best


def smooth_sensitivity_sorted(
    xp: np.ndarray, stat: Statistic, beta: float, bounds: Bounds
) -> float:
    """S* (or the stated smooth upper bound) from padded sorted clamped data, *not* inflated."""
    n = xp.size - 2
    name = stat.name
    if name in ("count", "distinct"):
        return _a_k_sorted(xp, stat, 0, bounds)
    if name == "variance":
        # exact S* = max_k e^{−kβ}A^(k) over k = 0..n (A^(k) = GS for k >= n): O(n log n)
        a_k = _variance_ak_all(xp, bounds)
        return float(np.max(a_k * np.exp(-beta * np.arange(n + 1))))
    if name == "quantile":
        r = stat.rank(n)
        return math.exp(_rect_max(xp, 0, r, r, n + 1, beta, 1))
    if name in ("sum", "mean", "trimmed_mean"):
        t = stat.trimmed(n)
        d = n - 2 * t
        h, low = n - t + 1, t + 1
        # pairs (a ≤ l−1, b ≥ h−1) and (a = l, b ≥ h), with k = b − a − d
        first = _rect_max(xp, 0, low - 1, h - 1, n + 1, beta, d)
        second = _rect_max(xp, low, low, h, n + 1, beta, d)
        value = math.exp(max(first, second))
        return value if name == "sum" else value / d
    if name == "range":
        if n == 1:
            return 0.0
        k = np.arange(n + 1)
        a_k = np.maximum.reduce(
            [
                bounds.upper - _at(xp, n - k),
                xp[n] - _at(xp, n - 1 - k),
                _at(xp, 1 + k) - bounds.lower,
                _at(xp, 2 + k) - xp[1],
            ]
        )
        return float(np.max(a_k * np.exp(-beta * k)))
    raise InvalidParameterError("statistic", name, "a supported statistic")  # pragma: no cover


def smooth_sensitivity(
    data: Any,
    statistic: str | Statistic,
    beta: Number,
    *,
    lower: Number,
    upper: Number,
    q: Number | None = None,
    trim: Number | None = None,
) -> float:
    """β-smooth sensitivity S*_{f,β}(x) = max_k e^{−kβ}·A^(k)(x) (or the smooth upper bound of
    the module table), inflated by ``1 + 2^-30`` to cover float error. O(n log n) at most.

    Example:
        >>> from dpkit.sensitivity import smooth_sensitivity
        >>> s = smooth_sensitivity([1, 2, 3, 4, 5], "median", 1.0, lower=0, upper=10)
        >>> round(s, 6)
        1.0
    """
    stat = _resolve(statistic, q, trim)
    bounds = Bounds.of(lower, upper)
    b = check_beta(beta)
    xp = prepare(data, bounds)
    return smooth_sensitivity_sorted(xp, stat, b, bounds) * (1.0 + SMOOTH_SLACK)
