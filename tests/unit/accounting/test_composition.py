"""Composition rules: exact sequential/parallel, DRV advanced, KOV optimal, zCDP, best-of."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from dpkit.accounting import (
    advanced_composition,
    basic_composition,
    best_composition,
    optimal_homogeneous_composition,
    optimal_homogeneous_delta,
    parallel_composition,
    postprocess,
    sequential_composition,
    zcdp_composition,
)
from dpkit.core._losses import ZCDP, ApproxDP, PureDP
from dpkit.errors import InvalidParameterError


def test_sequential_parallel_postprocess_exact() -> None:
    assert sequential_composition(PureDP(0.5), PureDP(0.3), PureDP(0.2)) == PureDP(1)
    assert sequential_composition(ApproxDP(0.1, 1e-6), PureDP(0.2)) == ApproxDP(0.3, 1e-6)
    assert sequential_composition(ZCDP(0.1), PureDP(1)) == ZCDP(Fraction(6, 10))
    assert parallel_composition(PureDP(0.5), PureDP(0.3)) == PureDP(0.5)
    assert postprocess(ApproxDP(1, 1e-9)) == ApproxDP(1, 1e-9)
    assert basic_composition(PureDP(0.01), 100) == PureDP(1)
    assert basic_composition(ApproxDP(0.1, 1e-6), 10) == ApproxDP(1, 1e-5)
    assert basic_composition(ZCDP(0.5), 3) == ZCDP(1.5)


def _drv_float(eps: float, k: int, delta_prime: float) -> float:
    return math.sqrt(2 * k * math.log(1 / delta_prime)) * eps + k * eps * (math.exp(eps) - 1)


@pytest.mark.parametrize(("eps", "k", "dp"), [(0.1, 100, 1e-6), (0.01, 1000, 1e-9), (1, 5, 0.01)])
def test_advanced_composition_matches_formula_rounded_up(eps: float, k: int, dp: float) -> None:
    bound = advanced_composition(PureDP(eps), k, delta_prime=dp)
    exact_float = _drv_float(eps, k, dp)
    assert float(bound.epsilon) >= exact_float * (1 - 1e-12)
    assert float(bound.epsilon) == pytest.approx(exact_float, rel=1e-12)
    assert bound.delta == Fraction(str(dp))


def test_advanced_composition_heterogeneous_and_delta() -> None:
    bound = advanced_composition([ApproxDP(0.1, 1e-7), ApproxDP(0.2, 1e-7)], delta_prime=1e-6)
    assert bound.delta == Fraction(12, 10**7)
    expected = (
        math.sqrt(2 * math.log(1e6) * 0.05) + 0.1 * (math.exp(0.1) - 1) + 0.2 * (math.exp(0.2) - 1)
    )
    assert float(bound.epsilon) == pytest.approx(expected, rel=1e-12)
    with pytest.raises(InvalidParameterError):
        advanced_composition(PureDP(0.1), 0, delta_prime=1e-6)
    with pytest.raises(InvalidParameterError):
        advanced_composition(ZCDP(0.1), 3, delta_prime=1e-6)
    with pytest.raises(InvalidParameterError):
        advanced_composition([PureDP(0.1)], 3, delta_prime=1e-6)


def _kov_delta_float(eps: float, delta: float, k: int, eps_prime: float) -> float:
    total = 0.0
    for ell in range(k + 1):
        term = math.exp((k - ell) * eps) - math.exp(eps_prime + ell * eps)
        if term > 0:
            total += math.comb(k, ell) * term / (1 + math.exp(eps)) ** k
    return 1 - (1 - delta) ** k * (1 - total)


@pytest.mark.parametrize(
    ("eps", "delta", "k", "target"),
    [(0.1, 0, 10, 1e-5), (0.1, 0, 100, 1e-6), (0.5, 1e-8, 30, 1e-5), (1.0, 0, 1, 0.01)],
)
def test_optimal_homogeneous_is_tight_and_certified(
    eps: float, delta: float, k: int, target: float
) -> None:
    result = optimal_homogeneous_composition(ApproxDP(eps, delta), k, delta=target)
    eps_prime = float(result.epsilon)
    # Certified: the exact-arithmetic bound at the returned ε' is within the target ...
    assert optimal_homogeneous_delta(ApproxDP(eps, delta), k, result.epsilon) <= Fraction(
        str(target)
    )
    # ... agrees with an independent float evaluation of the formula ...
    assert _kov_delta_float(eps, delta, k, eps_prime) <= target * (1 + 1e-9)
    # ... and is tight: a slightly smaller ε' would need a larger δ.
    assert _kov_delta_float(eps, delta, k, eps_prime * (1 - 1e-6)) > target
    # It never loses to advanced or basic composition.
    assert result.epsilon <= k * Fraction(str(eps))


def test_kov_single_mechanism_matches_randomized_response() -> None:
    # One ε-DP mechanism is (ε', δ)-DP with δ = (e^ε - e^ε')/(1 + e^ε) (randomized response).
    result = optimal_homogeneous_composition(PureDP(0.5), 1, delta=0.01)
    x = math.exp(0.5) - 0.01 * (1 + math.exp(0.5))
    assert float(result.epsilon) == pytest.approx(math.log(x), rel=1e-9)


def test_kov_beats_drv_and_rejects_impossible_delta() -> None:
    kov = optimal_homogeneous_composition(PureDP(0.1), 100, delta=1e-6)
    drv = advanced_composition(PureDP(0.1), 100, delta_prime=1e-6)
    assert kov.epsilon < drv.epsilon < 10
    with pytest.raises(InvalidParameterError):
        optimal_homogeneous_composition(ApproxDP(0.1, 1e-3), 10, delta=1e-3)
    assert optimal_homogeneous_composition(PureDP(0.1), 3, delta=0.999).epsilon == 0


def test_zcdp_composition_converts() -> None:
    assert zcdp_composition([ZCDP(0.1), PureDP(1)]) == ZCDP(Fraction(6, 10))
    converted = zcdp_composition([ZCDP(0.1)] * 10, delta=1e-6)
    assert converted == ZCDP(1).to_approx(1e-6)
    with pytest.raises(InvalidParameterError):
        zcdp_composition([ApproxDP(0.1, 1e-9)])
    with pytest.raises(InvalidParameterError):
        zcdp_composition([])


def test_best_composition_reports_all_rules() -> None:
    bound = best_composition([PureDP(0.1)] * 100, delta=1e-6)
    assert set(bound.candidates) == {"basic", "advanced", "optimal", "zcdp"}
    assert bound.method == "optimal"
    assert bound.loss.epsilon == min(bound.candidates.values())
    few = best_composition([PureDP(0.5), PureDP(0.3)], delta=1e-6)
    assert few.method in ("basic", "zcdp")
    assert few.loss.epsilon <= Fraction(8, 10)
    zc = best_composition([ZCDP(0.01)] * 3, delta=1e-6)
    assert zc.method == "zcdp"
    assert "ε=" in str(zc)
    with pytest.raises(InvalidParameterError):
        best_composition([ApproxDP(0.1, 1e-3)] * 3, delta=1e-6)
