"""RDP / PLD accounting through dp-accounting, next to exact zCDP: the tightest is reported."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from dpkit.accounting import (
    composed,
    gaussian_event,
    laplace_event,
    numerical_epsilon,
    pld_epsilon,
    poisson_subsampled,
    rdp_epsilon,
    self_composed,
    zcdp_epsilon,
)
from dpkit.core.losses import ZCDP
from dpkit.errors import InvalidParameterError, UnsupportedQueryError


def test_matches_dp_accounting_called_directly_and_rounds_up() -> None:
    event = self_composed(gaussian_event(100.0), 1000)
    direct_rdp = rdp_privacy_accountant.RdpAccountant()
    direct_rdp.compose(event)
    direct_pld = pld_privacy_accountant.PLDAccountant()
    direct_pld.compose(event)
    ours_rdp = rdp_epsilon(event, 1e-6)
    ours_pld = pld_epsilon(event, 1e-6)
    assert float(ours_rdp) >= direct_rdp.get_epsilon(1e-6)
    assert float(ours_rdp) == pytest.approx(direct_rdp.get_epsilon(1e-6), rel=1e-8)
    assert float(ours_pld) >= direct_pld.get_epsilon(1e-6)
    assert float(ours_pld) == pytest.approx(direct_pld.get_epsilon(1e-6), rel=1e-8)


def test_zcdp_is_exact_for_gaussians() -> None:
    event = composed([self_composed(gaussian_event(2.0), 3), gaussian_event(4.0)])
    rho = 3 * Fraction(1, 8) + Fraction(1, 32)
    assert zcdp_epsilon(event, 1e-6) == ZCDP(rho).to_approx(1e-6).epsilon
    assert zcdp_epsilon(dp_event.ZCDpEvent(0.5), 1e-6) == ZCDP(0.5).to_approx(1e-6).epsilon
    with pytest.raises(UnsupportedQueryError):
        zcdp_epsilon(laplace_event(1.0), 1e-6)


def test_tightest_is_reported() -> None:
    result = numerical_epsilon(self_composed(gaussian_event(100.0), 1000), 1e-6)
    assert set(result.epsilons) == {"zcdp", "rdp", "pld"}
    assert "pure" in result.errors
    assert result.loss.epsilon == min(result.epsilons.values())
    assert result.method == "pld"
    assert result.loss.delta == Fraction(1, 10**6)


def test_subsampled_and_laplace_skip_zcdp() -> None:
    sub = numerical_epsilon(self_composed(poisson_subsampled(gaussian_event(1.0), 0.01), 100), 1e-5)
    assert "zcdp" in sub.errors and set(sub.epsilons) == {"rdp", "pld"}
    lap = numerical_epsilon(self_composed(laplace_event(10.0), 10), 1e-5)
    assert lap.epsilons["pure"] == Fraction(1)  # 10 x ε = 1/10, exactly
    assert lap.loss.epsilon <= 1  # never worse than basic composition
    assert math.isfinite(float(lap.loss.epsilon))


def test_bad_inputs() -> None:
    with pytest.raises(InvalidParameterError):
        gaussian_event(0)
    with pytest.raises(InvalidParameterError):
        laplace_event(math.nan)
    with pytest.raises(InvalidParameterError):
        poisson_subsampled(gaussian_event(1.0), 1.5)
    with pytest.raises(InvalidParameterError):
        self_composed(gaussian_event(1.0), 0)
    with pytest.raises(InvalidParameterError):
        composed([])
    with pytest.raises(InvalidParameterError):
        numerical_epsilon(gaussian_event(1.0), 0)
