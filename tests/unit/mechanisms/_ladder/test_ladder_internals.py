"""The ladder's machinery against brute force: interval arithmetic, level sets, the convergence
certificate, the cap, the δ-free profile and the exact level sampler."""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from fractions import Fraction

import numpy as np
import pytest

from dpkit.mechanisms._ladder import _sampler
from dpkit.mechanisms._ladder._levels import build_levels, level_differences, step
from dpkit.mechanisms._ladder._noise import UNREACHABLE, LadderDensity, LadderLattice
from dpkit.mechanisms._ladder._profile import (
    build_profile,
    level_moments,
    moments_from_increments,
)
from dpkit.mechanisms._ladder._sampler import LevelSampler
from dpkit.mechanisms._ladder._sets import (
    contains,
    count,
    difference,
    is_subset,
    minkowski,
    normalize,
)
from dpkit.mechanisms._ladder._verify import realised_jump
from dpkit.noise import InsecureRandomnessWarning, insecure_deterministic_seed


def _points(ranges: tuple[np.ndarray, np.ndarray]) -> set[int]:
    return {k for a, b in zip(*ranges, strict=True) for k in range(int(a), int(b) + 1)}


def _random_ranges(rng: np.random.Generator, n: int, span: int) -> tuple[np.ndarray, np.ndarray]:
    lo = rng.integers(-span, span, n)
    hi = lo + rng.integers(0, 5, n)
    return lo.astype(np.int64), hi.astype(np.int64)


# ------------------------------------------------------------------ interval arithmetic
def test_normalize_merges_overlapping_and_adjacent_integer_ranges() -> None:
    lo, hi = normalize(np.array([5, 0, 3, 10]), np.array([6, 2, 3, 12]), adjacency=1)
    assert lo.tolist() == [0, 5, 10] and hi.tolist() == [3, 6, 12]
    # as sets of reals, [0, 2] and [3, 3] do not touch
    lo, hi = normalize(np.array([5, 0, 3, 10]), np.array([6, 2, 3, 12]), adjacency=0)
    assert lo.tolist() == [0, 3, 5, 10] and hi.tolist() == [2, 3, 6, 12]


def test_set_operations_match_python_sets() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        a = normalize(*_random_ranges(rng, 6, 30))
        b = normalize(*_random_ranges(rng, 5, 30))
        pa, pb = _points(a), _points(b)
        assert _points(difference(a, b)) == pa - pb
        assert is_subset(a, b) == (pa <= pb)
        assert count(a) == len(pa)
        assert _points(minkowski(a, b)) == {x + y for x in pa for y in pb}
        probe = np.arange(-40, 41)
        assert contains(a, probe).tolist() == [int(k) in pa for k in probe]


def test_level_differences_match_set_difference() -> None:
    rng = np.random.default_rng(1)
    for _ in range(100):
        sets = [normalize(np.array([0]), np.array([int(rng.integers(0, 4))]))]
        for _ in range(6):
            extra = _random_ranges(rng, 4, 40)
            merged = normalize(
                np.concatenate([sets[-1][0], np.abs(extra[0])]),
                np.concatenate([sets[-1][1], np.abs(extra[0]) + extra[1] - extra[0]]),
            )
            sets.append(merged)
        b_off = np.concatenate([[0], np.cumsum([s[0].size for s in sets])])
        r_lo, r_hi, r_off = level_differences(
            np.concatenate([s[0] for s in sets]), np.concatenate([s[1] for s in sets]), b_off
        )
        for t, s in enumerate(sets):
            got = _points((r_lo[r_off[t] : r_off[t + 1]], r_hi[r_off[t] : r_off[t + 1]]))
            expected = _points(s) - (_points(sets[t - 1]) if t else set())
            assert got == expected
            assert np.all(np.diff(r_lo[r_off[t] : r_off[t + 1]]) > 0)  # sorted within a level


# ------------------------------------------------------------------ level sets vs brute force
def _brute_levels(v: list[tuple[int, int]], radius: int, window: int) -> np.ndarray:
    """Breadth-first levels on [-window, window] (-1: not reached), the definition itself."""
    shifts = sorted({s for a, b in v for x in range(a, b + 1) for s in (x, -x)} | {0})
    level = np.full(2 * window + 1, -1)
    frontier = set(range(-radius, radius + 1))
    for x in frontier:
        level[x + window] = 0
    t = 0
    while frontier:
        t += 1
        new = set()
        for x in frontier:
            for s in shifts:
                y = x + s
                if -window <= y <= window and level[y + window] < 0:
                    level[y + window] = t
                    new.add(y)
        frontier = new
    return level


