"""Privacy-loss values: exact arithmetic, composition rules, conservative conversions."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

import dpkit as dp
from dpkit.core._losses import ZCDP, ApproxDP, PureDP, compose, parallel


def test_floats_are_read_as_the_decimal_the_user_typed() -> None:
    assert PureDP(0.1).epsilon == Fraction(1, 10)
    assert sum((PureDP(0.01) for _ in range(99)), PureDP(0.01)) == PureDP(1)


def test_sequential_composition_adds_epsilon_and_delta() -> None:
    assert PureDP(0.5) + PureDP(0.3) + PureDP(0.2) == PureDP(1)
    assert ApproxDP(1, 1e-6) + ApproxDP(0.5, 2e-6) == ApproxDP(1.5, 3e-6)
    assert PureDP(1) + ApproxDP(1, 1e-6) == ApproxDP(2, 1e-6)
    assert ZCDP(0.1) + ZCDP(0.2) == ZCDP(Fraction(3, 10))


def test_pure_dp_composes_with_zcdp_through_eps_squared_over_two() -> None:
    assert PureDP(1) + ZCDP(0.5) == ZCDP(1)


def test_parallel_composition_costs_the_maximum() -> None:
    assert parallel(PureDP(0.2), PureDP(0.7), PureDP(0.5)) == PureDP(0.7)
    assert parallel(ApproxDP(1, 1e-6), ApproxDP(0.5, 1e-5)) == ApproxDP(1, 1e-5)


def test_zcdp_to_approx_is_conservative_and_tighter_than_the_classic_bound() -> None:
    rho, delta = Fraction(1, 2), 1e-6
    converted = ZCDP(rho).to_approx(delta)
    classic = 0.5 + 2 * math.sqrt(0.5 * math.log(1 / delta))
    assert converted.epsilon <= Fraction(classic)
    # CKS 2020 Cor. 13 at the optimum must not beat the exact optimum of that formula
    best = min(
        a * 0.5 + (math.log(1 / delta) - math.log(a - 1) + a * math.log(1 - 1 / a)) / (a - 1)
        for a in (1 + i / 100 for i in range(1, 10000))
    )
    assert float(converted.epsilon) >= best - 1e-9
    assert float(converted.epsilon) <= best * 1.01


def test_within_budget_order() -> None:
    assert PureDP(0.5) <= PureDP(1)
    assert not PureDP(1.5) <= PureDP(1)
    assert PureDP(1) <= ApproxDP(1, 0)
    assert not ApproxDP(1, 1e-9) <= PureDP(1)
    assert ZCDP(0.01) <= ApproxDP(2, 1e-6)


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), "x", True])
def test_bad_epsilon_names_the_parameter(bad: object) -> None:
    with pytest.raises(dp.InvalidParameterError) as info:
        PureDP(bad)  # type: ignore[arg-type]
    assert info.value.parameter == "epsilon"


@pytest.mark.parametrize("bad", [-0.1, 1, 1.5, float("nan")])
def test_delta_must_be_in_zero_one(bad: float) -> None:
    with pytest.raises(dp.InvalidParameterError) as info:
        ApproxDP(1, bad)
    assert info.value.parameter == "delta"


def test_approx_and_zcdp_do_not_compose_silently() -> None:
    with pytest.raises(dp.InvalidParameterError, match="convert the ZCDP"):
        compose(ApproxDP(1, 1e-6), ZCDP(0.1))
