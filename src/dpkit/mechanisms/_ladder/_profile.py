"""Accuracy of the ladder for *every* δ at once, and the search for the best δ.

The dilated sets are B_t = A_t ⊕ [-δ, δ], where A_t = t-fold sums of D0 (the ladder with δ = 0;
ladder.md, Lemma 1). So one δ-free construction of A_0, A_1, ... (a :class:`Profile`) gives the
level masses and moments for any δ in closed form, from the *gaps* of each A_t: dilating by δ
fills 2δ of every gap, symmetrically about its midpoint (ladder.md §5):

* continuous (sets of reals, gap g = a - b between components [.., b] and [a, ..]):
  |B_t ∩ [0, ∞)| = τ_t - Σ (g - 2δ)⁺ with τ_t = tΔ + δ,
  ∫_{B_t ∩ [0,∞)} r dr = τ_t²/2 - Σ (g - 2δ)⁺·mid,
  ∫ r² dr = τ_t³/3 - Σ [c·mid² + c³/12] with c = (g - 2δ)⁺;
* lattice (sets of integers, γ = a - b - 1 missing integers, integer δ = m):
  #(B_t ∩ [0, ∞)) = τ_t + 1 - Σ (γ - 2m)⁺, Σ k = τ_t(τ_t+1)/2 - Σ c·mid,
  Σ k² = τ_t(τ_t+1)(2τ_t+1)/6 - Σ [c·mid² + (c³ - c)/12] with c = (γ - 2m)⁺.

Per δ this is a few vectorised passes over all gaps (no set arithmetic), and the ε-dependence
is a matrix product with the weights e^{-εt}: a full (δ, ε) heat map costs about as much as one
construction.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dpkit.mechanisms._ladder._levels import certificate, shift_ranges, step

__all__ = [
    "Profile",
    "build_profile",
    "level_moments",
    "moments_from_increments",
    "search_radius",
    "truncation_level",
]


@dataclass(frozen=True, slots=True)
class Profile:
    """The δ-free sets A_0..A_T of a ladder, kept as the gaps of each A_t ∩ [0, ∞).

    Attributes:
        period: Δ (units).
        adjacency: 0 for sets of reals, 1 for sets of integers.
        gaps: gap sizes (reals: a - b; integers: a - b - 1 missing points), float64.
        mids: gap midpoints (a + b)/2, float64.
        gap_level: the t of each gap.
        computed: T + 1, the number of sets A_0..A_T computed.
        converged_at: n if A's certificate holds at n (then T = n + 1), else None.
        max_components: the largest number of components of any A_t ∩ [0, ∞).
    """

    period: int
    adjacency: int
    gaps: np.ndarray
    mids: np.ndarray
    gap_level: np.ndarray
    computed: int
    converged_at: int | None
    max_components: int

    @property
    def head(self) -> int:
        """H, the last level listed before the periodic tail (of the dilated ladder)."""
        if self.converged_at is not None:
            return self.converged_at + 1
        return self.computed + 1  # capped at T = computed - 1: H = T + 2


def build_profile(
    v_lo: np.ndarray,
    v_hi: np.ndarray,
    adjacency: int,
    max_levels: int,
    max_gaps: int = 4_000_000,
) -> Profile:
    """Compute A_0 = {0}, A_t = A_{t-1} ⊕ D0 until A's certificate holds, t = max_levels, or
    more than ``max_gaps`` gaps are stored (then it is treated as capped there)."""
    period = int(np.max(v_hi))
    d0 = shift_ranges(np.asarray(v_lo, np.int64), np.asarray(v_hi, np.int64), adjacency)
    current = (np.array([0], np.int64), np.array([0], np.int64))
    gaps: list[np.ndarray] = []
    mids: list[np.ndarray] = []
    widest = 1
    stored = 0
    converged_at: int | None = None
    t = 0
    while True:
        lo, hi = current
        gaps.append((lo[1:] - hi[:-1] - adjacency).astype(np.float64))
        mids.append((lo[1:] + hi[:-1]).astype(np.float64) / 2.0)
        widest = max(widest, lo.size)
        stored += lo.size - 1
        if converged_at is not None or t >= max_levels or stored > max_gaps:
            break
        nxt = step(current, d0, period, adjacency)
        if certificate(current, nxt, period):
            converged_at = t
        current = nxt
        t += 1
    sizes = [g.size for g in gaps]
    return Profile(
        period=period,
        adjacency=adjacency,
        gaps=np.concatenate(gaps),
        mids=np.concatenate(mids),
        gap_level=np.repeat(np.arange(len(gaps), dtype=np.int64), sizes),
        computed=len(gaps),
        converged_at=converged_at,
        max_components=widest,
    )


def _cumulative(
    profile: Profile, delta: float, second_moment: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Half-line size, Σ r and Σ r² of B_t = A_t ⊕ [-δ, δ] for t = 0..H (see module doc).

    With ``second_moment=False`` the third array is zeros (the δ search needs only E|X|).
    """
    h = profile.head
    t = np.arange(h + 1, dtype=np.float64)
    tau = t * profile.period + delta
    c = profile.gaps - 2.0 * delta
    np.maximum(c, 0.0, out=c)
    lev = profile.gap_level
    lattice = profile.adjacency == 1
    holes = np.bincount(lev, weights=c, minlength=h + 1)
    weighted = c * profile.mids
    first = np.bincount(lev, weights=weighted, minlength=h + 1)
    if second_moment:
        cube = (c * c * c - c) / 12.0 if lattice else c * c * c / 12.0
        second = np.bincount(lev, weights=weighted * profile.mids + cube, minlength=h + 1)
    if lattice:
        size = tau + 1.0 - holes
        s1 = tau * (tau + 1.0) / 2.0 - first
        s2 = tau * (tau + 1.0) * (2.0 * tau + 1.0) / 6.0 - second if second_moment else 0.0 * t
    else:
        size = tau - holes
        s1 = tau * tau / 2.0 - first
        s2 = tau * tau * tau / 3.0 - second if second_moment else 0.0 * t
    return size, s1, s2


