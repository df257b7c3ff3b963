"""The ladder noise on the integers (``LadderLattice``) and its continuous counterpart
(``LadderDensity``), built from :class:`~dpkit.mechanisms._ladder._levels.LevelSets`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from dpkit._exact import check_alpha
from dpkit.errors import InvalidParameterError
from dpkit.mechanisms._ladder._levels import LevelSets
from dpkit.mechanisms._ladder._profile import moments_from_increments
from dpkit.mechanisms._ladder._sampler import LevelSampler
from dpkit.noise import generator, geometric_exp

__all__ = ["UNREACHABLE", "LadderDensity", "LadderLattice"]

UNREACHABLE = 2**62
"""The level reported for integers the ladder never reaches (probability 0)."""


def _sq(n: np.ndarray) -> np.ndarray:
    """Σ_{k=0}^{n} k² as float64."""
    return n * (n + 1.0) * (2.0 * n + 1.0) / 6.0


@dataclass(frozen=True)
class _Tables:
    """Derived arrays, computed once per distribution."""

    half: np.ndarray  # |R_t ∩ [0, ∞)|, t = 0..H
    full: np.ndarray  # |R_t|
    cum: np.ndarray  # cumulative range sizes (level-major), length ranges + 1
    level_start: np.ndarray  # cum at the first range of each level
    piece_lo: np.ndarray  # position-sorted head pieces
    piece_hi: np.ndarray
    piece_level: np.ndarray
    tail_lo: np.ndarray  # R_H ∩ [0, ∞)
    tail_hi: np.ndarray
    mass: np.ndarray  # per-level |R_t|, Σ|k|, Σk² (floats)
    first: np.ndarray
    second: np.ndarray
    head_max: int  # the largest listed point
    sampler: LevelSampler
    guide: np.ndarray  # guide[b] = the range holding position b << guide_shift
    guide_shift: int


def _tables(levels: LevelSets, rate: Fraction) -> _Tables:
    h = levels.head
    half = levels.half_counts()
    full = levels.full_counts()
    sizes = levels.hi - levels.lo + 1
    cum = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
    lo = levels.lo.astype(np.float64)
    hi = levels.hi.astype(np.float64)
    tag = np.repeat(np.arange(h + 1, dtype=np.int64), np.diff(levels.offsets))
    s1 = (lo + hi) * (hi - lo + 1.0) / 2.0
    s2 = _sq(hi) - _sq(lo - 1.0)
    first = 2.0 * np.bincount(tag, weights=s1, minlength=h + 1)
    second = 2.0 * np.bincount(tag, weights=s2, minlength=h + 1)
    p_lo, p_hi, p_level = levels.head_pieces()
    total = int(cum[-1])
    buckets = min(1 << 22, 1 << (2 * sizes.size).bit_length())
    shift = max(0, (total - 1).bit_length() - (buckets - 1).bit_length())
    starts = np.arange((total - 1 >> shift) + 1, dtype=np.int64) << shift
    guide = (np.searchsorted(cum, starts, side="right") - 1).astype(np.int64)
    t_lo, t_hi = levels.level_ranges(h)
    return _Tables(
        half=half,
        full=full,
        cum=cum,
        level_start=cum[levels.offsets[:-1]],
        piece_lo=p_lo,
        piece_hi=p_hi,
        piece_level=p_level,
        tail_lo=t_lo,
        tail_hi=t_hi,
        mass=full.astype(np.float64),
        first=first,
        second=second,
        head_max=int(levels.hi.max()),
        sampler=LevelSampler(full, rate),
        guide=guide,
        guide_shift=shift,
    )


@dataclass(frozen=True, eq=False)
class LadderLattice:
    """The ladder noise on the integers: P(Z = k) ∝ e^{-ε·L(k)}, sampled exactly.

    L is the ladder level of ``levels`` (multiplied out by ``scale``: the noise is ``scale``
    times a ladder on the integers; integers that are not multiples of ``scale`` are never
    drawn). It follows the :class:`~dpkit.noise._distributions.TieredLatticeNoise` protocol:
    ``rate`` ε, ``level``, and the periodic tail L(k + period) = L(k) + 1 for k >= tail_start.

    Compared by identity (the level sets are large arrays).

    Attributes:
        levels: the level sets (half-line, levels 0..H, periodic tail).
        epsilon: ε > 0 (exact).
        scale: G >= 1 (1 except for neighbour sets of isolated points with gcd G).
    """

    levels: LevelSets
    epsilon: Fraction
    scale: int = 1
    _t: _Tables = field(init=False, repr=False, compare=False)

    level_step = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "_t", _tables(self.levels, self.epsilon))

    # ---- declared structure -------------------------------------------------------------
    @property
    def rate(self) -> Fraction:
        """ε: the log-pmf drops by ε per level."""
        return self.epsilon

    @property
    def period(self) -> int:
        """Δ (in integers): level(k + Δ) = level(k) + 1 beyond ``tail_start``."""
        return self.levels.period * self.scale

    @property
    def tail_start(self) -> int:
        """k0 = max(max B_{H-1} + 1, max R_H - Δ + 1): periodicity holds for |k| >= k0."""
        lv = self.levels
        h = lv.head
        below = int(lv.hi[: lv.offsets[h]].max())
        top_h = int(lv.hi[lv.offsets[h] : lv.offsets[h + 1]].max())
        return max(below + 1, top_h - lv.period + 1) * self.scale

    def _reduced_level(self, x: np.ndarray) -> np.ndarray:
        """L on the reduced lattice for x >= 0 (int64), UNREACHABLE if never reached."""
        t = self._t
        out = np.full(x.shape, UNREACHABLE, dtype=np.int64)
        i = np.searchsorted(t.piece_lo, x, side="right") - 1
        j = np.clip(i, 0, None)
        inside = (i >= 0) & (x <= t.piece_hi[j])
        out[inside] = t.piece_level[j[inside]]
        rest = np.flatnonzero(~inside)
        if rest.size:
            xr = x[rest]
            p = self.levels.period
            h = self.levels.head
            low, high = int(t.tail_lo[0]), int(t.tail_hi[-1])
            first = np.maximum(-((high - xr) // p), 1)  # ⌈(x - high)/p⌉, at least 1
            for extra in range((high - low) // p + 2):
                jj = first + extra
                y = xr - jj * p
                k = np.searchsorted(t.tail_lo, y, side="right") - 1
                kk = np.clip(k, 0, None)
                hit = (k >= 0) & (y <= t.tail_hi[kk]) & (y >= low)
                hit &= out[rest] == UNREACHABLE
                out[rest[hit]] = h + jj[hit]
        return out

    def level(self, k: np.ndarray) -> np.ndarray:
        """L(k) as int64 (``UNREACHABLE`` = 2^62 where the probability is 0)."""
        magnitude = np.abs(np.asarray(k, dtype=np.int64))
        if self.scale == 1:
            return self._reduced_level(magnitude)
        q, r = np.divmod(magnitude, self.scale)
        out = self._reduced_level(q)
        out[r != 0] = UNREACHABLE
        return out

    # ---- probabilities --------------------------------------------------------------------
    def _alpha(self) -> float:
        alpha, _, _ = self._moments()
        return alpha

    def _moments(self) -> tuple[float, float, float]:
        t = self._t
        alpha, mean_abs, mean_sq = moments_from_increments(
            t.mass, t.first, t.second, float(self.levels.period), np.array([float(self.epsilon)])
        )
        return float(alpha[0]), float(mean_abs[0]), float(mean_sq[0])

    def log_pmf(self, k: np.ndarray) -> np.ndarray:
        """ln P(Z = k) = -ε·L(k) - ln α (-inf where unreachable)."""
        lev = self.level(k)
        out = -float(self.epsilon) * lev.astype(np.float64) - math.log(self._alpha())
        return np.where(lev == UNREACHABLE, -np.inf, out)

    def _abs_tail(self, x: int) -> float:
        """P(|Z| > x) for an integer x >= -1 (reduced lattice), summed directly (no 1 - ...)."""
        t = self._t
        lv = self.levels
        eps = float(self.epsilon)
        h = lv.head
        p = lv.period
        # listed levels: points of R_t ∩ [0, ∞) above x, counted on both sides
        start = np.maximum(lv.lo, x + 1)
        above = np.maximum(lv.hi - start + 1, 0).astype(np.float64)
        tag = np.repeat(np.arange(h + 1), np.diff(lv.offsets))
        per_level = np.bincount(tag, weights=above, minlength=h + 1)
        weights = np.exp(-eps * np.arange(h, dtype=np.float64))
        total = 2.0 * float(weights @ per_level[:h])
        # tail levels H + j, j >= 0: R_H + j·p
        low, high = int(t.tail_lo[0]), int(t.tail_hi[-1])
        full_from = max(0, -((low - (x + 1)) // p))  # from this j on, R_H + j·p lies above x
        rho = math.exp(-eps)
        head_w = math.exp(-eps * h)
        for j in range(full_from):
            if high + j * p <= x:
                continue
            s = np.maximum(t.tail_lo + j * p, x + 1)
            n = float(np.sum(np.maximum(t.tail_hi + j * p - s + 1, 0)))
            total += 2.0 * head_w * rho**j * n
        total += 2.0 * head_w * rho**full_from * float(t.half[h]) / (-math.expm1(-eps))
        if x < 0:
            total -= 1.0  # 0 was counted on both sides
        return min(total / self._alpha(), 1.0)

    def cdf(self, k: np.ndarray) -> np.ndarray:
        """P(Z <= k): for k >= 0, 1 - P(|Z| > k)/2; for k < 0, P(|Z| > |k| - 1)/2."""
        values = np.floor(np.asarray(k, dtype=np.float64))
        out = np.empty(values.shape, dtype=np.float64)
        for index, v in np.ndenumerate(values):
            if not math.isfinite(v):
                out[index] = 0.0 if v < 0 else 1.0
                continue
            q = int(v) // self.scale  # Z = scale·Z', so P(Z <= v) = P(Z' <= ⌊v/scale⌋)
            if q >= 0:
                out[index] = 1.0 - self._abs_tail(q) / 2.0
            else:
                out[index] = self._abs_tail(-q - 1) / 2.0
        return out

    def pmf(self, k: np.ndarray) -> np.ndarray:
        """P(Z = k)."""
        return np.exp(self.log_pmf(k))

    def expected_abs(self) -> float:
        """E|Z| (exact sums over the listed levels and the geometric tail, in float64)."""
        return self._moments()[1] * self.scale

    def variance(self) -> float:
        """Var Z = E Z² (Z is symmetric)."""
        return self._moments()[2] * self.scale**2

    def tail_bound(self, alpha: float) -> int:
        """The smallest h >= 0 with P(|Z| > h) <= alpha."""
        alpha = check_alpha(alpha)
        if self._abs_tail(0) <= alpha:
            return 0
        high = max(self._t.head_max, 1)
        while self._abs_tail(high) > alpha:
            high *= 2
        low = 0
        while high - low > 1:
            mid = (low + high) // 2
            if self._abs_tail(mid) > alpha:
                low = mid
            else:
                high = mid
        return high * self.scale

    def support_radius(self, mass: float) -> int:
        """An h with P(|Z| > h) <= mass."""
        return self.tail_bound(mass)

    # ---- sampling -------------------------------------------------------------------------
    def sample_levels(self, size: int) -> np.ndarray:
        """Levels L(Z) of ``size`` independent draws, exactly."""
        t = self._t
        h = self.levels.head
        lev = t.sampler.categories(size)
        tail = np.flatnonzero(lev == h)
        if tail.size:
            lev[tail] += geometric_exp(1 / self.epsilon, tail.size)
        return lev

    def sample(self, size: int) -> np.ndarray:
        """``size`` independent draws of Z, exactly, as int64.

        The level t is drawn exactly (:class:`LevelSampler`; a tail level H + J adds an exact
        geometric J), then a uniform integer u in [0, |R_t|) picks the point: u < |R_t ∩ [0,∞)|
        gives the u-th point of the half-line part, otherwise the mirror image of a point of
        the half-line part that is not 0. Uniform integers come from
        :func:`dpkit.noise.generator` (numpy's unbiased bounded integers).
        """
        if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 0:
            raise InvalidParameterError("size", size, "an integer >= 0")
        size = int(size)
        if size == 0:
            return np.zeros(0, dtype=np.int64)
        t = self._t
        h = self.levels.head
        lev = self.sample_levels(size)
        base = np.minimum(lev, h)
        extra = lev - base
        counts = t.full[base]
        u = generator(size).integers(0, counts, dtype=np.int64)
        half = t.half[base]
        negative = u >= half
        index = np.where(negative, u - half + (base == 0), u)
        position = t.level_start[base] + index
        r = t.guide[position >> t.guide_shift]
        for _ in range(4):  # advance to the range holding the position (a few steps at most)
            ahead = np.flatnonzero(t.cum[r + 1] <= position)
            if ahead.size == 0:
                break
            r[ahead] += 1
        else:
            ahead = np.flatnonzero(t.cum[r + 1] <= position)
            r[ahead] = np.searchsorted(t.cum, position[ahead], side="right") - 1
        point = self.levels.lo[r] + (position - t.cum[r]) + extra * self.levels.period
        np.negative(point, out=point, where=negative)
        if self.scale != 1:
            point *= self.scale
        return point


@dataclass(frozen=True, eq=False)
class LadderDensity:
    """The continuous ladder density p(r) = e^{-ε·L(r)}/α (the paper's mechanism), for analysis.

    Built on the *doubled* lattice (ladder.md §4): the integer 2n stands for the real point n
    (in units of ``unit``) and 2n + 1 for the open interval (n, n + 1); a closed interval [a, b]
    with integer ends is the range [2a, 2b]. ``levels`` is the ladder on that lattice for 2V with
    an *even* radius 2δ (δ a whole number of units), so the level of a real r is the lattice
    level of 2r (r integral) or of 2⌊r⌋ + 1. Compared by identity.

    Attributes:
        levels: the ladder on the doubled lattice.
        epsilon: ε.
        unit: the length of one lattice unit (interval ends and δ are multiples of it).
    """

    levels: LevelSets
    epsilon: Fraction
    unit: Fraction = Fraction(1)
    _lattice: LadderLattice = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_lattice", LadderLattice(self.levels, self.epsilon))

    def _index(self, x: np.ndarray) -> np.ndarray:
        r = np.abs(np.asarray(x, dtype=np.float64)) / float(self.unit)
        whole = np.floor(r)
        return np.where(r == whole, 2.0 * whole, 2.0 * whole + 1.0).astype(np.int64)

    def level(self, x: np.ndarray) -> np.ndarray:
        """L(x) for real x (int64)."""
        return self._lattice.level(self._index(x))

    def _masses(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per-level length, ∫|r| and ∫r² (in units), from the odd points of each level."""
        lv = self.levels
        h = lv.head
        lo = lv.lo.astype(np.float64)
        hi = lv.hi.astype(np.float64)
        # odd points 2n+1 in [lo, hi]: n from ceil((lo-1)/2) to floor((hi-1)/2)
        n_lo = np.ceil((lo - 1.0) / 2.0)
        n_hi = np.floor((hi - 1.0) / 2.0)
        count = np.maximum(n_hi - n_lo + 1.0, 0.0)
        # ∫_n^{n+1} r dr = n + 1/2; ∫ r² = n² + n + 1/3
        s1 = np.where(count > 0, (n_lo + n_hi) * count / 2.0 + count / 2.0, 0.0)
        s2 = np.where(
            count > 0,
            (_sq(n_hi) - _sq(n_lo - 1.0)) + (n_lo + n_hi) * count / 2.0 + count / 3.0,
            0.0,
        )
        tag = np.repeat(np.arange(h + 1), np.diff(lv.offsets))
        return (
            2.0 * np.bincount(tag, weights=count, minlength=h + 1),
            2.0 * np.bincount(tag, weights=s1, minlength=h + 1),
            2.0 * np.bincount(tag, weights=s2, minlength=h + 1),
        )

    def _moments(self) -> tuple[float, float, float]:
        mass, first, second = self._masses()
        alpha, mean_abs, mean_sq = moments_from_increments(
            mass, first, second, self.levels.period / 2.0, np.array([float(self.epsilon)])
        )
        u = float(self.unit)
        return float(alpha[0]) * u, float(mean_abs[0]) * u, float(mean_sq[0]) * u * u

    def pdf(self, x: np.ndarray) -> np.ndarray:
        """p(x) = e^{-ε·L(x)}/α."""
        lev = self.level(x)
        alpha = self._moments()[0]
        out = np.exp(-float(self.epsilon) * lev.astype(np.float64)) / alpha
        return np.where(lev == UNREACHABLE, 0.0, out)

    def cdf(self, x: np.ndarray) -> np.ndarray:
        """P(X <= x), from the exact lengths of the level sets below x."""
        values = np.asarray(x, dtype=np.float64)
        out = np.empty(values.shape, dtype=np.float64)
        for index, v in np.ndenumerate(values):
            tail = self._abs_tail(abs(v))
            out[index] = 1.0 - tail / 2.0 if v >= 0 else tail / 2.0
        return out

    def _abs_tail(self, x: float) -> float:
        """P(|X| > x), integrating the density over (x, ∞) level by level."""
        lv = self.levels
        h = lv.head
        eps = float(self.epsilon)
        u = float(self.unit)
        y = x / u  # in units; level pieces in real units are [⌊lo/2⌋, ⌈hi/2⌉]
        lo_r = np.floor(lv.lo / 2.0)
        hi_r = np.ceil(lv.hi / 2.0)
        above = np.maximum(hi_r - np.maximum(lo_r, y), 0.0)
        tag = np.repeat(np.arange(h + 1), np.diff(lv.offsets))
        per_level = np.bincount(tag, weights=above, minlength=h + 1)
        weights = np.exp(-eps * np.arange(h, dtype=np.float64))
        total = 2.0 * float(weights @ per_level[:h])
        p = lv.period / 2.0
        t_lo = lo_r[lv.offsets[h] : lv.offsets[h + 1]]
        t_hi = hi_r[lv.offsets[h] : lv.offsets[h + 1]]
        rho = math.exp(-eps)
        head_w = math.exp(-eps * h)
        size = float(np.sum(t_hi - t_lo))
        j = 0
        while float(t_lo.min()) + j * p < y:
            part = float(np.sum(np.maximum(t_hi + j * p - np.maximum(t_lo + j * p, y), 0.0)))
            total += 2.0 * head_w * rho**j * part
            j += 1
        total += 2.0 * head_w * rho**j * size / (-math.expm1(-eps))
        return min(total * u / self._moments()[0], 1.0)

    def expected_abs(self) -> float:
        """E|X|."""
        return self._moments()[1]

    def variance(self) -> float:
        """Var X = E X²."""
        return self._moments()[2]

    def interval_halfwidth(self, alpha: float = 0.05) -> float:
        """The smallest h with P(|X| > h) <= alpha (to 1e-9 relative, by bisection)."""
        alpha = check_alpha(alpha)
        high = float(self.levels.tops[-1]) / 2.0 * float(self.unit) + 1.0
        while self._abs_tail(high) > alpha:
            high *= 2.0
        low = 0.0
        for _ in range(100):
            if high - low <= 1e-9 * max(high, 1e-300):
                break
            mid = (low + high) / 2.0
            if self._abs_tail(mid) > alpha:
                low = mid
            else:
                high = mid
        return high