def _random_neighbor_set(
    rng: np.random.Generator, *, points_only: bool = False
) -> list[tuple[int, int]]:
    while True:
        v = []
        for _ in range(int(rng.integers(1, 4))):
            a = int(rng.integers(0, 20))
            w = 0 if points_only else int(rng.integers(0, 3))
            v.append((a, a + w))
        if max(b for _, b in v) > 0:
            return v


def _gcd(v: list[tuple[int, int]]) -> int:
    if any(a != b for a, b in v):
        return 1
    return math.gcd(*[b for _, b in v if b > 0])


@pytest.mark.parametrize("seed", range(4))
def test_exact_ladder_levels_match_breadth_first_search(seed: int) -> None:
    """The certified periodic tail predicts every level, far beyond the listed ones."""
    rng = np.random.default_rng(seed)
    checked = 0
    while checked < 40:
        v = _random_neighbor_set(rng, points_only=seed == 3)
        if _gcd(v) > 1:
            continue
        radius = int(rng.integers(0, 4))
        lo, hi = (np.array(x, dtype=np.int64) for x in zip(*v, strict=True))
        levels = build_levels(lo, hi, radius, max_levels=100_000)
        assert levels.converged_at is not None and levels.capped_at is None
        window = 100
        brute = _brute_levels(v, radius, window + 60)[60:-60]
        noise = LadderLattice(levels, Fraction(1))
        assert noise.level(np.arange(-window, window + 1)).tolist() == brute.tolist()
        checked += 1


