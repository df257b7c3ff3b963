"""The inverse sensitivity mechanism (Asi & Duchi 2020) for quantiles, sampled exactly.

For a candidate output t, the *path length* len(x; t) is the least number of units whose values
must change for the statistic to equal t. For the order statistic of rank r (quantiles, median,
min, max) over sorted clamped data:

    len(x; t) = r − #{x_i <= t}          if #{x_i <= t} < r,
              = #{x_i < t} − (r − 1)      if #{x_i < t} >= r,
              = 0                         otherwise (t lies between x_(r) and itself, i.e. t = x_(r)
                                          or ties make t the r-th value).

(To make the r-th value t one must move r − #{<= t} values up to t, or #{< t} − r + 1 values
down to t; both are achievable and necessary.) A substitution changes each count by at most one,
so |len(x; t) − len(y; t)| <= 1, and releasing t from a public candidate set with probability
∝ exp(−ε·len(x; t)/2) is ε-DP (McSherry & Talwar 2007; Asi & Duchi 2020, Def. 1): each weight
moves by at most e^{ε/2}, and so does the normaliser.

Candidates are the multiples of h = 2^k in [L, U] (k public; default 2^-40 of the width), up to
2^42 of them. len is constant on runs of candidates between data values, so dpkit samples a *level*
ℓ with probability ∝ M_ℓ·e^{−εℓ/2} (M_ℓ = number of candidates with path length ℓ) and then a
uniform candidate of that level. The level draw is an exact inverse CDF: U's first 52 bits are
compared with the float cumulative weights under a certified relative margin of 2^-28 (the float
sums of at most 2^21 positive terms are within 2^-31), and an undecided U is refined bit by bit
against Decimal interval bounds of the exact cumulative weights until its level is certain, as
in docs/noise.md §2. The output therefore has exactly the mechanism's distribution.
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import Any

import numpy as np

import dpkit.noise._exact as _exact_mod
from dpkit._exact import Number, check_epsilon
from dpkit.core._framework import Measurement
from dpkit.core._losses import PureDP
from dpkit.core._spaces import AtomDomain, ChangeOneDistance, VectorDomain
from dpkit.errors import InvalidParameterError, UnsupportedQueryError
from dpkit.noise import random_words, uniform_integers
from dpkit.noise._exact import _CELL, _cell_floats, _cell_index
from dpkit.sensitivity._data import Bounds, check_n, make_statistic, prepare
from dpkit.sensitivity._info import SensitivityInfo

__all__ = ["inverse_sensitivity_levels", "make_inverse_sensitivity", "sample_levels"]

_MARGIN = 2.0**-28
_MAX_CANDIDATES = 2**42


def _sorted_unique(values: np.ndarray) -> np.ndarray:
    values = np.sort(values)
    keep = np.ones(values.size, dtype=bool)
    keep[1:] = values[1:] != values[:-1]
    return values[keep]


def inverse_sensitivity_levels(
    x: np.ndarray, rank: int, first: int, last: int, exponent: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Runs of candidate indices [starts, ends) (candidate i is i·2^exponent), their path
    lengths, and ``x`` sorted. O(n log n)."""
    h = math.ldexp(1.0, exponent)
    scaled = np.ldexp(x, -exponent)  # exact
    # candidate i has #{x <= c_i} increase at i >= ceil(x/h), #{x < c_i} at i >= floor(x/h) + 1
    cuts = np.concatenate([np.ceil(scaled), np.floor(scaled) + 1]).astype(np.int64)
    cuts = _sorted_unique(np.clip(cuts, first, last + 1))
    starts = _sorted_unique(np.concatenate([[first], cuts[cuts <= last]]))
    ends = np.append(starts[1:], last + 1)
    values = np.ldexp(starts.astype(np.float64), exponent)
    le = np.searchsorted(x, values, side="right")
    lt = np.searchsorted(x, values, side="left")
    length = np.where(le < rank, rank - le, np.where(lt >= rank, lt - rank + 1, 0))
    del h
    return starts, ends, length.astype(np.int64), x


def _level_bounds(
    counts: list[int], levels: list[int], rate: Fraction, digits: int
) -> tuple[list[Fraction], list[Fraction]]:
    """Interval bounds on the normalised cumulative weights P_j = F_j/F_last (exact path)."""
    with localcontext() as ctx:
        ctx.prec = digits
        base = (-(Decimal(rate.numerator) / Decimal(rate.denominator))).exp()
        weights = [Decimal(c) * base ** int(level) for c, level in zip(counts, levels, strict=True)]
    # each weight: Decimal exp (relative error <= 10^(1-digits)) raised to the level (error grows
    # linearly in the level) times an integer; generous bound on every weight's relative error
    rel = Fraction(8 * len(counts) + 1000 * (max(levels) + 1), 10 ** (digits - 3))
    cum: list[Fraction] = []
    total = Fraction(0)
    for w in weights:
        total += Fraction(w)
        cum.append(total)
    lo = [c * (1 - rel) / (total * (1 + rel)) for c in cum]
    hi = [c * (1 + rel) / (total * (1 - rel)) for c in cum]
    return lo, hi


