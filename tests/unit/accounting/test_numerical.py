"""RDP / PLD accounting through dp-accounting, next to exact zCDP: the tightest is reported."""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import pytest
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.privacy_accountant import NeighboringRelation
from dp_accounting.rdp import rdp_privacy_accountant

from dpkit.accounting import (
    composed,
    gaussian_event,
    gdp_epsilon,
    gdp_mu,
    laplace_event,
    numerical_epsilon,
    pld_epsilon,
    poisson_subsampled,
    randomized_response_event,
    rdp_epsilon,
    self_composed,
    zcdp_epsilon,
)
from dpkit.core._losses import ZCDP
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
    event = self_composed(gaussian_event(100.0), 1000)
    result = numerical_epsilon(event, 1e-6, methods=("pure", "zcdp", "rdp", "pld"))
    assert set(result.epsilons) == {"zcdp", "rdp", "pld"}
    assert "pure" in result.errors
    assert result.loss.epsilon == min(result.epsilons.values())
    assert result.method == "pld"
    assert result.loss.delta == Fraction(1, 10**6)
    auto = numerical_epsilon(event, 1e-6)  # Gaussians only: the exact closed form, alone
    assert auto.method == "gdp" and set(auto.epsilons) == {"gdp"}
    assert "μ-GDP" in auto.detail and "gdp" in str(auto)
    assert auto.loss.epsilon <= result.loss.epsilon


def test_subsampled_and_laplace_skip_zcdp() -> None:
    event = self_composed(poisson_subsampled(gaussian_event(1.0), 0.01), 100)
    sub = numerical_epsilon(event, 1e-5, methods=("pure", "zcdp", "rdp", "pld"))
    assert "zcdp" in sub.errors and set(sub.epsilons) == {"rdp", "pld"}
    auto = numerical_epsilon(event, 1e-5)
    assert auto.method == "pld" and auto.loss.epsilon <= sub.epsilons["rdp"]
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


# --- exact μ-GDP closed form ------------------------------------------------------------------


def _gdp_delta_exact(epsilon: float, mu: float) -> mpmath.mpf:
    """δ(ε) of μ-GDP in 60-digit arithmetic (the reference the float code is checked against)."""
    with mpmath.workdps(60):
        e, m = mpmath.mpf(epsilon), mpmath.mpf(mu)
        return mpmath.ncdf(-e / m + m / 2) - mpmath.exp(e) * mpmath.ncdf(-e / m - m / 2)


def _check_gdp(eps: float, mu: float, delta: float) -> None:
    """Conservative (δ(ε) ≤ δ, exactly) and tight (slightly smaller ε violates δ)."""
    assert _gdp_delta_exact(eps, mu) <= delta
    assert _gdp_delta_exact(eps * (1 - 1e-7), mu) > delta


GDP_CASES = [
    ([1.0] * 1000, 1e-6),  # the issue's benchmark case: μ = sqrt(1000)
    ([100.0] * 1000, 1e-6),
    ([0.5, 1.0, 2.0, 4.0, 8.0], 1e-5),  # heterogeneous
    ([3.0] * 7 + [0.7], 1e-9),
    ([50.0], 1e-3),
]


@pytest.mark.parametrize(("multipliers", "delta"), GDP_CASES)
def test_gdp_is_exact_conservative_and_tight(multipliers: list[float], delta: float) -> None:
    event = composed([gaussian_event(z) for z in multipliers])
    mu = math.sqrt(sum(1 / z**2 for z in multipliers))
    assert gdp_mu(event) == pytest.approx(mu, rel=1e-11)
    assert gdp_mu(event) >= mu  # rounded up
    _check_gdp(float(gdp_epsilon(event, delta)), mu, delta)


def test_gdp_checker_rejects_a_broken_variant() -> None:
    """The conservativeness check fails on a root rounded down, and on μ without the sqrt."""
    mu, delta = math.sqrt(1000), 1e-6
    good = float(gdp_epsilon(self_composed(gaussian_event(1.0), 1000), delta))
    with pytest.raises(AssertionError):
        _check_gdp(good * (1 - 1e-6), mu, delta)
    broken_mu = 1000**0.25  # "μ = (Σ μ_i²)^(1/4)"
    broken = float(gdp_epsilon(gaussian_event(1 / broken_mu), delta))
    with pytest.raises(AssertionError):
        _check_gdp(broken, mu, delta)


def test_gdp_issue_figure_and_homogeneous_equals_self_composed() -> None:
    event = self_composed(gaussian_event(1.0), 1000)
    assert round(float(gdp_epsilon(event, 1e-6)), 3) == 649.385
    hetero = composed(
        [self_composed(gaussian_event(1.0), 500), self_composed(gaussian_event(1.0), 500)]
    )
    assert gdp_epsilon(hetero, 1e-6) == gdp_epsilon(event, 1e-6)
    assert gdp_epsilon(gaussian_event(1e6), 0.5) == 0  # δ(0) < δ: ε = 0
    assert gdp_mu(composed([laplace_event(1.0), gaussian_event(1.0)])) is None
    with pytest.raises(UnsupportedQueryError):
        gdp_epsilon(laplace_event(1.0), 1e-6)


@pytest.mark.parametrize(
    ("multipliers", "delta"),
    [([2.0] * 10, 1e-6), ([0.8, 1.5, 3.0], 1e-5), ([100.0] * 1000, 1e-6)],
)
def test_gdp_agrees_with_dp_accounting_pld(multipliers: list[float], delta: float) -> None:
    """dp-accounting's own PLD (fine grid, pessimistic) is within 1e-4 relative, and above."""
    accountant = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    for z in sorted(set(multipliers)):  # self-composed: the accountant merges those exactly
        accountant.compose(self_composed(gaussian_event(z), multipliers.count(z)))
    reference = accountant.get_epsilon(delta)
    ours = float(gdp_epsilon(composed([gaussian_event(z) for z in multipliers]), delta))
    assert ours <= reference * (1 + 1e-8)  # ours is exact + 1e-9; PLD agrees to float error
    assert ours == pytest.approx(reference, rel=1e-4)


