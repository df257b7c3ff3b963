"""The variance released with smooth sensitivity (dpkit.sensitivity._variance), checked exactly.

* The released function is the variance of the values clamped and rounded to the public grid,
  computed in exact integer arithmetic: it equals Fraction arithmetic on the rounded values.
* Its A^(k) (integer version) equals the float formula of local.py that the brute-force tests
  verify, and bounds the released function's local sensitivity over every grid neighbour; the
  smooth bound is β-smooth over every pair of neighbouring grid datasets.
* S computed on the *unrounded* data (the broken variant) is not an upper bound on the released
  function's local sensitivity: an exact counterexample.
* Edges: NaN/±inf/out-of-bound values are clamped, never raise; parameter errors come first.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from dpkit.errors import InvalidParameterError
from dpkit.sensitivity import _local as local
from dpkit.sensitivity import make_smooth_sensitivity, smooth_sensitivity
from dpkit.sensitivity._data import Bounds
from dpkit.sensitivity._variance import (
    grid_values,
    variance_ak_scaled,
    variance_smooth_sensitivity,
    variance_value,
)


def _fraction_variance(values: list[Fraction]) -> Fraction:
    n = len(values)
    mean = sum(values, Fraction(0)) / n
    return sum(((v - mean) ** 2 for v in values), Fraction(0)) / n


def _exact_grid(x: float, lower: Fraction, upper: Fraction, bits: int) -> int:
    """Clamp (NaN → lower) and round to the nearest grid index, in exact arithmetic."""
    if math.isnan(x):
        return 0
    v = min(max(Fraction(x) if math.isfinite(x) else (upper if x > 0 else lower), lower), upper)
    return round((v - lower) / (upper - lower) * 2**bits)


@pytest.mark.parametrize("bits", [1, 3, 20, 24])
def test_released_function_is_the_exact_variance_of_the_rounded_values(bits: int) -> None:
    rng = np.random.default_rng(bits)
    lower, upper = -3.25, 7.5
    bounds = Bounds.of(lower, upper)
    for _ in range(50):
        n = int(rng.integers(1, 12))
        x = rng.uniform(-5, 10, n)
        x[rng.random(n) < 0.15] = np.nan
        x[rng.random(n) < 0.1] = np.inf
        j = grid_values(x, bounds, n, bits)
        expected_j = sorted(_exact_grid(v, Fraction(lower), Fraction(upper), bits) for v in x)
        assert j.tolist() == expected_j
        h = (Fraction(upper) - Fraction(lower)) / 2**bits
        rounded = [Fraction(lower) + h * i for i in expected_j]
        assert variance_value(j, bounds, bits) == _fraction_variance(rounded)


def test_large_values_do_not_overflow() -> None:
    """n·2^g at the limit of the int64 argument: sums stay exact."""
    bits, n = 24, 5000
    j = np.full(n, 2**24, dtype=np.int64)
    j[0] = 0
    bounds = Bounds.of(0, 1)
    exact = _fraction_variance([Fraction(int(v)) / 2**24 for v in j])
    assert variance_value(j, bounds, bits) == exact
    scaled = variance_ak_scaled(j, 2**24)
    assert np.all(np.isfinite(scaled)) and np.all(scaled > 0)


def test_integer_ak_equals_the_verified_float_formula() -> None:
    rng = np.random.default_rng(1)
    for _ in range(300):
        n, bits = int(rng.integers(1, 10)), int(rng.integers(1, 5))
        big_m = 2**bits
        j = np.sort(rng.integers(0, big_m + 1, n)).astype(np.int64)
        lower, upper = -3.0, 5.0
        xp = np.concatenate([[lower], lower + (upper - lower) * j / big_m, [upper]])
        ref = np.array([local._variance_ak(xp, Bounds.of(lower, upper), k) for k in range(n + 1)])
        got = variance_ak_scaled(j, big_m)
        if n > 1:
            got = got * ((upper - lower) / big_m) ** 2 / (n * n * (n - 1))
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-300)


def test_integer_ak_matches_on_larger_data() -> None:
    """n up to 60 with clustered data: the vertex candidates (exact rationals) matter here."""
    rng = np.random.default_rng(2)
    for _ in range(40):
        n, big_m = int(rng.integers(10, 60)), 64
        centre = int(rng.integers(0, big_m + 1))
        j = np.sort(np.clip(rng.normal(centre, 3, n).round(), 0, big_m)).astype(np.int64)
        xp = np.concatenate([[0.0], j / big_m, [1.0]])
        ref = np.array([local._variance_ak(xp, Bounds.of(0, 1), k) for k in range(n + 1)])
        got = variance_ak_scaled(j, big_m) / big_m**2 / (n * n * (n - 1))
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-300)


def _grid_variance(j: tuple[int, ...], big_m: int) -> Fraction:
    return _fraction_variance([Fraction(v, big_m) for v in j])


def _grid_ls(j: tuple[int, ...], big_m: int) -> Fraction:
    """The released function's local sensitivity: every substitution within the grid."""
    base = _grid_variance(j, big_m)
    best = Fraction(0)
    for i in range(len(j)):
        for v in range(big_m + 1):
            y = (*j[:i], v, *j[i + 1 :])
            best = max(best, abs(_grid_variance(y, big_m) - base))
    return best