def test_capped_ladder_is_min_of_ladder_and_staircase_continuation() -> None:
    """Theorem 3: L' = L on B_T, T + 1 up to τ_{T+1}, then one level per Δ."""
    rng = np.random.default_rng(7)
    for _ in range(60):
        v = _random_neighbor_set(rng)
        radius = int(rng.integers(0, 4))
        cap = int(rng.integers(0, 5))
        lo, hi = (np.array(x, dtype=np.int64) for x in zip(*v, strict=True))
        levels = build_levels(lo, hi, radius, max_levels=cap)
        window = 80
        k = np.arange(-window, window + 1)
        brute = _brute_levels(v, radius, window + 60)[60:-60]
        got = LadderLattice(levels, Fraction(1)).level(k)
        if levels.capped_at is None:
            assert got.tolist() == brute.tolist()
            continue
        period = max(b for _, b in v)
        top = radius + (cap + 1) * period
        stair = cap + 1 + np.maximum(0, -(-(np.abs(k) - top) // period))
        expected = np.minimum(np.where(brute < 0, 10**9, brute), stair)
        assert got.tolist() == expected.tolist()


def test_isolated_points_with_common_divisor_never_converge_on_z() -> None:
    """V = {3}: only multiples of 3 are reachable, so the construction is capped (the public
    constructors work on 3·Z instead, see mechanisms/test_ladder.py)."""
    levels = build_levels(np.array([3]), np.array([3]), 0, max_levels=50)
    assert levels.converged_at is None and levels.capped_at == 50


def test_unreachable_points_report_the_sentinel() -> None:
    levels = build_levels(np.array([1]), np.array([1]), 0, max_levels=10)
    noise = LadderLattice(levels, Fraction(1), scale=3)
    assert noise.level(np.array([0, 3, 4, -6])).tolist() == [0, 1, UNREACHABLE, 2]
    assert noise.pmf(np.array([4]))[0] == 0.0


def test_step_uses_the_whole_component_around_zero() -> None:
    # B_0 = [-2, 2] shifted by [6, 7] reaches 4 (= -2 + 6): the half-line part [0, 2] alone
    # would miss it
    d0 = normalize(np.array([-7, 0, 6]), np.array([-6, 0, 7]))
    lo, hi = step((np.array([0]), np.array([2])), d0, 7)
    assert lo.tolist() == [0, 4] and hi.tolist() == [2, 9]


# ------------------------------------------------------------------ profile (all δ at once)
def _explicit_increments(noise: LadderLattice) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    t = noise._t
    return t.mass, t.first, t.second


@pytest.mark.parametrize("capped", [False, True])
def test_profile_closed_forms_match_explicit_level_sets(capped: bool) -> None:
    rng = np.random.default_rng(11)
    for _ in range(60):
        v = [(a, a + int(rng.integers(1, 4))) for a in rng.integers(0, 40, int(rng.integers(1, 4)))]
        lo, hi = (np.array(x, dtype=np.int64) for x in zip(*v, strict=True))
        radius = int(rng.integers(0, 10))
        cap = int(rng.integers(1, 25)) if capped else 100_000
        levels = build_levels(lo, hi, radius, max_levels=cap)
        profile_cap = cap if levels.capped_at is not None else 10**5
        profile = build_profile(lo, hi, 1, max_levels=profile_cap)
        eps = np.array([0.1, 1.0, 3.0])
        explicit = moments_from_increments(
            *_explicit_increments(LadderLattice(levels, Fraction(1))), levels.period, eps
        )
        closed = moments_from_increments(*level_moments(profile, radius), profile.period, eps)
        for a, b in zip(explicit, closed, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12)


def test_continuous_profile_matches_the_doubled_lattice() -> None:
    """Sets of reals with integer ends = integer sets on the doubled lattice (ladder.md §4)."""
    rng = np.random.default_rng(12)
    for _ in range(30):
        v = [(int(a), int(a) + int(rng.integers(1, 4))) for a in rng.integers(0, 30, 2)]
        lo, hi = (np.array(x, dtype=np.int64) for x in zip(*v, strict=True))
        twice = 2 * int(rng.integers(0, 6))  # δ = twice/2, a whole number of units
        profile = build_profile(lo, hi, 0, max_levels=10**5)
        density = LadderDensity(build_levels(2 * lo, 2 * hi, twice, max_levels=10**5), Fraction(1))
        eps = np.array([1.0])
        _, mean_abs, mean_sq = moments_from_increments(
            *level_moments(profile, twice / 2), profile.period, eps
        )
        assert density.expected_abs() == pytest.approx(float(mean_abs[0]), rel=1e-12)
        assert density.variance() == pytest.approx(float(mean_sq[0]), rel=1e-12)


# ------------------------------------------------------------------ exact level sampler
def test_exact_bounds_bracket_the_float_cdf() -> None:
    sampler = LevelSampler(np.array([3, 10, 40, 41, 7]), Fraction(7, 10))
    lo, hi, bits = sampler._exact_bounds(40)
    for i in range(len(lo)):
        assert lo[i] <= hi[i]
        f_lo, f_hi = lo[i] / hi[-1], hi[i] / lo[-1]
        assert f_lo - sampler.margin <= sampler._cdf[i] <= f_hi + sampler.margin
    assert bits > 100


@contextmanager
def _seed(seed: int) -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InsecureRandomnessWarning)
        with insecure_deterministic_seed(seed):
            yield


def test_forced_exact_path_gives_the_same_draws() -> None:
    """The decimal path decides every draw the way the certified float path does."""
    counts = np.array([5, 12, 30, 31, 8, 9])
    sampler = LevelSampler(counts, Fraction(1, 3))
    with _seed(5):
        fast = sampler.categories(3000)
    try:
        _sampler.FORCE_EXACT = True
        with _seed(5):
            slow = sampler.categories(3000)
    finally:
        _sampler.FORCE_EXACT = False
    assert np.array_equal(fast, slow)


def test_level_frequencies_match_exact_probabilities(seeded: None) -> None:
    from scipy.stats import chisquare

    counts = np.array([3, 20, 2, 50])
    rate = Fraction(1, 2)
    sampler = LevelSampler(counts, rate)
    draws = sampler.categories(200_000)
    weights = counts * np.exp(-0.5 * np.arange(4))
    weights[-1] /= -math.expm1(-0.5)
    expected = weights / weights.sum() * draws.size
    observed = np.bincount(draws, minlength=4)
    assert chisquare(observed, expected).pvalue > 1e-4


def test_realised_jump_is_one_for_built_ladders_and_two_when_a_level_is_demoted() -> None:
    rng = np.random.default_rng(3)
    for _ in range(40):
        v = _random_neighbor_set(rng)
        lo, hi = (np.array(x, dtype=np.int64) for x in zip(*v, strict=True))
        levels = build_levels(lo, hi, int(rng.integers(0, 4)), max_levels=int(rng.integers(1, 30)))
        assert realised_jump(levels, (lo, hi))[0] == 1
    lo, hi = np.array([0, 10]), np.array([1, 11])
    levels = build_levels(lo, hi, 1, max_levels=10**5)
    t = 3
    a, c = levels.offsets[t], levels.offsets[t + 2]
    merged_lo, merged_hi = levels.lo.copy(), levels.hi.copy()
    order = np.argsort(merged_lo[a:c])
    merged_lo[a:c], merged_hi[a:c] = merged_lo[a:c][order], merged_hi[a:c][order]
    offsets = levels.offsets.copy()
    offsets[t + 1] = a  # level t is now empty and its points sit in level t + 1
    demoted = dataclasses.replace(levels, lo=merged_lo, hi=merged_hi, offsets=offsets)
    assert realised_jump(demoted, (lo, hi))[0] == 2
