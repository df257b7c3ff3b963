"""Exact verification that a ladder distribution is ε-DP for a *set* of shifts.

For noise with P(Z = k) ∝ e^{-rate·L(k)} and shifts s in a union of integer ranges D (symmetric),
the largest privacy loss over all outputs and all shifts is rate·J with

    J = sup { L(k + s) - L(k) : k an integer with L(k) < ∞, s ∈ D }

(L = ∞ has probability 0: a reachable k with an unreachable k + s gives J = ∞). With
B_t = {k : L(k) <= t}, J <= j holds iff R_t ⊕ D ⊆ B_{t+j} for every level t (R_t = L^{-1}(t)),
an inclusion of unions of integer ranges that is checked exactly (ladder.md §6).

Infinitely many levels reduce to finitely many. The listed distribution has levels 0..H and
R_{H+i} = R_H + i·P for i >= 1 (half-line parts). After checking that these sets are pairwise
disjoint (so L is well defined), L(k + P) = L(k) + 1 for every k >= k0 with
k0 = max(max B_{H-1} + 1, max R_H - P + 1). For k >= k0 + P + Δ_D (Δ_D = max D) both k - P and
k + s - P are >= k0, so L(k + s) - L(k) = L(k - P + s) - L(k - P): every pair reduces to one with
0 <= k < K = k0 + P + Δ_D. Negative k mirror positive ones (L and D are symmetric). So J is the
least j with (R_t ∩ [-K, K]) ⊕ D ⊆ B_{t+j} for all t — finitely many t, exact integers.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from dpkit.errors import PrivacyCheckError
from dpkit.mechanisms._ladder._levels import LevelSets
from dpkit.mechanisms._ladder._sets import Ranges, is_subset, minkowski, normalize
from dpkit.testing._exact import CheckResult

__all__ = ["check_levels", "realised_jump"]

_EMPTY = np.zeros(0, dtype=np.int64)


def _mirror(lo: np.ndarray, hi: np.ndarray) -> Ranges:
    """The symmetric set (half-line part ``lo, hi``) on the whole line."""
    return normalize(np.concatenate([-hi, lo]), np.concatenate([-lo, hi]), 1)


def _validate(levels: LevelSets) -> None:
    """The listed levels and the tail translates must be pairwise disjoint, level 0 must hold 0."""
    h = levels.head
    p = levels.period
    if p < 1:
        raise PrivacyCheckError(f"the tail period must be >= 1, got {p}")
    if levels.lo.size == 0 or levels.lo[0] != 0:
        raise PrivacyCheckError("level 0 must contain 0")
    t_lo, t_hi = levels.level_ranges(h)
    if t_lo.size == 0:
        raise PrivacyCheckError(f"the tail level {h} is empty")
    top = int(levels.hi.max())
    copies = max(0, -((int(t_lo.min()) - top - 1) // p)) + 1  # translates that can meet the head
    lo = np.concatenate([levels.lo] + [t_lo + i * p for i in range(1, copies + 1)])
    hi = np.concatenate([levels.hi] + [t_hi + i * p for i in range(1, copies + 1)])
    if np.any(lo > hi):
        raise PrivacyCheckError("a level has a range with lo > hi")
    order = np.argsort(lo, kind="stable")
    if np.any(lo[order][1:] <= hi[order][:-1]):
        raise PrivacyCheckError(
            "the level sets (with their periodic tail) overlap: the level of some integer is "
            "not well defined"
        )


def _cumulative_sets(levels: LevelSets, last: int) -> list[Ranges]:
    """B_0, ..., B_last (half-line parts), each the union of the levels up to it."""
    out: list[Ranges] = []
    current: Ranges = (_EMPTY, _EMPTY)
    for t in range(last + 1):
        r_lo, r_hi = levels.level_ranges(t)
        current = normalize(np.concatenate([current[0], r_lo]), np.concatenate([current[1], r_hi]))
        out.append(current)
    return out


def realised_jump(levels: LevelSets, shifts: Ranges, limit: int = 4) -> tuple[int | None, int]:
    """The exact J (None if J > ``limit`` or infinite) and a level t where it is attained."""
    _validate(levels)
    h = levels.head
    p = levels.period
    d_lo, d_hi = normalize(
        np.concatenate([shifts[0], -shifts[1]]), np.concatenate([shifts[1], -shifts[0]]), 1
    )
    reach = int(max(abs(int(d_lo.min())), abs(int(d_hi.max()))))
    below = int(levels.hi[: levels.offsets[h]].max()) if h > 0 else -1
    top_h = int(levels.level_ranges(h)[1].max())
    k0 = max(below + 1, top_h - p + 1)
    radius = k0 + p + reach  # every pair reduces to one with |k| < radius
    # the levels that meet [0, radius): listed ones, then tail copies until they pass radius
    t_lo_min = int(levels.level_ranges(h)[0].min())
    last = h + max(0, -((t_lo_min - radius) // p))
    cumulative = _cumulative_sets(levels, last + limit)
    worst = 0
    where = 0
    for t in range(last + 1):
        r_lo, r_hi = levels.level_ranges(t)
        keep = r_lo < radius
        if not np.any(keep):
            continue
        part = _mirror(r_lo[keep], np.minimum(r_hi[keep], radius - 1))
        image = minkowski(part, (d_lo, d_hi), 1)
        cut = image[1] >= 0
        image = normalize(np.maximum(image[0][cut], 0), image[1][cut], 1)
        j = worst
        while not is_subset(image, cumulative[t + j]):
            j += 1
            if j > limit:
                return None, t
        if j > worst:
            worst, where = j, t
    return worst, where


def check_levels(
    levels: LevelSets,
    rate: Fraction,
    shifts: Ranges,
    claimed_epsilon: Fraction,
    *,
    scale: int = 1,
) -> CheckResult:
    """Exact check of rate·J <= claimed ε for shifts in ``shifts`` (integer ranges, in units of
    ``scale``), for the ladder distribution with these ``levels``."""
    jump, where = realised_jump(levels, shifts)
    realised: Fraction | float = rate * jump if jump is not None else float("inf")
    passed = jump is not None and rate * jump <= claimed_epsilon
    return CheckResult(
        notion="pure",
        realised=realised,
        claimed=claimed_epsilon,
        passed=bool(passed),
        witness=(where,),
        detail=(
            "exact sup over every integer k and every shift s in the declared neighbour set of "
            f"rate·(L(k+s) - L(k)), as the least j with R_t ⊕ D ⊆ B_(t+j) for all t "
            f"(unit {scale}); rate={rate}, j={'>4 or ∞' if jump is None else jump}, "
            f"worst at level t={where}"
        ),
    )
