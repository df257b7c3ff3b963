"""Privacy filters and odometers for adaptively chosen losses."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from dpkit.accounting import AdvancedFilter, BasicFilter, PrivacyOdometer, ZCDPFilter
from dpkit.core._losses import ZCDP, ApproxDP, PureDP
from dpkit.errors import BudgetExceededError, InvalidParameterError


def test_basic_filter_refuses_the_query_that_would_exceed() -> None:
    f = BasicFilter(PureDP(1))
    for _ in range(100):
        f.spend(PureDP(0.01))
    assert f.spent == ApproxDP(1, 0)
    assert not f.admits(PureDP(0.01))
    with pytest.raises(BudgetExceededError):
        f.spend(PureDP(0.01))
    assert f.count == 100
    assert f.spent == ApproxDP(1, 0)


def test_basic_filter_tracks_delta() -> None:
    f = BasicFilter(ApproxDP(1, 1e-6))
    f.spend(ApproxDP(0.1, 6e-7))
    assert not f.admits(ApproxDP(0.1, 6e-7))
    f.spend(ApproxDP(0.1, 4e-7))
    assert not f.admits(ZCDP(0.01))
    with pytest.raises(BudgetExceededError):
        f.spend(ZCDP(0.01))


def test_zcdp_filter() -> None:
    f = ZCDPFilter(1)
    f.spend(PureDP(1))  # 1/2
    f.spend(ZCDP(0.5))
    assert f.spent == ZCDP(1)
    assert not f.admits(ZCDP(Fraction(1, 10**9)))
    assert not f.admits(ApproxDP(0.1, 1e-9))
    assert f.guarantee(1e-6) == ZCDP(1).to_approx(1e-6)


def test_advanced_filter_admits_more_than_basic_for_many_small_queries() -> None:
    adv = AdvancedFilter(1, 1e-6)
    basic = BasicFilter(PureDP(1))
    n_adv = n_basic = 0
    while adv.admits(PureDP(0.01)):
        adv.spend(PureDP(0.01))
        n_adv += 1
    while basic.admits(PureDP(0.01)):
        basic.spend(PureDP(0.01))
        n_basic += 1
    assert n_basic == 100
    assert n_adv > n_basic
    # The stopping rule of Whitehouse et al. 2023 holds at the stop, in floats too:
    s = n_adv * 0.01**2
    assert math.sqrt(2 * math.log(1e6) * s) + s / 2 <= 1
    s_next = (n_adv + 1) * 0.01**2
    assert math.sqrt(2 * math.log(1e6) * s_next) + s_next / 2 > 1 - 1e-12
    assert adv.spent.epsilon <= 1


def test_advanced_filter_with_approximate_queries() -> None:
    f = AdvancedFilter(1, 1e-6, delta_split=Fraction(1, 2))
    f.spend(ApproxDP(0.1, 4e-7))
    assert not f.admits(ApproxDP(0.1, 2e-7))
    assert not AdvancedFilter(1, 1e-6).admits(ApproxDP(0.1, 1e-9))
    with pytest.raises(InvalidParameterError):
        AdvancedFilter(1, 1e-6, delta_split=0)


def test_adaptive_choice_never_exceeds_budget() -> None:
    # The analyst doubles the next loss whenever a (simulated) answer is "interesting".
    f = BasicFilter(PureDP(1))
    eps = Fraction(1, 64)
    refused = 0
    for step in range(40):
        try:
            f.spend(PureDP(eps))
        except BudgetExceededError:
            refused += 1
            eps /= 2
            continue
        if step % 3 == 0:
            eps *= 2
    assert f.spent.epsilon <= 1
    assert refused > 0


def test_odometer_basic_and_stitched() -> None:
    odo = PrivacyOdometer(1e-6)
    reading = odo.record(PureDP(0.5))
    assert reading.loss == ApproxDP(0.5, 1e-6) and reading.method == "basic"
    for _ in range(999):
        reading = odo.record(PureDP(0.001))
    # 0.5 + 0.999 = 1.499 by the basic sum; the zCDP-stitched bound is not smaller here.
    assert reading.loss.epsilon <= Fraction(1499, 1000)
    many = PrivacyOdometer(1e-6)
    for _ in range(10000):
        reading = many.record(PureDP(0.01))
    assert reading.method == "zcdp-stitched"
    assert reading.loss.epsilon < 100
    assert many.count == 10000


def test_odometer_with_zcdp_and_rejects_approx() -> None:
    odo = PrivacyOdometer(1e-6)
    reading = odo.record(ZCDP(0.01))
    assert reading.method == "zcdp-stitched"
    assert reading.loss.epsilon >= ZCDP(0.01).to_approx(1e-6).epsilon
    with pytest.raises(InvalidParameterError):
        odo.record(ApproxDP(0.1, 1e-9))
    assert odo.reading() == reading
    assert PrivacyOdometer(1e-6).reading().loss.epsilon == 0