# --- mixed compositions: PLD with connect-the-dots ---------------------------------------------


def _mixed() -> object:
    return composed(
        [
            self_composed(laplace_event(10.0), 20),
            self_composed(gaussian_event(3.0), 5),
            gaussian_event(6.0),
            self_composed(poisson_subsampled(gaussian_event(1.0), 0.02), 200),
        ]
    )


def _fine_reference(interval: float) -> float:
    """The same composition with dp-accounting's PLD, every leaf on its own, finer grid."""
    parts = [
        pld_lib.from_laplace_mechanism(10.0, value_discretization_interval=interval).self_compose(
            20
        ),
        pld_lib.from_gaussian_mechanism(3.0 / math.sqrt(5), value_discretization_interval=interval),
        pld_lib.from_gaussian_mechanism(6.0, value_discretization_interval=interval),
        pld_lib.from_gaussian_mechanism(
            1.0, sampling_prob=0.02, value_discretization_interval=interval
        ).self_compose(200),
    ]
    total = parts[0]
    for part in parts[1:]:
        total = total.compose(part)
    return float(total.get_epsilon_for_delta(1e-6))


def test_mixed_uses_pld_and_is_conservative_and_tight() -> None:
    result = numerical_epsilon(_mixed(), 1e-6)
    assert result.method == "pld" and "connect-the-dots" in result.detail
    assert set(result.epsilons) == {"rdp", "pld"} and "pure" in result.errors
    ours = float(result.loss.epsilon)
    reference = _fine_reference(5e-5)  # 2x finer than the auto interval (1e-4 here)
    assert ours >= reference  # never below a much finer (tighter) pessimistic PLD
    assert ours <= reference * (1 + 1e-4)
    assert ours < float(result.epsilons["rdp"])


def test_mixed_conservativeness_check_can_fail() -> None:
    """The same comparison rejects a coarse optimistic PLD (which under-reports ε)."""
    optimistic = pld_lib.from_laplace_mechanism(
        10.0, value_discretization_interval=1e-2, pessimistic_estimate=False, use_connect_dots=False
    ).self_compose(20)
    assert float(optimistic.get_epsilon_for_delta(1e-6)) < float(
        pld_epsilon(
            self_composed(laplace_event(10.0), 20), 1e-6, value_discretization_interval=1e-4
        )
    )


def test_randomized_response_needs_replace() -> None:
    rr = self_composed(randomized_response_event(0.5, 4), 10)
    mixed = composed([rr, gaussian_event(2.0)])
    result = numerical_epsilon(mixed, 1e-6, neighbouring="replace")
    assert result.method == "pld"
    reference = (
        pld_lib.from_randomized_response(
            0.5,
            4,
            value_discretization_interval=1e-5,
            neighboring_relation=NeighboringRelation.REPLACE_ONE,
        )
        .self_compose(10)
        .compose(pld_lib.from_gaussian_mechanism(2.0, value_discretization_interval=1e-5))
        .get_epsilon_for_delta(1e-6)
    )
    assert float(result.loss.epsilon) >= reference
    # randomized response has a discrete PLD: its 10 runs are composed exactly and rounded
    # once (< h); the finer reference rounds each of its 10 runs (< 10 x 1e-5)
    h = float(result.detail.rsplit(" ", 1)[1])
    assert float(result.loss.epsilon) <= reference + h + 10 * 1e-5
    # a Gaussian's noise multiplier is relative to the sensitivity under the relation used
    alone = numerical_epsilon(gaussian_event(2.0), 1e-6, neighbouring="replace")
    assert alone.epsilons["gdp"] == numerical_epsilon(gaussian_event(2.0), 1e-6).epsilons["gdp"]
    with pytest.raises(UnsupportedQueryError):
        numerical_epsilon(rr, 1e-6, methods=("pld",))  # add/remove: RR is not defined there
    with pytest.raises(InvalidParameterError):
        randomized_response_event(0.0, 4)
    with pytest.raises(InvalidParameterError):
        randomized_response_event(0.5, 1)


@pytest.mark.parametrize(("p", "buckets", "runs"), [(0.5, 2, 10), (0.9, 3, 50), (0.5, 4, 7)])
def test_composed_randomized_response_is_rounded_once(p: float, buckets: int, runs: int) -> None:
    """Exact k-fold RR, rounded once: above a fine reference, within one coarse step of it,
    and never looser than composing k coarse single-run PLDs (what dp-accounting does)."""
    relation = NeighboringRelation.REPLACE_ONE
    coarse = 1e-2
    ours = float(
        pld_epsilon(
            self_composed(randomized_response_event(p, buckets), runs),
            1e-6,
            value_discretization_interval=coarse,
            neighbouring="replace",
        )
    )

    def composed_pld(interval: float) -> float:
        one = pld_lib.from_randomized_response(
            p, buckets, value_discretization_interval=interval, neighboring_relation=relation
        )
        return float(one.self_compose(runs).get_epsilon_for_delta(1e-6))

    fine = composed_pld(1e-5)
    assert fine <= ours <= fine + coarse + runs * 1e-5
    assert ours <= composed_pld(coarse) * (1 + 1e-8)  # ours is rounded up by 1e-9
