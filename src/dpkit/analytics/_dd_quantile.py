"""Data-dependent quantiles (smooth sensitivity, PTR, inverse sensitivity) on binned counts.

The Session's neighbouring tables differ by **all the rows of one privacy unit** (add/remove),
so the number of rows n of a group is private, and after contribution bounding one unit has at
most ``k`` rows in a group. The engine returns, per group, the counts of the values rounded to a
fine public grid (indices ``lo..hi``; a value v becomes ``round_half_up(clamp(v)/2^e)``).

**The released statistic.** With the grid indices sorted, ``x_(1) <= ... <= x_(n)``, padded with
``x_(i) = lo`` for i <= 0 and ``x_(i) = hi`` for i >= n + 1, and the rank
``r(n) = clamp(⌈q·n⌉, 1, n)`` (``r(0) = 0``), the statistic is ``f(x) = x_(r(n))``: the q-quantile
of the grid-rounded values (``lo`` for an empty group). Everything below is exact in these
integers (docs/sensitivity.md §10 has the proofs).

**Lemma 1 (one row).** If y is x with one row added or removed, then
``y_(r_y + i) ∈ [x_(r + i − 1), x_(r + i + 1)]`` for every i (r(n ± 1) − r(n) ∈ {0, ±1} and the
order statistics interlace). By induction, j rows away: ``[x_(r+i−j), x_(r+i+j)]``.

**Row-level bounds.** ``F^(D)(x) = max{x_(b) − x_(a) : a <= r <= b, b − a <= D + 1}`` (the
Nissim–Raskhodnikova–Smith median formula) bounds the local sensitivity of every dataset D rows
away, and Lemma 1 gives ``F^(D)(y) <= F^(D+1)(x)`` for one-row neighbours.

**Unit level (k rows).** A unit moves f by at most ``F^(k−1)(x)`` (Lemma 1 with j = k), and

* ``S(x) = e^β · max_{a <= r <= b} (x_(b) − x_(a))·e^{−(β/k)(b − a)}`` is a β-smooth upper bound
  on the unit-level local sensitivity (row-level (β/k)-smoothness over k rows);
* ``G^(j)(x) = F^(k(j+1)−1)(x)`` satisfies ``G^(0) >= LS_unit`` and ``G^(j)(y) <= G^(j+1)(x)``
  for unit neighbours: the distance to instability of PTR is computed from it;
* the inverse-sensitivity path length ``len(x; t)`` (fewest rows to add or remove so that the
  statistic becomes t) is 1-Lipschitz per row, so it moves by at most k per unit.

Costs: O(D log D) for S (divide and conquer over the D distinct values, NRS07 §3.1), O(D) per
F^(D) and O(D log C) for PTR's binary search, O(D) for the path lengths.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

__all__ = [
    "GroupCounts",
    "distance_to_instability",
    "f_window",
    "inverse_release",
    "path_length",
    "ptr_release",
    "rank_of",
    "run_lengths",
    "smooth_bound",
    "smooth_release",
    "smooth_release_many",
]


def rank_of(n: int, q: Fraction) -> int:
    """r(n) = clamp(⌈q·n⌉, 1, n), and 0 for n = 0."""
    if n == 0:
        return 0
    return min(n, max(1, math.ceil(q * n)))


class GroupCounts:
    """One group's grid counts: sorted distinct indices ``values`` with positive ``counts``."""

    def __init__(self, values: np.ndarray, counts: np.ndarray, lo: int, hi: int) -> None:
        order = np.argsort(values, kind="stable")
        self.values = np.asarray(values, dtype=np.int64)[order]
        self.counts = np.asarray(counts, dtype=np.int64)[order]
        keep = self.counts > 0
        self.values, self.counts = self.values[keep], self.counts[keep]
        self.cum = np.cumsum(self.counts)
        self.n = int(self.cum[-1]) if self.cum.size else 0
        self.lo, self.hi = int(lo), int(hi)

    def order_stat(self, ranks: np.ndarray) -> np.ndarray:
        """x_(i) for an array of ranks (padded: lo below 1, hi above n)."""
        ranks = np.asarray(ranks, dtype=np.int64)
        j = np.searchsorted(self.cum, np.clip(ranks, 1, max(self.n, 1)), side="left")
        j = np.minimum(j, max(self.values.size - 1, 0))
        inner = self.values[j] if self.values.size else np.full(ranks.shape, self.lo)
        return np.where(ranks <= 0, self.lo, np.where(ranks > self.n, self.hi, inner))

    def statistic(self, q: Fraction) -> int:
        """f(x) = x_(r(n)) (lo for an empty group)."""
        return int(self.order_stat(np.array([rank_of(self.n, q)]))[0])

    def a_side(self, r: int) -> tuple[np.ndarray, np.ndarray]:
        """(ranks, values) of the useful lower ends a <= r: rank 0 (lo) and, per distinct value
        whose first rank is <= r, its largest rank <= r."""
        first = self.cum - self.counts + 1
        use = first <= r
        ranks = np.concatenate([[0], np.minimum(self.cum[use], r)])
        values = np.concatenate([[self.lo], self.values[use]])
        return ranks, values

    def b_side(self, r: int) -> tuple[np.ndarray, np.ndarray]:
        """(ranks, values) of the useful upper ends b >= r: per distinct value whose last rank is
        >= r, its smallest rank >= r, and rank n + 1 (hi)."""
        first = self.cum - self.counts + 1
        use = self.cum >= r
        ranks = np.concatenate([np.maximum(first[use], r), [self.n + 1]])
        values = np.concatenate([self.values[use], [self.hi]])
        return ranks, values