def sample_levels(counts: np.ndarray, levels: np.ndarray, rate: Fraction, size: int) -> np.ndarray:
    """``size`` draws of j with P(j) ∝ counts_j·e^{−rate·(levels_j − min level)}, exactly."""
    shifted = levels - levels.min()
    with np.errstate(under="ignore"):
        weights = counts.astype(np.float64) * np.exp(-float(rate) * shifted)
    cum = np.cumsum(weights)
    p = cum / cum[-1]
    # a sequential float sum of k positive terms is within (k - 1)·2^-53 relative; exp within 4 ulp
    margin = _MARGIN + p.size * 2.0**-50
    low_u = _cell_floats(random_words(size))
    high_u = low_u + _CELL
    j = np.searchsorted(p, low_u, side="right")
    j = np.minimum(j, p.size - 1)
    upper_ok = high_u <= p[j] * (1 - margin)
    prev = np.where(j > 0, p[np.maximum(j - 1, 0)], 0.0)
    lower_ok = (j == 0) | (low_u >= prev * (1 + margin))
    out = j.astype(np.int64)
    undecided = ~(upper_ok & lower_ok)
    if _exact_mod._FORCE_EXACT:
        undecided[:] = True
    for i in np.flatnonzero(undecided):
        out[i] = _exact_level(_cell_index(float(low_u[i])), counts, shifted, rate)
    return out


def _exact_level(cell: int, counts: np.ndarray, shifted: np.ndarray, rate: Fraction) -> int:
    num, bits, digits = cell, 52, 40
    c_list, l_list = [int(c) for c in counts], [int(v) for v in shifted]
    while True:
        lo, hi = _level_bounds(c_list, l_list, rate, digits)
        u_lo, u_hi = Fraction(num, 1 << bits), Fraction(num + 1, 1 << bits)
        for j in range(len(lo)):
            below_prev = j == 0 or u_lo >= hi[j - 1]
            if below_prev and u_hi <= lo[j]:
                return j
        num = (num << 64) | int(random_words(1)[0])
        bits += 64
        digits += 25


def make_inverse_sensitivity(
    statistic: str,
    *,
    lower: Number,
    upper: Number,
    n: int,
    epsilon: Number,
    q: Number | None = None,
    grid_exponent: int | None = None,
) -> Measurement[float]:
    """The inverse sensitivity mechanism for a quantile (median, quantile, min, max): ε-DP.

    Guarantee: ε-DP for datasets of public size n differing in one unit's value, values clamped
    to [lower, upper] (NaN → lower); output a multiple of 2^grid_exponent in [lower, upper].
    Proof in the module docstring (Asi & Duchi 2020; the exponential mechanism with the
    1-sensitive path length). With probability >= 1 − β its output has path length at most
    (2/ε)·ln(#levels/β): its rank error is O(log(n)/ε), independent of the bounds' width
    except through the O(log) grid term.

    Example:
        >>> from dpkit.sensitivity._inverse import make_inverse_sensitivity
        >>> make_inverse_sensitivity("median", lower=0, upper=1, n=11, epsilon=1).loss
        PureDP(epsilon=Fraction(1, 1))
    """
    stat = make_statistic(statistic, q=q)
    if stat.name != "quantile":
        raise UnsupportedQueryError(
            f"inverse sensitivity is implemented for quantiles (median/quantile/min/max), not"
            f" {statistic!r}"
        )
    bounds = Bounds.of(lower, upper)
    size = check_n(n)
    eps = check_epsilon(epsilon)
    exponent = math.frexp(bounds.width)[1] - 40 if grid_exponent is None else grid_exponent
    if isinstance(exponent, bool) or not isinstance(exponent, int):
        raise InvalidParameterError("grid_exponent", grid_exponent, "an integer or None")
    first = math.ceil(Fraction(bounds.lower) / Fraction(2) ** exponent)
    last = math.floor(Fraction(bounds.upper) / Fraction(2) ** exponent)
    if last < first or last - first + 1 > _MAX_CANDIDATES or max(abs(first), abs(last)) >= 2**52:
        raise InvalidParameterError(
            "grid_exponent", grid_exponent, "giving between 1 and 2^42 candidates in the bounds"
        )
    rate = eps / 2

    def release_many(data: Any, k: int) -> np.ndarray:
        xp = prepare(data, bounds, size)
        x = xp[1:-1]
        starts, ends, lengths, _ = inverse_sensitivity_levels(
            x, stat.rank(size), first, last, exponent
        )
        run_counts = ends - starts
        levels = _sorted_unique(lengths)
        inverse = np.searchsorted(levels, lengths)
        level_counts = np.bincount(inverse, weights=run_counts).astype(np.int64)
        chosen = sample_levels(level_counts, levels, rate, k)
        order = np.argsort(inverse, kind="stable")  # runs grouped by level
        grouped = np.cumsum(run_counts[order])  # candidates before the end of each run
        level_base = np.concatenate([[0], np.cumsum(level_counts)])
        picks = np.empty(k, dtype=np.int64)
        for level in np.unique(chosen):
            where = np.flatnonzero(chosen == level)
            picks[where] = uniform_integers(int(level_counts[level]), where.size)
        position = level_base[chosen] + picks  # a uniform candidate of the chosen level
        slot = np.searchsorted(grouped, position, side="right")
        run = order[slot]
        offset = position - (grouped[slot] - run_counts[run])
        return np.ldexp((starts[run] + offset).astype(np.float64), exponent)

    return Measurement(
        input_domain=VectorDomain(AtomDomain("float"), size=size),
        input_metric=ChangeOneDistance(),
        output_measure="pure",
        function=lambda data: float(release_many(data, 1)[0]),
        privacy_map=lambda d_in: PureDP(eps * math.ceil(d_in)),
        name=f"inverse_sensitivity({stat.name})",
        d_in=Fraction(1),
        info=SensitivityInfo(grid_exponent=exponent, release_many=release_many),
    )
