"""dpkit.noise.bernoulli_logistic_bytes: the byte-at-a-time coin is the exact inversion [U < θ].

Checks: the fast path returns, draw for draw, what the forced exact path returns on the same
bits (for the byte decision and for the undecided tail, whose exact path compares the 60-bit
cell of the *same* U with unmapped bounds on θ); frequencies, overall and conditional on the
undecided first byte; and a deliberately broken mapping of the undecided draws, which both
checks flag.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from dpkit import noise
from dpkit.noise import _exact

CASES = [
    (Fraction(1), Fraction(2), True),  # OUE's zero bits at ε = 2: q = 1/(1 + e²)
    (Fraction(1), Fraction(3, 4), False),  # SUE/CMS at ε = 3/2: e^{ε/2}/(1 + e^{ε/2})
    (Fraction(3), Fraction(1, 3), False),
    (Fraction(1, 7), Fraction(5), True),
]


def _theta(ratio: Fraction, gamma: Fraction, complement: bool) -> float:
    theta = 1 / (1 + float(ratio) * math.exp(-float(gamma)))
    return 1 - theta if complement else theta


def _draw_both_ways(seed: int, draw: Callable[[], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", noise.InsecureRandomnessWarning)
        with noise.insecure_deterministic_seed(seed):
            fast = draw()
        _exact._FORCE_EXACT = True
        try:
            with noise.insecure_deterministic_seed(seed):
                exact = draw()
        finally:
            _exact._FORCE_EXACT = False
    return fast, exact


@pytest.fixture
def seeded_quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", noise.InsecureRandomnessWarning)
        with noise.insecure_deterministic_seed(20_261_123):
            yield


def _tail_setup(ratio: Fraction, gamma: Fraction) -> tuple[int, float, float, Callable[..., Any]]:
    bounds_float = _exact._logistic_float_bounds(ratio, gamma)
    assert bounds_float is not None
    low, high = bounds_float
    below = math.floor(256 * low)
    assert math.ceil(256 * high) == below + 1  # one undecided byte value for these cases

    def bounds(digits: int) -> tuple[Fraction, Fraction]:
        lo_e, hi_e = _exact._exp_neg_bounds(gamma, digits)
        return 1 / (1 + ratio * hi_e), 1 / (1 + ratio * lo_e)

    return below, low, high, bounds


def tail_matches_exact_path(ratio: Fraction, gamma: Fraction) -> bool:
    """The float path of the undecided tail agrees draw for draw with the exact path."""
    below, low, high, bounds = _tail_setup(ratio, gamma)
    fast, exact = _draw_both_ways(7, lambda: _exact._finish_tail(4000, below, low, high, bounds))
    return bool(np.array_equal(fast, exact))


def tail_frequency_is_right(ratio: Fraction, gamma: Fraction, n: int = 400_000) -> bool:
    """Given the undecided first byte b, P(U < θ) = 256θ - b (within 5 standard errors)."""
    below, low, high, bounds = _tail_setup(ratio, gamma)
    p = 256 * _theta(ratio, gamma, False) - below
    draws = _exact._finish_tail(n, below, low, high, bounds)
    return bool(abs(draws.mean() - p) < 5 * math.sqrt(p * (1 - p) / n))


@pytest.mark.parametrize(("ratio", "gamma", "complement"), CASES)
def test_fast_path_equals_forced_exact_path(
    ratio: Fraction, gamma: Fraction, complement: bool
) -> None:
    """Every coin (byte-decided or not) equals the exact inversion on the same bits."""
    fast, exact = _draw_both_ways(
        3, lambda: noise.bernoulli_logistic_bytes(ratio, gamma, 3000, complement=complement)
    )
    assert np.array_equal(fast, exact)
    assert tail_matches_exact_path(ratio, gamma)


@pytest.mark.usefixtures("seeded_quiet")
@pytest.mark.parametrize(("ratio", "gamma", "complement"), CASES)
def test_frequencies_overall_and_on_the_undecided_byte(
    ratio: Fraction, gamma: Fraction, complement: bool
) -> None:
    n = 4_000_000
    theta = _theta(ratio, gamma, complement)
    draws = noise.bernoulli_logistic_bytes(ratio, gamma, n, complement=complement)
    assert abs(draws.mean() - theta) < 5 * math.sqrt(theta * (1 - theta) / n)
    assert tail_frequency_is_right(ratio, gamma)


@pytest.mark.usefixtures("seeded_quiet")
def test_a_wrong_mapping_of_the_undecided_draws_is_flagged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Broken variant: the tail compares U' with θ itself instead of 256θ - b (the mapping
    forgotten). It touches only ~1/256 of the coins, so an overall frequency test at moderate
    n misses it; the conditional frequency test and the fast-vs-exact test both flag it."""
    ratio, gamma = Fraction(1), Fraction(2)
    assert tail_matches_exact_path(ratio, gamma) and tail_frequency_is_right(ratio, gamma)

    def unmapped(theta_low: float, theta_high: float, b: int) -> tuple[float, float]:
        return theta_low, theta_high

    monkeypatch.setattr(_exact, "_tail_bounds", unmapped)
    assert not tail_matches_exact_path(ratio, gamma)
    assert not tail_frequency_is_right(ratio, gamma)

    def off_by_one(theta_low: float, theta_high: float, b: int) -> tuple[float, float]:
        return 256 * theta_low - (b + 1), 256 * theta_high - (b + 1)

    monkeypatch.setattr(_exact, "_tail_bounds", off_by_one)
    assert not tail_matches_exact_path(ratio, gamma)
    assert not tail_frequency_is_right(ratio, gamma)


@pytest.mark.usefixtures("seeded_quiet")
def test_rational_and_out_of_range_parameters_and_out() -> None:
    # γ = 0: θ = 1/(1 + r) is rational, drawn with the exact rational Bernoulli
    draws = noise.bernoulli_logistic_bytes(Fraction(3), Fraction(0), 400_000)
    assert abs(draws.mean() - 0.25) < 5 * math.sqrt(0.25 * 0.75 / 400_000)
    assert noise.bernoulli_logistic_bytes(Fraction(0), Fraction(1), 10).all()
    assert not noise.bernoulli_logistic_bytes(Fraction(0), Fraction(1), 10, complement=True).any()
    # r = 2^1000 is beyond the float certificate: the word-per-coin sampler takes over
    assert not noise.bernoulli_logistic_bytes(Fraction(2**1000), Fraction(1), 1000).any()
    buffer = np.ones(5000, dtype=bool)
    returned = noise.bernoulli_logistic_bytes(Fraction(1), Fraction(2), 5000, out=buffer)
    assert returned is buffer and abs(buffer.mean() - 0.8808) < 0.03
    with pytest.raises(ValueError):
        noise.bernoulli_logistic_bytes(Fraction(1), Fraction(2), 10, out=np.ones(9, dtype=bool))
    with pytest.raises(ValueError):
        noise.bernoulli_logistic_bytes(Fraction(-1), Fraction(2), 10)


def test_random_bytes_are_uniform_and_counted_as_words(seeded_quiet: None) -> None:
    b = noise.random_bytes(2_560_000)
    assert b.dtype == np.uint8 and b.size == 2_560_000
    counts = np.bincount(b, minlength=256)
    expected = b.size / 256
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 255 + 6 * math.sqrt(2 * 255)
    assert noise.random_bytes(13).size == 13