# ----------------------------------------------------------------------------- F and PTR
def f_window(group: GroupCounts, q: Fraction, d: int) -> int:
    """F^(D)(x) = max{x_(b) − x_(a) : a <= r <= b, b − a <= D + 1} (exact, O(D_values))."""
    r = rank_of(group.n, q)
    ranks, values = group.a_side(r)
    usable = ranks >= r - d - 1
    if not usable.any():  # pragma: no cover - rank 0 or r itself is always usable
        return 0
    tops = group.order_stat(np.minimum(ranks[usable] + d + 1, group.n + 1))
    return int(np.max(tops - values[usable]))


def distance_to_instability(
    group: GroupCounts, q: Fraction, k: int, bound_steps: Fraction, cap: int
) -> int:
    """min(d(x), cap) with d(x) = min{j >= 0 : G^(j)(x) > bound}, G^(j) = F^(k(j+1)−1).

    Binary search: G^(j) is non-decreasing in j.
    """

    def g(j: int) -> int:
        return f_window(group, q, k * (j + 1) - 1)

    if g(0) > bound_steps:
        return 0
    if g(cap) <= bound_steps:
        return cap
    low, high = 0, cap  # G^(low) <= bound < G^(high)
    while high - low > 1:
        mid = (low + high) // 2
        if g(mid) > bound_steps:
            high = mid
        else:
            low = mid
    return high


# ----------------------------------------------------------------------------- smooth
_TRUNCATE = 50.0  # terms below width·e^{-50} are replaced by that floor (see smooth_bound)

SMOOTH_BETA_CAP = 20.0
"""The smooth bound is computed with β' = min(β, 20). A β'-smooth upper bound on the local
sensitivity is also β-smooth for every β >= β' (S(x) <= e^{β'}·S(y) <= e^β·S(y)), so the plan's
calibration for β still holds; without the cap, a large ε (β of hundreds) made the floor term
e^β·width·e^{-50} dominate — noise far beyond the bounds, every release clamped to the edge of
the output range — or overflowed e^β after the charge."""


