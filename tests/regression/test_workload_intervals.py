"""Regression (review finding 7): workload intervals must cover at least their nominal level.

With strategy "W·(x + noise)" and a pure-DP budget, the released interval of each linear query
was a normal approximation (z·sd) of a sum of discrete Laplace noises. For a row of W with a
single non-zero entry the noise *is* one discrete Laplace, whose tails are far heavier: at
α = 0.001 the true miss rate was ~1%. Fixed (planner.linear_noise_halfwidth): one noise term
gets its exact quantile; a linear combination gets the smaller of a union bound and a Chernoff
bound on the sum, both valid; the direct strategy "W·x + noise" adds the rounding of W·x to its
grid. Coverage is computed exactly from the noise's distribution.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

import dpkit as dp
from dpkit.analytics import Session
from dpkit.analytics._planner import integer_gaussian, linear_noise_halfwidth
from dpkit.analytics._query import workload
from dpkit.mechanisms import make_geometric
from dpkit.noise._distributions import DiscreteGaussian, DiscreteLaplace


@pytest.mark.parametrize("alpha", [0.05, 0.01, 0.001])
def test_workload_interval_covers_laplace_noise(alpha: float) -> None:
    df = pd.DataFrame({"u": range(30), "k": ["a", "b", "c"] * 10})
    session = Session(df, privacy_unit="u", budget=dp.PureDP(100), max_rows=1, engine="pandas")
    query = session.query().group_by("k", keys=["a", "b", "c"]).agg(workload(np.eye(3), "w"))
    assert "W·(x + noise)" in session.explain(query, epsilon=1)
    release = session.evaluate(query, epsilon=1, alpha=alpha)
    h = release.accuracy["w"].halfwidth
    # each released entry is x_j + Z, Z ~ discrete Laplace with scale Δ/ε = 1
    noise = DiscreteLaplace(Fraction(1))
    k = math.floor(h)
    miss = 1 - float(noise.cdf(np.array([k]))[0] - noise.cdf(np.array([-k - 1]))[0])
    assert miss <= alpha * 1.01, f"the {1 - alpha:.1%} interval ±{h:.3f} misses with p={miss:.4f}"
    assert release.accuracy["w"].kind == "exact"


def _pmf(scale: float, radius: int) -> np.ndarray:
    k = np.arange(-radius, radius + 1)
    p = math.exp(-1 / scale)
    return (1 - p) / (1 + p) * p ** np.abs(k)


@pytest.mark.parametrize("alpha", [0.1, 0.05, 0.01, 0.001])
@pytest.mark.parametrize(
    "weights", [[1, 1], [1, -1, 1], [2, 1], [1] * 6, [3, -1, 1, 1], [1, 0, 0, 1]]
)
@pytest.mark.parametrize("scale", [0.7, 1, 4])
def test_sums_of_laplace_noise_are_covered(alpha: float, weights: list[int], scale: float) -> None:
    """Exact coverage of Σ w_j Z_j (integer weights: the pmf by convolution)."""
    measurement = make_geometric(sensitivity=1, epsilon=Fraction(1) / Fraction(scale))
    h = linear_noise_halfwidth(measurement, weights, alpha)
    radius = int(60 * scale) + 10
    pmf = _pmf(scale, radius)
    total = np.array([1.0])
    offset = 0
    for w in weights:
        if w == 0:
            continue
        spread = np.zeros(abs(w) * (2 * radius) + 1)
        spread[:: abs(w)] = pmf  # w·Z on the integers (symmetric, so the sign does not matter)
        total = np.convolve(total, spread)
        offset += abs(w) * radius
    values = np.arange(total.size) - offset
    miss = float(total[np.abs(values) > h + 1e-9].sum())
    assert miss <= alpha, f"P(|noise| > {h:.3f}) = {miss:.5f} > {alpha}"
    # and not absurdly wide: at most 2.5 times the exact quantile
    order = np.argsort(np.abs(values))
    covered = np.cumsum(total[order])
    exact = float(np.abs(values[order])[np.searchsorted(covered, 1 - alpha)])
    assert h <= 2.5 * max(exact, 1), (h, exact)


def test_fractional_weights_are_covered() -> None:
    rng = np.random.default_rng(1)
    scale = 2.0
    p = math.exp(-1 / scale)
    weights = [0.5, -0.25, 1.5, 0.1]
    measurement = make_geometric(sensitivity=1, epsilon=Fraction(1, 2))
    h = linear_noise_halfwidth(measurement, weights, 0.05)
    n = 400_000
    # two-sided geometric as the difference of two geometric variables
    z = rng.geometric(1 - p, (n, 4)) - rng.geometric(1 - p, (n, 4))
    miss = float(np.mean(np.abs(z @ np.array(weights)) > h))
    assert miss <= 0.05, miss


@pytest.mark.parametrize("alpha", [0.05, 0.001])
@pytest.mark.parametrize("sigma2", [Fraction(1, 2), Fraction(3), Fraction(20)])
def test_sums_of_discrete_gaussian_noise_are_covered(alpha: float, sigma2: Fraction) -> None:
    lattice = DiscreteGaussian(sigma2)
    measurement = integer_gaussian(1, 1 / (2 * sigma2))
    assert measurement.noise.lattice == lattice
    h = linear_noise_halfwidth(measurement, [1, -1, 1], alpha)
    k = np.arange(-200, 201)
    pmf = np.exp(lattice.log_pmf(k))
    total = np.convolve(np.convolve(pmf, pmf), pmf)
    values = np.arange(total.size) - 600
    assert float(total[np.abs(values) > h + 1e-9].sum()) <= alpha
