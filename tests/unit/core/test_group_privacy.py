"""group_privacy: the loss for inputs k privacy units apart, checked exactly against the
formulas (a 2x error in any of them fails here)."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from dpkit._exact import exp_upper
from dpkit.core._losses import ZCDP, ApproxDP, PureDP, group_privacy
from dpkit.errors import InvalidParameterError


@pytest.mark.parametrize("k", [0, 1, 2, 3, 7])
def test_pure_and_zcdp_scale_by_k_and_k_squared(k: int) -> None:
    assert group_privacy(PureDP(Fraction(1, 3)), k) == PureDP(Fraction(k, 3))
    assert group_privacy(ZCDP(Fraction(1, 5)), k) == ZCDP(Fraction(k * k, 5))


def test_approx_delta_is_the_hybrid_sum() -> None:
    # two hops: P[M(x0) in S] <= e^ε (e^ε P[M(x2) in S] + δ) + δ = e^{2ε} P + δ(1 + e^ε)
    loss = group_privacy(ApproxDP(1, Fraction(1, 10**6)), 2)
    assert isinstance(loss, ApproxDP)
    assert loss.epsilon == 2
    assert loss.delta == Fraction(1, 10**6) * (1 + exp_upper(Fraction(1)))
    assert float(loss.delta) == pytest.approx(1e-6 * (1 + math.e), rel=1e-12)
    three = group_privacy(ApproxDP(Fraction(1, 2), Fraction(1, 10**9)), 3)
    assert float(three.delta) == pytest.approx(1e-9 * (1 + math.e**0.5 + math.e), rel=1e-12)


def test_approx_beyond_the_exact_sum_is_bounded_by_k_e_to_the_k_minus_one_epsilon() -> None:
    loss = group_privacy(ApproxDP(Fraction(1, 1000), Fraction(1, 10**12)), 100)
    exact = sum(math.exp(i / 1000) for i in range(100)) * 1e-12
    assert isinstance(loss, ApproxDP)
    assert exact <= float(loss.delta) <= 100 * math.exp(99 / 1000) * 1e-12 * (1 + 1e-12)


def test_one_unit_is_the_loss_itself_and_zero_units_is_free() -> None:
    for loss in (PureDP(1), ApproxDP(1, Fraction(1, 10**6)), ZCDP(Fraction(1, 2))):
        assert group_privacy(loss, 1) == loss
    assert group_privacy(ApproxDP(1, Fraction(1, 10**6)), 0) == ApproxDP(0, 0)


@pytest.mark.parametrize("units", [-1, Fraction(3, 2), 0.5, float("nan")])
def test_a_distance_that_is_not_a_whole_number_of_units_is_refused(units: object) -> None:
    with pytest.raises(InvalidParameterError, match="d_in"):
        group_privacy(PureDP(1), units)  # type: ignore[arg-type]


def test_a_vacuous_group_guarantee_is_refused() -> None:
    with pytest.raises(InvalidParameterError, match="say nothing"):
        group_privacy(ApproxDP(1, Fraction(1, 10**6)), 40)
    with pytest.raises(InvalidParameterError, match="say nothing"):
        group_privacy(ApproxDP(10**6, Fraction(1, 10**6)), 2)


def test_beyond_64_units_the_closed_form_is_tight_and_never_below_the_sum() -> None:
    for epsilon, k in ((Fraction(1, 10), 100), (Fraction(1, 1000), 5000), (Fraction(1, 5), 65)):
        loss = group_privacy(ApproxDP(epsilon, Fraction(1, 10**12)), k)
        exact = math.fsum(math.exp(i * float(epsilon)) for i in range(k)) * 1e-12
        assert isinstance(loss, ApproxDP)
        assert exact <= float(loss.delta) <= exact * (1 + float(epsilon) ** 2)
    # ε = 0.1, δ = 1e-6 at 100 units: δ' is about 0.21, a real guarantee (not refused)
    assert float(group_privacy(ApproxDP(Fraction(1, 10), Fraction(1, 10**6)), 100).delta) < 0.22


def test_an_astronomic_group_is_refused_not_overflowed() -> None:
    with pytest.raises(InvalidParameterError, match="d_in"):
        group_privacy(ApproxDP(1, Fraction(1, 10**6)), 10**400)
    assert group_privacy(PureDP(1), 10**400) == PureDP(10**400)
