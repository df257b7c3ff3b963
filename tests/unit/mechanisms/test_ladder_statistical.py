"""Samples of the ladder noise against its exact distribution (fixed seeds: reproducible).

Issue item 5: the empirical mean |noise| matches the analytic E|noise| within 3 standard errors
— 10^5 samples here, 10^6 behind the ``slow`` marker."""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from scipy.stats import chisquare

from dpkit.mechanisms._ladder_mechanism import LadderLattice, make_discrete_ladder, make_ladder

CASES: dict[str, Callable[[], Any]] = {
    "V1, eps=1": lambda: make_ladder([(0, 1), (1000, 1001)], 1),
    "V1, eps=4": lambda: make_ladder([(0, 1), (1000, 1001)], 4),
    "V5, eps=0.5, exact tail": lambda: make_ladder([(0, 1), (100, 101)], 0.5, max_levels=10**5),
    "V7, eps=0.1": lambda: make_ladder([(0, 1), (2000, 2001)], 0.1),
    "discrete, gcd 5": lambda: make_discrete_ladder([0, 5, 10], Fraction(1, 2)),
    "discrete, delta=2": lambda: make_discrete_ladder([0, (3, 4), 17], 1, delta=2),
}


def _check_mean(measurement: Any, size: int) -> None:
    lattice: LadderLattice = measurement.noise.lattice
    draws = lattice.sample(size).astype(np.float64)
    magnitude = np.abs(draws)
    standard_error = magnitude.std(ddof=1) / math.sqrt(size)
    assert abs(magnitude.mean() - lattice.expected_abs()) <= 3 * standard_error
    assert draws.var() == pytest.approx(lattice.variance(), rel=0.1)


@pytest.mark.parametrize("name", list(CASES))
def test_mean_abs_noise_matches_analytic_value(name: str, seeded: None) -> None:
    _check_mean(CASES[name](), 100_000)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_mean_abs_noise_matches_analytic_value_million(name: str, seeded: None) -> None:
    _check_mean(CASES[name](), 1_000_000)


def test_levels_and_points_follow_the_exact_pmf(seeded: None) -> None:
    m = make_discrete_ladder([0, (3, 4), 17], Fraction(7, 10), delta=1, max_levels=10**5)
    lattice: LadderLattice = m.noise.lattice
    draws = lattice.sample(200_000)
    support = np.arange(-60, 61)
    probabilities = lattice.pmf(support)
    observed = np.array([np.count_nonzero(draws == k) for k in support])
    rest = draws.size - observed.sum()
    expected = np.append(probabilities, 1 - probabilities.sum()) * draws.size
    keep = expected > 20
    observed_all = np.append(observed, rest)[keep]
    expected_all = expected[keep] * observed_all.sum() / expected[keep].sum()
    assert chisquare(observed_all, expected_all).pvalue > 1e-4


def test_tail_levels_are_geometric(seeded: None) -> None:
    """Levels beyond the listed head come from the exact geometric tail."""
    m = make_ladder([(0, 1), (3, 4)], 1, delta=0.5, grid_exponent=-1, max_levels=10**5)
    lattice: LadderLattice = m.noise.lattice
    head = lattice.levels.head
    levels = lattice.sample_levels(200_000)
    tail = levels[levels >= head] - head
    ratio = np.count_nonzero(tail >= 1) / tail.size
    assert ratio == pytest.approx(math.exp(-1), abs=0.02)


def test_release_is_value_plus_noise_on_the_grid(seeded: None) -> None:
    m = make_ladder([(0, 1), (1000, 1001)], 2, grid_exponent=-3)
    outs = np.array([m(12.3) for _ in range(200)])
    assert np.all(outs * 8 == np.round(outs * 8))
    assert np.median(np.abs(outs - 12.25)) < 50  # most mass is near the value
