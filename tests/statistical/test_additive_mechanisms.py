"""The samplers behind the additive mechanisms produce the distributions they declare.

The exact privacy checks in dpkit.testing read a mechanism's *declared* pmf; these tests close
the loop by checking that the exact samplers really draw from it: χ² against the pmf for the
discrete Laplace and discrete Gaussian (also through the slow exact path, forced), a
Kolmogorov–Smirnov test of the grid Laplace and grid Gaussian against their continuous
counterparts, and Bernoulli(e^{-γ}) frequencies.

All sampling runs under the ``seeded`` fixture, so the p-value thresholds are not flaky.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

import dpkit as dp
from dpkit import noise
from dpkit.noise import _exact
from dpkit.noise._distributions import DiscreteGaussian, DiscreteLaplace, LatticeNoise

pytestmark = pytest.mark.usefixtures("seeded")

P_MIN = 1e-4  # fixed significance level of every goodness-of-fit test here


@pytest.fixture
def force_exact() -> Iterator[None]:
    """Send every draw down the exact (interval-arithmetic) path of dpkit.noise._exact."""
    _exact._FORCE_EXACT = True
    try:
        yield
    finally:
        _exact._FORCE_EXACT = False


def chi_square_pvalue(
    samples: np.ndarray, lattice: LatticeNoise, min_expected: float = 5.0
) -> float:
    """χ² of integer samples against ``lattice``'s pmf.

    One bin per integer k whose pmf exceeds 1e-6 and whose expected count is at least
    ``min_expected``; the remaining mass forms a left and a right tail bin.
    """
    n = samples.size
    radius = int(lattice.tail_bound(1e-6)) + 2
    k = np.arange(-radius, radius + 1)
    pmf = np.exp(lattice.log_pmf(k))
    keep = (pmf > 1e-6) & (pmf * n >= min_expected)
    centre = k[keep]
    lo, hi = int(centre.min()), int(centre.max())
    assert np.array_equal(centre, np.arange(lo, hi + 1))  # unimodal: the kept bins are contiguous
    expected_centre = pmf[keep] * n
    left = float(lattice.cdf(np.array([lo - 1]))[0]) * n
    right = n - left - float(expected_centre.sum())
    observed_centre = np.bincount(
        samples[(samples >= lo) & (samples <= hi)] - lo, minlength=hi - lo + 1
    )
    observed = np.concatenate([[np.sum(samples < lo)], observed_centre, [np.sum(samples > hi)]])
    expected = np.concatenate([[left], expected_centre, [right]])
    mask = expected > 0
    expected = expected[mask] * observed[mask].sum() / expected[mask].sum()
    return float(stats.chisquare(observed[mask], expected).pvalue)


# ----------------------------------------------------------------------- lattice samplers
@pytest.mark.parametrize("scale", [Fraction(1, 3), Fraction(1), Fraction(7, 2), Fraction(40)])
def test_discrete_laplace_matches_its_pmf(scale: Fraction) -> None:
    lattice = DiscreteLaplace(scale)
    assert chi_square_pvalue(lattice.sample(200_000), lattice) > P_MIN


@pytest.mark.parametrize("sigma2", [Fraction(1, 4), Fraction(2), Fraction(81, 4), Fraction(900)])
def test_discrete_gaussian_matches_its_pmf(sigma2: Fraction) -> None:
    lattice = DiscreteGaussian(sigma2)
    assert chi_square_pvalue(lattice.sample(200_000), lattice) > P_MIN


@pytest.mark.usefixtures("force_exact")
@pytest.mark.parametrize(
    "lattice",
    [DiscreteLaplace(Fraction(3, 2)), DiscreteGaussian(Fraction(9, 2))],
    ids=["laplace", "gaussian"],
)
def test_exact_fallback_path_matches_the_pmf(lattice: LatticeNoise) -> None:
    assert _exact._FORCE_EXACT
    assert chi_square_pvalue(lattice.sample(3_000), lattice) > P_MIN


@pytest.mark.slow
@pytest.mark.parametrize(
    "lattice",
    [DiscreteLaplace(Fraction(5, 2)), DiscreteGaussian(Fraction(25, 4))],
    ids=["laplace", "gaussian"],
)
def test_samplers_match_every_bin_above_one_in_a_million(lattice: LatticeNoise) -> None:
    """5M draws: every k with pmf(k) > 1e-6 has an expected count >= 5, so gets its own bin."""
    assert chi_square_pvalue(lattice.sample(5_000_000), lattice) > P_MIN


def test_geometric_mechanism_noise_matches_its_declared_distribution() -> None:
    m = dp.make_geometric(1, 0.5)
    releases = np.asarray(m(np.zeros(200_000, dtype=np.int64)))
    assert chi_square_pvalue(releases, m.noise.lattice) > P_MIN


# ----------------------------------------------------------------------- grid mechanisms
@pytest.mark.parametrize(("sensitivity", "epsilon"), [(1, 1), (3, 0.5)])
def test_grid_laplace_follows_the_continuous_laplace(sensitivity: float, epsilon: float) -> None:
    # changed_coordinates=1: each coordinate is one release of the scalar mechanism (a vector
    # without it is refused by its shape)
    m = dp.make_laplace(sensitivity, epsilon, changed_coordinates=1)
    laplace = stats.laplace(scale=sensitivity / epsilon)
    # the declared grid cdf is within ~1e-6 of the continuous one (a millionth-of-scale grid)
    x = np.linspace(-8, 8, 1001) * sensitivity / epsilon
    assert np.max(np.abs(m.noise.cdf(x) - laplace.cdf(x))) < 5e-6
    # and the releases follow it
    releases = np.asarray(m(np.zeros(100_000)))
    assert stats.kstest(releases, laplace.cdf).pvalue > P_MIN


def test_grid_gaussian_follows_the_continuous_gaussian() -> None:
    m = dp.make_gaussian(1, rho=0.5, changed_coordinates=1)
    normal = stats.norm(scale=1.0)  # σ = Δ/sqrt(2ρ) = 1
    assert math.isclose(m.info.sigma, 1.0, rel_tol=1e-12)
    x = np.linspace(-6, 6, 1001)
    assert np.max(np.abs(m.noise.cdf(x) - normal.cdf(x))) < 1e-3  # grid step σ/4096
    assert stats.kstest(np.asarray(m(np.zeros(100_000))), normal.cdf).pvalue > P_MIN


def test_grid_laplace_releases_are_on_the_grid() -> None:
    m = dp.make_laplace(1, 1, changed_coordinates=1)
    g = 2.0**m.info.grid_exponent
    releases = np.array([m(0.3) for _ in range(200)] + list(m(np.zeros(1_000))))
    assert np.all(releases / g == np.round(releases / g))


# ----------------------------------------------------------------------- Bernoulli(e^{-γ})
@pytest.mark.parametrize(
    "gamma", [Fraction(0), Fraction(1, 10), Fraction(1, 3), Fraction(1), Fraction(7, 2)]
)
def test_bernoulli_exp_frequencies(gamma: Fraction) -> None:
    n = 200_000
    hits = int(np.sum(noise.bernoulli_exp(gamma, n)))
    p = math.exp(-float(gamma))
    if gamma == 0:
        assert hits == n
    else:
        assert stats.binomtest(hits, n, p).pvalue > P_MIN


@pytest.mark.usefixtures("force_exact")
def test_bernoulli_exp_exact_path_frequencies() -> None:
    n = 5_000
    hits = int(np.sum(noise.bernoulli_exp(Fraction(2, 3), n)))
    assert stats.binomtest(hits, n, math.exp(-2 / 3)).pvalue > P_MIN


def test_geometric_exp_tail_frequencies() -> None:
    t = Fraction(5, 2)
    draws = noise.geometric_exp(t, 200_000)
    for k in (1, 3, 8):  # P(X >= k) = e^{-k/t}
        hits = int(np.sum(draws >= k))
        assert stats.binomtest(hits, draws.size, math.exp(-k / float(t))).pvalue > P_MIN


# ----------------------------------------------------------------------- the tests have power
def test_goodness_of_fit_tests_reject_a_slightly_wrong_distribution() -> None:
    """The same sizes and thresholds reject distributions a few percent off."""
    laplace_samples = DiscreteLaplace(Fraction(1)).sample(200_000)
    assert chi_square_pvalue(laplace_samples, DiscreteLaplace(Fraction(105, 100))) < P_MIN
    gaussian_samples = DiscreteGaussian(Fraction(2)).sample(200_000)
    assert chi_square_pvalue(gaussian_samples, DiscreteGaussian(Fraction(21, 10))) < P_MIN
    releases = np.asarray(dp.make_laplace(1, 1, changed_coordinates=1)(np.zeros(100_000)))
    assert stats.kstest(releases, stats.laplace(scale=1.05).cdf).pvalue < P_MIN