def smooth_bound(group: GroupCounts, q: Fraction, beta: float, k: int) -> float:
    """log of T(x) = max(max_{a<=r<=b} (x_(b) − x_(a))·e^{−(β/k)(b − a)}, (hi − lo)·e^{−50}).

    The unit-level β-smooth bound is S = e^β·T (module docstring); the floor keeps S β-smooth
    (a maximum of β-smooth functions) and means every term that decides the maximum has an
    exponent of at most ~50, so its float error is below 2^-44 relative. Divide and conquer over
    the lower ends a: the best upper end b is non-decreasing in a (log(x_b − c) − β'b has
    increasing differences in (b, c)), so each level is one vectorised pass.
    """
    from dpkit.sensitivity._local import monotone_level, monotone_split

    r = rank_of(group.n, q)
    a_rank, a_val = group.a_side(r)
    b_rank, b_val = group.b_side(r)
    rate = beta / k
    width = group.hi - group.lo
    floor_log = math.log(width) - _TRUNCATE if width > 0 else -math.inf
    best = floor_log
    rows_lo, rows_hi = np.array([0]), np.array([a_rank.size - 1])
    cols_lo, cols_hi = np.array([0]), np.array([b_rank.size - 1])
    a_val_f, b_val_f = a_val.astype(np.float64), b_val.astype(np.float64)
    while rows_lo.size:
        mid, starts, seg, col = monotone_level(rows_lo, rows_hi, cols_lo, cols_hi)
        total = col.size
        diff = b_val[col] - a_val[mid[seg]]  # exact integers
        gap = (b_rank[col] - a_rank[mid[seg]]).astype(np.float64)  # exact integers
        score = np.full(total, -np.inf)
        positive = diff > 0
        score[positive] = np.log(diff[positive].astype(np.float64)) - rate * gap[positive]
        seg_max = np.maximum.reduceat(score, starts)
        hit = np.where(score == seg_max[seg], np.arange(total), total)
        first = np.minimum.reduceat(hit, starts)
        finite = np.isfinite(seg_max)
        # a row with no positive difference: larger rows have none either, smaller rows may
        # use the whole range
        best_col = np.where(finite, col[np.minimum(first, total - 1)], cols_hi)
        if finite.any():
            # exact integer gaps b − a, times the rate: the candidate logs of the maximum
            gaps = (b_rank[best_col[finite]] - a_rank[mid[finite]]).astype(np.float64)
            diffs = (b_val_f[best_col[finite]] - a_val_f[mid[finite]]).astype(np.float64)
            best = max(best, float(np.max(np.log(diffs) - rate * gaps)))
        rows_lo, rows_hi, cols_lo, cols_hi = monotone_split(
            rows_lo, rows_hi, cols_lo, cols_hi, mid, best_col
        )
    return best


