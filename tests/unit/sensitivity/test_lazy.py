"""The lazy exact grid rounding of the Bun–Steinke noises (dpkit.sensitivity._lazy)."""

from __future__ import annotations

import warnings
from fractions import Fraction

import numpy as np
import pytest
from scipy import special, stats

import dpkit.sensitivity._lazy as lazy
from dpkit.noise import insecure_deterministic_seed

SCALE = Fraction(2**30)
WIDE = 2**52 - 1
SIGMA = 0.5


def _mixture_cdf(base: object, z: np.ndarray) -> np.ndarray:
    """E_Y[F(z·e^{−σY})] by a fine trapezoid over Y ~ N(0, 1)."""
    y = np.linspace(-9, 9, 3001)
    w = stats.norm.pdf(y) * (y[1] - y[0])
    out = np.empty(z.size)
    for i in range(0, z.size, 500):
        u = z[i : i + 500, None] * np.exp(-SIGMA * y)[None, :]
        out[i : i + 500] = base(u) @ w  # type: ignore[operator]
    return out


def _laplace_cdf(u: np.ndarray) -> np.ndarray:
    return np.where(u < 0, 0.5 * np.exp(np.minimum(u, 0)), 1 - 0.5 * np.exp(-np.maximum(u, 0)))


CDFS = {
    "laplace_log_normal": lambda z: _mixture_cdf(_laplace_cdf, z),
    "uniform_log_normal": lambda z: _mixture_cdf(lambda u: np.clip((u + 1) / 2, 0, 1), z),
    "student_t": lambda z: stats.t.cdf(z, 3),
    "arcsinh_normal": lambda z: special.ndtr(np.arcsinh(SIGMA * z) / SIGMA),
}


@pytest.mark.parametrize("family", sorted(CDFS))
def test_draws_follow_the_continuous_law(family: str) -> None:
    # Seeded: unseeded, a correct sampler fails a p > 1e-3 test once in a thousand runs, and the
    # four families run in every CI (one such failure was seen). Over 40 seeds the p-values of
    # every family were uniform (KS p ≥ 0.1), so the fixed seed is not chosen to hide a bias; the
    # next test shows the same check rejects a wrong law.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with insecure_deterministic_seed(0):
            draws = lazy.floor_scaled_noise(family, Fraction(SIGMA), 3, SCALE, -WIDE, WIDE, 4000)
    values = (np.array(draws, dtype=np.float64) + 0.5) / float(SCALE)
    result = stats.kstest(values, CDFS[family])
    assert result.pvalue > 1e-3, result


def test_a_wrong_law_is_rejected_by_the_same_test() -> None:
    draws = lazy.floor_scaled_noise("student_t", Fraction(SIGMA), 3, SCALE, -WIDE, WIDE, 4000)
    values = (np.array(draws, dtype=np.float64) + 0.5) / float(SCALE)
    assert stats.kstest(values, lambda z: stats.t.cdf(z, 1)).pvalue < 1e-3


@pytest.mark.parametrize("family", sorted(CDFS))
def test_exact_path_gives_the_same_draws(family: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same bits, float-certified path vs mpmath.iv path: identical outputs (the output is a
    function of the bits alone)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with insecure_deterministic_seed(11):
            fast = lazy.floor_scaled_noise(family, Fraction(SIGMA), 3, Fraction(7, 3), -50, 50, 300)
        monkeypatch.setattr(lazy, "_FORCE_EXACT", True)
        with insecure_deterministic_seed(11):
            slow = lazy.floor_scaled_noise(family, Fraction(SIGMA), 3, Fraction(7, 3), -50, 50, 300)
    assert fast == slow
    assert min(fast) >= -50 and max(fast) <= 50


def test_clamp_and_small_scales() -> None:
    draws = lazy.floor_scaled_noise("laplace_log_normal", Fraction(1, 2), 0, SCALE, -3, 2, 500)
    assert set(draws) <= {-3, 2}
    tiny = lazy.floor_scaled_noise("student_t", Fraction(1), 1, Fraction(1, 10**9), -5, 5, 500)
    assert set(tiny) <= {-1, 0} | set(range(-5, 6))


def test_scales_beyond_float_range_are_exact() -> None:
    draws = lazy.floor_scaled_noise(
        "uniform_log_normal", Fraction(1, 2), 0, Fraction(2**1100), -9, 9, 50
    )
    assert set(draws) <= {-9, 9}  # |Z| > 2^-1090 almost surely: always clamped


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        lazy.floor_scaled_noise("student_t", Fraction(1, 3), 3, SCALE, -1, 1, 1)
    with pytest.raises(ValueError):
        lazy.floor_scaled_noise("student_t", Fraction(1), 3, SCALE, 1, -1, 1)
    with pytest.raises(ValueError):
        lazy.floor_scaled_noise("student_t", Fraction(1), 3, SCALE, -(2**53), 1, 1)