def level_moments(
    profile: Profile, delta: float, second_moment: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-level mass (count or length), Σ|r| and Σr² of R_t on the whole line, t = 0..H."""
    size, s1, s2 = _cumulative(profile, delta, second_moment)
    mass = 2.0 * np.diff(size, prepend=0.0)
    if profile.adjacency == 1:
        mass[0] -= 1.0  # 0 is counted once
    return mass, 2.0 * np.diff(s1, prepend=0.0), 2.0 * np.diff(s2, prepend=0.0)


def moments_from_increments(
    mass: np.ndarray,
    first: np.ndarray,
    second: np.ndarray,
    period: float,
    epsilons: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(α, E|X|, E X²) for each ε, from per-level mass and moments of R_0..R_H.

    Level H repeats as R_H + jΔ (j >= 0) with weight e^{-ε(H+j)}, so with ρ = e^{-ε}:
    Σ_j ρ^j = 1/(1-ρ), Σ_j jρ^j = ρ/(1-ρ)², Σ_j j²ρ^j = ρ(1+ρ)/(1-ρ)³.
    """
    eps = np.atleast_1d(np.asarray(epsilons, dtype=np.float64))
    h = mass.size - 1
    t = np.arange(h, dtype=np.float64)
    weights = np.exp(-np.outer(eps, t))  # (nε, H)
    rho = np.exp(-eps)
    one = -np.expm1(-eps)
    tail = np.exp(-eps * h)
    g0 = tail / one
    g1 = tail * rho / one**2
    g2 = tail * rho * (1.0 + rho) / one**3
    alpha = weights @ mass[:h] + g0 * mass[h]
    total_abs = weights @ first[:h] + g0 * first[h] + g1 * period * mass[h]
    total_sq = (
        weights @ second[:h]
        + g0 * second[h]
        + 2.0 * g1 * period * first[h]
        + g2 * period * period * mass[h]
    )
    return alpha, total_abs / alpha, total_sq / alpha


def truncation_level(epsilon: float, period: int, radius: float, tolerance: float) -> int:
    """The least T with Σ_{t > T} e^{-εt}·(2(tΔ + δ) + 1)·(tΔ + δ + 1)² <= tolerance.

    The summand bounds the weight of level t times its size and its largest |x|² (the sets B_t
    lie in [-(tΔ + δ), tΔ + δ]), so levels beyond T change α, E|X|·α and E X²·α by less than
    ``tolerance`` (relative to α >= 1 for integer sets).
    """
    log_tol = math.log(tolerance)
    t = 1
    while True:
        # geometric-series bound of the rest from t on: terms shrink by at least a factor
        # q = e^{-ε}·((t+1)/t)^3 once t is large
        ratio = math.exp(-epsilon) * ((t + 1) / t) ** 3
        size = 2.0 * (t * period + radius) + 1.0
        log_term = -epsilon * t + math.log(size) + 2.0 * math.log(t * period + radius + 1.0)
        if ratio < 1.0 and log_term - math.log1p(-ratio) <= log_tol:
            return t - 1
        t += 1 + t // 64


def search_radius(
    objective_of: Callable[[float], float],
    upper: float,
    *,
    integer: bool,
    coarse: int = 48,
) -> tuple[float, float]:
    """Minimise ``objective_of(δ)`` over δ in [0, upper]: a coarse scan, then golden section.

    The coarse scan uses 0, a geometric grid from ``upper``·2^-24 (or 1) to ``upper`` and a
    linear grid; golden-section search then refines between the neighbours of the best point
    (to integers when ``integer``). Returns (δ, objective).
    """
    low_geo = 1.0 if integer else max(upper * 2.0**-24, 1e-12)
    grid = np.concatenate(
        [[0.0], np.geomspace(low_geo, max(upper, low_geo), coarse), np.linspace(0, upper, 17)]
    )
    if integer:
        grid = np.round(grid)
    grid = np.unique(np.clip(grid, 0.0, upper))
    values = np.array([objective_of(float(d)) for d in grid])
    best = int(np.argmin(values))
    a = float(grid[max(best - 1, 0)])
    b = float(grid[min(best + 1, grid.size - 1)])
    cache = {float(grid[i]): float(values[i]) for i in range(grid.size)}

    def f(x: float) -> float:
        if integer:
            x = float(round(x))
        if x not in cache:
            cache[x] = float(objective_of(x))
        return cache[x]

    golden = (math.sqrt(5.0) - 1.0) / 2.0
    c = b - golden * (b - a)
    d = a + golden * (b - a)
    tolerance = 1.0 if integer else max(upper * 1e-9, 1e-12)
    for _ in range(200):
        if b - a <= 2.0 * tolerance:
            break
        if f(c) <= f(d):
            b, d = d, c
            c = b - golden * (b - a)
        else:
            a, c = c, d
            d = a + golden * (b - a)
    if integer:
        for x in range(math.floor(a), math.ceil(b) + 1):
            f(float(x))
    else:
        f((a + b) / 2.0)
    x_best = min(cache, key=lambda x: (cache[x], x))
    return x_best, cache[x_best]
