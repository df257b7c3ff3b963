"""The exact check is told the sensitivity by the test, not by the measurement it checks.

``check_measurement_exact(m)`` checks ``m.map(m.d_in)`` against ``m``'s noise. A constructor that
ignored Δ (calibrating and declaring as if Δ were 1) would pass that check, since its declared
``d_in`` and noise agree with each other. Here the distance is the Δ the *caller* asked for:
the check runs at ``d_in = Δ``, and the claim there must be the ε (or ρ, or (ε, δ)) asked for.
Mutant killed: ``make_laplace`` / ``make_gaussian`` / ``make_staircase`` ignoring ``sensitivity``.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

import dpkit as dp
from dpkit.testing import check_measurement_exact

SENSITIVITIES = [Fraction(1), Fraction(3), Fraction(3, 4), Fraction(100)]


def _check(m: Any, sensitivity: Fraction) -> Any:
    check_measurement_exact(m, d_in=sensitivity).raise_if_failed()
    return m.map(sensitivity)


@pytest.mark.parametrize("sensitivity", SENSITIVITIES)
def test_laplace_is_calibrated_for_the_sensitivity_asked(sensitivity: Fraction) -> None:
    loss = _check(dp.make_laplace(sensitivity, Fraction(1, 2)), sensitivity)
    assert loss == dp.PureDP(Fraction(1, 2))


@pytest.mark.parametrize("sensitivity", SENSITIVITIES)
def test_staircase_is_calibrated_for_the_sensitivity_asked(sensitivity: Fraction) -> None:
    loss = _check(dp.make_staircase(sensitivity, 1), sensitivity)
    assert isinstance(loss, dp.PureDP) and loss.epsilon <= 1


@pytest.mark.parametrize("sensitivity", [Fraction(1), Fraction(3), Fraction(100)])
def test_geometric_is_calibrated_for_the_sensitivity_asked(sensitivity: Fraction) -> None:
    loss = _check(dp.make_geometric(sensitivity, 1), sensitivity)
    assert loss == dp.PureDP(1)


@pytest.mark.parametrize("sensitivity", [Fraction(3)])  # ~8 s: the (ε, δ) check sums ±40σ
def test_gaussian_is_calibrated_for_the_sensitivity_asked(sensitivity: Fraction) -> None:
    zcdp = _check(dp.make_gaussian(sensitivity, rho=Fraction(1, 2)), sensitivity)
    assert isinstance(zcdp, dp.ZCDP) and zcdp.rho <= Fraction(1, 2)
    approx = _check(dp.make_gaussian(sensitivity, 1, Fraction(1, 10**6)), sensitivity)
    assert isinstance(approx, dp.ApproxDP)
    assert approx.epsilon <= 1 and approx.delta <= Fraction(1, 10**6)
