"""Issue 21: large ε and large values give the right answer, never a saturated one.

Before the fix every grid mechanism clamped its input to ±2^62 grid steps; with a large ε the
grid is fine (a millionth of the noise scale), so ``make_laplace(1, epsilon=1e10)(1e6)``
released about 256 and ``make_laplace(1, epsilon=1e100)(1.0)`` about 2.5e-88, without a word.
``release_on_grid`` forms r(x) + n·g exactly at every magnitude and rounds it once.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import dpkit as dp
from dpkit.mechanisms._ladder_mechanism import make_ladder
from dpkit.noise._grid import grid_spacing, release_on_grid
from dpkit.transformations import make_bounded_sum

VALUES = [1.0, -3.5, 1e6, 2.0**70, -1e300]


def _exact(value: float | Fraction, exponent: int, n: int) -> float:
    g = grid_spacing(exponent)
    limit = Fraction(float(np.finfo(np.float64).max))
    if isinstance(value, float):
        value = max(-float(limit), min(float(limit), value))
    clamped = max(-limit, min(limit, Fraction(value)))
    exact = (math.floor(clamped / g + Fraction(1, 2)) + n) * g
    try:
        return max(-float(limit), min(float(limit), float(exact)))
    except OverflowError:
        return float(limit) if exact > 0 else -float(limit)


@pytest.mark.parametrize("epsilon", [1, 1e3, 1e6, 1e10, 1e20, 1e100])
def test_laplace_is_right_at_large_epsilon(epsilon: float) -> None:
    m = dp.make_laplace(1, epsilon)
    for value in VALUES:
        released = m(value)
        # 60 noise scales: a miss has probability e^-60
        assert abs(released - value) <= 60 / epsilon + abs(value) * 2**-52, (value, released)


@pytest.mark.parametrize("rho", [1, 1e6, 1e12, 1e40])
def test_gaussian_is_right_at_large_rho(rho: float) -> None:
    m = dp.make_gaussian(1, rho=rho)
    for value in VALUES:
        released = m(value)
        assert abs(released - value) <= 40 / math.sqrt(rho) + abs(value) * 2**-52


def test_vectors_and_many_releases_are_right_at_large_epsilon() -> None:
    m = dp.make_laplace(1, 1e12, changed_coordinates=5)
    out = m(np.array(VALUES))
    assert np.allclose(out, VALUES, rtol=2**-50, atol=1e-9)
    many = dp.make_laplace(1, 1e12).info.release_many(1e15, 50)
    assert np.all(np.abs(many - 1e15) <= 1)


def test_exact_sum_of_a_large_table_at_large_epsilon() -> None:
    pipeline = make_bounded_sum((0, 1e6)) >> dp.make_laplace(1e6, 1e12)
    assert abs(pipeline(np.full(10**5, 1e6)) - 1e11) <= 1e-3


def test_ladder_is_right_for_large_values() -> None:
    m = make_ladder([(0, 1)], epsilon=1)
    for value in (1e6, 1e15, 1e300):
        assert abs(m(value) - value) <= 100 + value * 2**-52


@pytest.mark.parametrize("exponent", [-1074, -1060, -600, -40, 0, 30, 918, 960])
def test_release_on_grid_rounds_the_exact_sum_once(exponent: int) -> None:
    rng = np.random.default_rng(7)
    values = np.concatenate(
        [
            rng.normal(size=20) * 2.0 ** rng.integers(-60, 1000, size=20),
            [0.0, 2.0**52 * 2.0**exponent if exponent < 960 else 0.0, math.inf, -math.inf],
            [float(np.finfo(np.float64).max), -float(np.finfo(np.float64).max)],
        ]
    )
    noise = rng.integers(-(2**40), 2**40, size=values.size)
    noise[:3] = [2**60, -(2**60), 2**53]  # beyond the floats' exact integers
    out = release_on_grid(values, exponent, noise)
    expected = [_exact(v, exponent, int(n)) for v, n in zip(values, noise, strict=True)]
    assert out.tolist() == expected


def test_release_on_grid_takes_exact_rationals() -> None:
    g = grid_spacing(-40)
    value = Fraction(10**30) + Fraction(1, 3)
    noise = np.array([5, -7, 0])
    out = release_on_grid(value, -40, noise)
    assert out.tolist() == [_exact(value, -40, int(n)) for n in noise]
    small = release_on_grid(Fraction(3, 7), -40, noise)
    assert small.tolist() == [
        float((math.floor(Fraction(3, 7) / g + Fraction(1, 2)) + n) * g) for n in noise
    ]


def test_release_on_grid_refuses_nan() -> None:
    with pytest.raises(dp.DPError):
        release_on_grid([math.nan], -10, np.array([0]))


@pytest.mark.parametrize("epsilon", [1e6, 1e12, 1e300])
def test_approx_gaussian_is_right_and_quick_at_large_epsilon(epsilon: float) -> None:
    # the δ summation ran out to the shift: 10 s at ε = 10^6, MemoryError at 10^10
    m = dp.make_gaussian(2, epsilon=epsilon, delta=1e-9)
    assert m.loss.delta <= Fraction(1, 10**9)  # type: ignore[attr-defined]
    assert abs(m(1e9) - 1e9) <= 40 * m.info.sigma + 1e9 * 2**-52


@pytest.mark.parametrize(
    ("sigma2", "shift", "epsilon"),
    [
        (Fraction(1, 4), 1, Fraction(1)),
        (Fraction(9), 3, Fraction(1, 2)),
        (Fraction(400), 30, Fraction(1, 10)),
        (Fraction(64**2), 2**23, Fraction(10**3)),  # a shift far beyond 40σ
        (Fraction(1, 100), 2**40, Fraction(10**9)),
    ],
)
def test_discrete_gaussian_delta_bounds_the_full_sum(
    sigma2: Fraction, shift: int, epsilon: Fraction
) -> None:
    """δ(ε) = Σ_k p(k)·max(0, 1 − e^ε q(k)/p(k)) summed in 60-digit arithmetic over every k
    where p or the excess is not negligible; the fast sum (|k| <= 40σ + 2) must bound it from
    above and stay within 1e-6 of it."""
    mpmath = pytest.importorskip("mpmath")
    from dpkit.mechanisms._gaussian import discrete_gaussian_delta

    mpmath.mp.dps = 60
    s2 = mpmath.mpf(sigma2.numerator) / sigma2.denominator
    sigma = float(mpmath.sqrt(s2))
    reach = int(60 * sigma) + 5
    ks = range(-reach, reach + 1)
    weights = [mpmath.exp(-(k * k) / (2 * s2)) for k in ks]
    norm = mpmath.fsum(weights)
    eps = mpmath.mpf(epsilon.numerator) / epsilon.denominator
    total = mpmath.fsum(
        w / norm * max(0, 1 - mpmath.exp(eps + (k * k - (k - shift) ** 2) / (2 * s2)))
        for k, w in zip(ks, weights, strict=True)
    )
    fast = discrete_gaussian_delta(sigma2, shift, epsilon)
    assert fast >= Fraction(str(mpmath.nstr(total, 40, min_fixed=-100, max_fixed=100)))
    assert float(fast) <= float(total) * (1 + 1e-6) + 2**-59