# ----------------------------------------------------------------------------- inverse
def path_length(a: np.ndarray, e: np.ndarray, b: np.ndarray, q: Fraction) -> np.ndarray:
    """len(x; t): the fewest rows to add or remove so that the statistic equals t, from the
    counts a = #{x < t}, e = #{x = t}, b = #{x > t} (object arrays of Python ints; exact).

    The empty-dataset convention (f = lo) is applied by :func:`run_lengths`. For q > 0 and
    n' >= 1, f = t iff a' < q·n' and q·n' <= a' + e' (n' = a' + e' + b'). If t is above the
    statistic (q(e + b) <= (1 − q)a, G = (1 − q)a − q(e + b) >= 0) the cheapest fix deletes rows
    below t (each lowers G by 1 − q) or adds rows at t (each by q), with at least one row at t;
    if t is below (H = qb − (1 − q)(a + e) > 0), it deletes rows above t (q each) or adds rows at
    t (1 − q each). docs/sensitivity.md §10 derives the closed forms; a test checks them
    against breadth-first search over all small (a, e, b).
    """
    p, s = q.numerator, q.denominator
    a = np.asarray(a, dtype=object)
    e = np.asarray(e, dtype=object)
    b = np.asarray(b, dtype=object)
    if p == 0:  # the minimum: every row below t removed, one row at t
        return a + (e == 0).astype(object)
    n = a + e + b
    g_s = (s - p) * a - p * (e + b)  # s·G
    h_s = p * b - (s - p) * (a + e)  # s·H
    zero = np.zeros(a.shape, dtype=object)
    one = zero + 1
    in_set = (g_s < 0) & (h_s <= 0) & (n > 0)
    half = 2 * p >= s  # q >= 1/2
    if half:
        above = g_s // p + 1
    else:
        with_e = g_s // (s - p) + 1
        without = 1 + np.maximum(zero, (g_s - p) // (s - p) + 1)
        above = np.where(e >= 1, with_e, without)
    if 2 * p <= s:  # q <= 1/2
        below = -((-h_s) // (s - p))
    else:
        with_e = -((-h_s) // p)
        without = 1 + np.maximum(zero, -((-(h_s - (s - p))) // p))
        below = np.where(e >= 1, with_e, without)
    out = np.where(g_s >= 0, above, np.where(h_s > 0, below, one))
    return np.where(in_set, zero, out)


def run_lengths(group: GroupCounts, q: Fraction) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Runs of candidates with one path length: (first index, number of candidates, length).

    Candidates are the grid indices lo..hi. Between data values the counts (a, e, b) are
    constant; the candidate ``lo`` is its own run because the empty table also has f = lo
    (its length is min(len, n)).
    """
    lo, hi, v, c, cum = group.lo, group.hi, group.values, group.counts, group.cum
    n = group.n
    below_cum = np.concatenate([[0], cum])  # rows strictly below value j: below_cum[j]
    starts: list[np.ndarray] = []
    sizes: list[np.ndarray] = []
    a_l: list[np.ndarray] = []
    e_l: list[np.ndarray] = []
    # the data values themselves
    starts.append(v)
    sizes.append(np.ones(v.size, dtype=np.int64))
    a_l.append(below_cum[:-1])
    e_l.append(c)
    # the gaps: before v_0 (from lo), between values, after the last (to hi)
    edges_lo = np.concatenate([[lo - 1], v])  # exclusive lower ends
    edges_hi = np.concatenate([v, [hi + 1]])  # exclusive upper ends
    gap = edges_hi - edges_lo - 1
    starts.append(edges_lo + 1)
    sizes.append(gap)
    a_l.append(below_cum)
    e_l.append(np.zeros(gap.size, dtype=np.int64))
    first = np.concatenate(starts)
    count = np.concatenate(sizes)
    a = np.concatenate(a_l)
    e = np.concatenate(e_l)
    keep = count > 0
    first, count, a, e = first[keep], count[keep], a[keep], e[keep]
    # split the candidate lo out of its run
    at_lo = first == lo
    if at_lo.any() and int(count[at_lo][0]) > 1:
        i = int(np.flatnonzero(at_lo)[0])
        first = np.concatenate([first[: i + 1], [lo + 1], first[i + 1 :]])
        count = np.concatenate([count[:i], [1, int(count[i]) - 1], count[i + 1 :]])
        a = np.concatenate([a[: i + 1], [a[i]], a[i + 1 :]])
        e = np.concatenate([e[: i + 1], [e[i]], e[i + 1 :]])
    a_obj = np.array([int(x) for x in a], dtype=object)
    e_obj = np.array([int(x) for x in e], dtype=object)
    b_obj = n - a_obj - e_obj
    lengths = path_length(a_obj, e_obj, b_obj, q)
    lengths = np.where(first == lo, np.minimum(lengths, n), lengths)
    return first.astype(np.int64), count.astype(np.int64), lengths.astype(np.int64)


# ----------------------------------------------------------------------------- releases
def inverse_release(group: GroupCounts, q: Fraction, rate: Fraction) -> int:
    """The inverse sensitivity mechanism: a candidate index t with P(t) ∝ e^{−rate·len(x; t)}
    (rate = ε/(2Δ)), sampled exactly: a level by the certified inverse CDF of
    :func:`dpkit.sensitivity._inverse.sample_levels`, then a uniform candidate of that level."""
    from dpkit.noise import uniform_integers
    from dpkit.sensitivity._inverse import sample_levels

    first, count, length = run_lengths(group, q)
    levels, inverse = np.unique(length, return_inverse=True)
    exact_counts = np.zeros(levels.size, dtype=np.int64)
    np.add.at(exact_counts, inverse, count)  # exact integer totals
    chosen = int(sample_levels(exact_counts, levels, rate, 1)[0])
    pick = int(uniform_integers(int(exact_counts[chosen]), 1)[0])
    runs = np.flatnonzero(inverse == chosen)
    ends = np.cumsum(count[runs])
    slot = int(np.searchsorted(ends, pick, side="right"))
    before = int(ends[slot - 1]) if slot > 0 else 0
    return int(first[runs[slot]]) + pick - before


def ptr_release(
    group: GroupCounts,
    q: Fraction,
    k: int,
    bound_steps: Fraction,
    epsilon_test: Fraction,
    threshold: int,
    cap: int,
    release_scale: Fraction,
    noisy_test: bool = True,
) -> int | None:
    """Propose-test-release: None (refused) unless min(d(x), cap) + Lap(1/ε_test) > threshold;
    else f(x) + discrete Laplace(release_scale) grid steps (release_scale = ⌈b⌉/ε_release).

    ``noisy_test=False`` is the classic mistake (a test without noise): **not private**; it
    exists so the audit can show that it fails."""
    from dpkit.noise import discrete_laplace
    from dpkit.sensitivity._noise import discrete_laplace_wide

    d = distance_to_instability(group, q, k, bound_steps, cap)
    noisy = d + (int(discrete_laplace(1 / epsilon_test, 1)[0]) if noisy_test else 0)
    if noisy <= threshold:
        return None
    return group.statistic(q) + int(discrete_laplace_wide(release_scale, 1)[0])


def unit_smooth_bound(group: GroupCounts, q: Fraction, k: int, beta: float) -> float:
    """S = e^β'·T(x) with β' = min(β, SMOOTH_BETA_CAP), inflated by 1 + 2^-30: an upper bound
    on the unit-level local sensitivity that is β'-smooth, hence β-smooth (SMOOTH_BETA_CAP)."""
    capped = min(beta, SMOOTH_BETA_CAP)
    return math.exp(capped + smooth_bound(group, q, capped, k)) * (1 + 2.0**-30)


def smooth_release(group: GroupCounts, q: Fraction, k: int, plan: Any, shift: int) -> int:
    """One draw of :func:`smooth_release_many`."""
    return smooth_release_many(group, q, k, plan, shift, 1)[0]


def smooth_release_many(
    group: GroupCounts, q: Fraction, k: int, plan: Any, shift: int, size: int
) -> list[int]:
    """``size`` independent releases of f(x) + (S(x)/α)·Z on the output grid (2^shift output
    steps per grid step), clamped to a public range (post-processing). S is the unit-level
    β-smooth bound inflated by 1 + 2^-30 (the plan charges β + 2^-29 for it).

    * Cauchy-type plan (:func:`dpkit.sensitivity._smooth.plan_smooth`): Z from the exact lattice
      family, the scale at least the plan's lattice minimum.
    * Bun–Steinke zCDP plan (``plan.zcdp``, :func:`dpkit.sensitivity._smooth.plan_zcdp`): the exact
      grid rounding ⌊(f·2^shift + 2^shift·(S/s)·Z)⌋ = f·2^shift + ⌊c·Z⌋ with c = 2^shift·S/s a
      Fraction, drawn by :func:`dpkit.sensitivity._lazy.floor_scaled_noise` (certified interval
      arithmetic, so the output is a deterministic function of the ideal continuous release and
      the continuous ½ε²-zCDP calibration applies as is)."""
    from dpkit.sensitivity._lazy import floor_scaled_noise
    from dpkit.sensitivity._noise import cauchy_lattice, discrete_laplace_wide

    s_steps = unit_smooth_bound(group, q, k, float(plan.beta))
    width = (group.hi - group.lo) << shift
    low, high = (group.lo << shift) - width, (group.hi << shift) + width
    centre = group.statistic(q) << shift
    if plan.zcdp is not None:
        z = plan.zcdp
        c = Fraction(s_steps) * 2**shift / z.s
        steps = floor_scaled_noise(z.family, z.sigma, z.d, c, low - centre, high - centre, size)
        return [centre + v for v in steps]
    scale = max(Fraction(s_steps) * 2**shift / plan.alpha, Fraction(plan.min_scale))
    if plan.noise == "cauchy":
        noise = cauchy_lattice(scale, plan.gamma, size)
    else:
        noise = [int(v) for v in discrete_laplace_wide(scale, size)]
    return [min(max(centre + int(v), low), high) for v in noise]
