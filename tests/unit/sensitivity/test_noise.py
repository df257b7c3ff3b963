"""The exact heavy-tailed lattice sampler: forced exact path agrees; the pmf is right."""

from __future__ import annotations

import warnings
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import chisquare

import dpkit.noise._exact as exact_module
from dpkit.noise import InsecureRandomnessWarning, insecure_deterministic_seed
from dpkit.sensitivity._noise import cauchy_lattice


def _draw(scale: Fraction, gamma: int, size: int, seed: int) -> list[int]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InsecureRandomnessWarning)
        with insecure_deterministic_seed(seed):
            return cauchy_lattice(scale, gamma, size)


@pytest.mark.parametrize(("scale", "gamma"), [(Fraction(3, 2), 4), (Fraction(2**60 + 1, 3), 4)])
def test_forced_exact_path_gives_identical_samples(scale: Fraction, gamma: int) -> None:
    fast = _draw(scale, gamma, 300, 11)
    exact_module._FORCE_EXACT = True
    try:
        slow = _draw(scale, gamma, 300, 11)
    finally:
        exact_module._FORCE_EXACT = False
    assert fast == slow


@pytest.mark.parametrize(
    ("scale", "gamma"), [(Fraction(3, 2), 4), (Fraction(5), 2), (Fraction(2), 3)]
)
def test_pmf_chi_square(scale: Fraction, gamma: int) -> None:
    z = np.array(_draw(scale, gamma, 40_000, 5), dtype=np.int64)
    support = np.arange(-(10**6), 10**6 + 1)
    weights = 1.0 / (1.0 + np.abs(support / float(scale)) ** gamma)
    pmf = weights / weights.sum()
    cut = 6
    inner = np.arange(-cut, cut + 1)
    expected = [pmf[support == k][0] for k in inner]
    observed = [int(np.sum(z == k)) for k in inner]
    expected.append(1 - sum(expected))
    observed.append(int(np.sum(np.abs(z) > cut)))
    result = chisquare(observed, np.array(expected) * z.size)
    assert result.pvalue > 1e-4


def test_wide_discrete_laplace_matches_law() -> None:
    from dpkit.sensitivity._noise import discrete_laplace_wide

    t = Fraction(2**31 + 7, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InsecureRandomnessWarning)
        with insecure_deterministic_seed(3):
            z = np.array(discrete_laplace_wide(t, 40_000), dtype=np.float64) / float(t)
    # |Z|/t is (up to 1/t) standard exponential; Z symmetric
    assert abs(np.mean(np.abs(z)) - 1) < 0.03
    assert abs(np.mean(z > 0) - 0.5) < 0.02
    assert abs(np.mean(np.abs(z) > 2) - np.exp(-2)) < 0.01