def test_smooth_bound_covers_the_released_function_and_is_smooth() -> None:
    big_m, bits, beta = 4, 2, 0.3
    bounds = Bounds.of(0, 1)
    for n in (1, 2, 3, 4):
        datasets = list(itertools.combinations_with_replacement(range(big_m + 1), n))
        s = {d: variance_smooth_sensitivity(np.array(d), bounds, bits, beta) for d in datasets}
        for d in datasets:
            assert float(_grid_ls(d, big_m)) <= s[d] * (1 + 2**-40)
            for i in range(n):
                for v in range(big_m + 1):
                    y = tuple(sorted((*d[:i], v, *d[i + 1 :])))
                    assert s[y] <= math.exp(beta) * s[d] * (1 + 2**-40)


def test_smooth_bound_on_unrounded_data_is_broken() -> None:
    """The broken variant: S* of the unrounded values. Here (0.22, 0.78) rounds to (0, 1) on the
    grid {0, 1/2, 1}; the released function's local sensitivity there is 1/4, above S*."""
    x = np.array([0.22, 0.78])
    bounds = Bounds.of(0, 1)
    j = grid_values(x, bounds, 2, 1)
    assert j.tolist() == [0, 2]
    released_ls = float(_grid_ls((0, 2), 2))
    assert released_ls == 0.25
    unrounded = smooth_sensitivity(x, "variance", 5.0, lower=0, upper=1)
    assert unrounded < released_ls  # the broken variant does not cover the release
    assert variance_smooth_sensitivity(j, bounds, 1, 5.0) >= released_ls  # dpkit's S does


def test_shrink_only_ak_is_wrong() -> None:
    """The deliberately wrong A^(k) of the audit's broken variant misses the far-bound moves."""
    j = np.full(5, 2, dtype=np.int64)
    assert variance_ak_scaled(j, 4, broken_shrink_only=True)[0] == 0
    assert variance_ak_scaled(j, 4)[0] > 0


def test_edges_are_clamped_not_raised() -> None:
    m = make_smooth_sensitivity("variance", lower=0, upper=1, n=6, epsilon=1)
    data = [math.nan, math.inf, -math.inf, 1e308, -1e308, 0.5]
    value = m(data)
    assert math.isfinite(value)
    assert m(np.array(data)) is not None and m([None, 0, 0, 0, 0, 2]) is not None


@pytest.mark.parametrize("noise", ["cauchy", "student_t"])
def test_neighbours_with_extreme_values_fail_alike(noise: str) -> None:
    from dpkit.testing import EXTREME_FLOATS, check_failure_behaviour

    extra = {"epsilon": 1} if noise == "cauchy" else {"rho": 0.5}
    m = make_smooth_sensitivity("variance", lower=-1, upper=1, n=4, noise=noise, **extra)
    base = [0.5, -0.25, 0.0]
    pairs = [(np.array([*base, 0.1]), np.array([*base, v])) for v in EXTREME_FLOATS]
    result = check_failure_behaviour(m, pairs)
    assert result.passed and result.released_pairs == len(pairs), result


def test_parameter_errors_before_data() -> None:
    with pytest.raises(InvalidParameterError):
        make_smooth_sensitivity("variance", lower=0, upper=1, n=5, epsilon=1, grid_bits=0)
    with pytest.raises(InvalidParameterError):
        make_smooth_sensitivity("variance", lower=0, upper=1, n=5, epsilon=1, grid_bits=25)
    with pytest.raises(InvalidParameterError):  # n·2^g > 2^60
        make_smooth_sensitivity("variance", lower=0, upper=1, n=2**39, epsilon=1, grid_bits=24)
    with pytest.raises(InvalidParameterError):
        make_smooth_sensitivity("median", lower=0, upper=1, n=5, epsilon=1, grid_bits=10)
    m = make_smooth_sensitivity("variance", lower=0, upper=1, n=5, epsilon=1)
    with pytest.raises(InvalidParameterError):  # the schema (length), not the values
        m([0.1, 0.2])
