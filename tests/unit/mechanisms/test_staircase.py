"""The staircase mechanism: closed forms, the lattice distribution, its exact sampler, the map."""

from __future__ import annotations

import doctest
import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from scipy import integrate, optimize, stats

import dpkit.noise._exact as exact_noise
from dpkit.core._losses import PureDP
from dpkit.errors import InvalidDataError, InvalidParameterError
from dpkit.mechanisms import _staircase as staircase_module
from dpkit.mechanisms._staircase import (
    DiscreteStaircase,
    make_staircase,
    staircase_expected_abs,
    staircase_optimal_gamma,
    staircase_variance,
)
from dpkit.noise._distributions import GridNoise, TieredLatticeNoise
from dpkit.noise._grid import grid_spacing

P_THRESHOLD = 1e-6  # goodness-of-fit tests fail only below this p-value: not flaky
BAD_COST: Any = "linf"


# ----------------------------------------------------------------------- continuous staircase
def _density_moments(delta: float, eps: float, gamma: float) -> tuple[float, float, float]:
    """∫f, ∫|x|f and ∫x²f of the continuous staircase density, by numeric integration."""
    b = math.exp(-eps)
    height = (1 - b) / (2 * delta * (gamma + (1 - gamma) * b))
    mass = first = second = 0.0
    periods = math.ceil(60 / eps) + 2  # the rest weighs < e^-60
    for k in range(periods):
        for low, high, weight in (
            (k, k + gamma, b**k),
            (k + gamma, k + 1, b ** (k + 1)),
        ):
            a, c = low * delta, high * delta
            value = height * weight
            mass += 2 * integrate.quad(lambda x, v=value: v, a, c)[0]
            first += 2 * integrate.quad(lambda x, v=value: x * v, a, c)[0]
            second += 2 * integrate.quad(lambda x, v=value: x * x * v, a, c)[0]
    return mass, first, second


@pytest.mark.parametrize(
    ("delta", "eps", "gamma"),
    [(1.0, 1.0, 0.3), (2.5, 0.5, 0.7), (0.3, 3.0, 0.05), (1.0, 0.2, 0.5), (4.0, 8.0, 0.9)],
)
def test_closed_forms_match_numeric_integration(delta: float, eps: float, gamma: float) -> None:
    mass, first, second = _density_moments(delta, eps, gamma)
    assert mass == pytest.approx(1.0, rel=1e-9)
    assert staircase_expected_abs(delta, eps, gamma) == pytest.approx(first, rel=1e-9)
    assert staircase_variance(delta, eps, gamma) == pytest.approx(second, rel=1e-9)


@pytest.mark.parametrize("eps", [0.001, 0.01, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0])
@pytest.mark.parametrize("delta", [0.25, 1.0, 3.7])
def test_l1_optimum_attains_geng_viswanath_bound(eps: float, delta: float) -> None:
    gamma = staircase_optimal_gamma(eps, "l1")
    assert gamma == pytest.approx(1 / (1 + math.exp(eps / 2)), rel=1e-14)
    bound = delta * math.exp(eps / 2) / math.expm1(eps)
    assert staircase_expected_abs(delta, eps, gamma) == pytest.approx(bound, rel=1e-12)


def _numeric_argmin(function: Any) -> float:
    result = optimize.minimize_scalar(
        function, bounds=(1e-12, 1 - 1e-12), method="bounded", options={"xatol": 1e-12}
    )
    return float(result.x)


@pytest.mark.parametrize("eps", [0.05, 0.3, 1.0, 2.0, 4.0, 7.0, 12.0])
def test_l2_gamma_closed_form_minimises_variance(eps: float) -> None:
    gamma = staircase_optimal_gamma(eps, "l2")
    # the closed form as printed in Geng & Viswanath (2016), before our stable rewriting
    b = math.exp(-eps)
    printed = -b / (1 - b) + (b - 2 * b**2 + 2 * b**4 - b**5) ** (1 / 3) / (
        2 ** (1 / 3) * (1 - b) ** 2
    )
    assert gamma == pytest.approx(printed, rel=1e-7)
    numeric = _numeric_argmin(lambda g: staircase_variance(1.0, eps, g))
    assert gamma == pytest.approx(numeric, rel=1e-4)
    best = staircase_variance(1.0, eps, gamma)
    assert best <= staircase_variance(1.0, eps, numeric) * (1 + 1e-12)
    for nearby in (gamma * (1 - 1e-3), gamma * (1 + 1e-3)):
        assert best <= staircase_variance(1.0, eps, nearby)


@pytest.mark.parametrize("eps", [0.1, 1.0, 3.0, 9.0])
def test_l1_gamma_minimises_expected_abs(eps: float) -> None:
    gamma = staircase_optimal_gamma(eps, "l1")
    numeric = _numeric_argmin(lambda g: staircase_expected_abs(1.0, eps, g))
    assert gamma == pytest.approx(numeric, rel=1e-4)


def test_optimal_gamma_limits() -> None:
    for cost in ("l1", "l2"):
        assert staircase_optimal_gamma(1e-9, cost) == pytest.approx(0.5, abs=1e-8)
        assert 0 < staircase_optimal_gamma(2000, cost) < 1e-200
    assert staircase_optimal_gamma(60, "l2") == pytest.approx(
        (math.exp(-60) / 2) ** (1 / 3), rel=1e-9
    )
    assert staircase_optimal_gamma(Fraction(1, 2)) == staircase_optimal_gamma(0.5)


# ------------------------------------------------------------------------ lattice staircase
LATTICES = [
    (5, 2, Fraction(1)),
    (1, 1, Fraction(1, 2)),
    (7, 7, Fraction(3, 10)),
    (4, 1, Fraction(3)),
    (10, 3, Fraction(1, 10)),
    (6, 5, Fraction(25)),
]


def _brute_pmf(lattice: DiscreteStaircase) -> tuple[np.ndarray, np.ndarray]:
    """The pmf on a window holding all but e^-60 of the mass, by direct summation."""
    periods = math.ceil(60 / float(lattice.epsilon)) + 2
    radius = lattice.period * periods
    k = np.arange(-radius, radius + 1)
    weights = np.exp(-float(lattice.epsilon) * lattice.level(k).astype(np.float64))
    return k, weights / weights.sum()


@pytest.mark.parametrize(("period", "first", "eps"), LATTICES)
def test_lattice_closed_forms_match_brute_force(period: int, first: int, eps: Fraction) -> None:
    lattice = DiscreteStaircase(period, first, eps)
    k, pmf = _brute_pmf(lattice)
    np.testing.assert_allclose(np.exp(lattice.log_pmf(k)), pmf, rtol=1e-11, atol=1e-300)
    assert lattice.expected_abs() == pytest.approx(float(np.sum(np.abs(k) * pmf)), rel=1e-11)
    assert lattice.variance() == pytest.approx(float(np.sum(k.astype(float) ** 2 * pmf)), rel=1e-11)
    np.testing.assert_allclose(lattice.cdf(k), np.cumsum(pmf), rtol=1e-11, atol=1e-14)
    assert lattice.cdf(np.array([-(10**30)]))[0] == 0.0
    assert lattice.cdf(np.array([10**30]))[0] == 1.0
    for alpha in (0.9, 0.5, 0.1, 0.01, 1e-6):
        outside = 2 * (0.5 - np.cumsum(pmf[k >= 0]) + pmf[k == 0] / 2)  # P(|Z| > h), h = 0, 1, …
        expected = int(np.argmax(outside <= alpha * (1 + 1e-9)))
        assert lattice.tail_bound(alpha) == expected
        assert lattice.support_radius(alpha) == expected


@pytest.mark.parametrize("period", [1, 2, 3, 4, 6])
def test_levels_change_by_at_most_one_per_period(period: int) -> None:
    k = np.arange(-60, 61)
    for first in range(1, period + 1):
        lattice = DiscreteStaircase(period, first, Fraction(1))
        levels = lattice.level(k)
        assert lattice.level(np.array([0]))[0] == 0
        for s in range(-3 * period, 3 * period + 1):
            jump = np.abs(lattice.level(k + s) - levels)
            assert int(jump.max()) <= math.ceil(abs(s) / period)
            if abs(s) <= period:
                assert int(jump.max()) <= 1
        right, left = k[k >= 0], k[k <= 0]
        np.testing.assert_array_equal(lattice.level(right + period), lattice.level(right) + 1)
        np.testing.assert_array_equal(lattice.level(left - period), lattice.level(left) + 1)


def test_lattice_declares_tiered_structure() -> None:
    lattice = DiscreteStaircase(5, 2, Fraction(1))
    assert isinstance(lattice, TieredLatticeNoise)
    assert (lattice.rate, lattice.tail_start, lattice.period, lattice.level_step) == (
        Fraction(1),
        0,
        5,
        1,
    )
    # log pmf really is const - rate·level
    k = np.arange(-30, 31)
    np.testing.assert_allclose(
        lattice.log_pmf(k) - lattice.log_pmf(np.array([0])),
        -lattice.level(k).astype(float),
        atol=1e-12,
    )


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"period": 0, "first_step": 1, "epsilon": 1}, "period"),
        ({"period": 2.0, "first_step": 1, "epsilon": 1}, "period"),
        ({"period": 5, "first_step": 0, "epsilon": 1}, "first_step"),
        ({"period": 5, "first_step": 6, "epsilon": 1}, "first_step"),
        ({"period": 5, "first_step": True, "epsilon": 1}, "first_step"),
        ({"period": 5, "first_step": 2, "epsilon": 0}, "epsilon"),
        ({"period": 5, "first_step": 2, "epsilon": float("nan")}, "epsilon"),
    ],
)
def test_lattice_rejects_bad_parameters(kwargs: dict[str, Any], parameter: str) -> None:
    with pytest.raises(InvalidParameterError) as info:
        DiscreteStaircase(**kwargs)
    assert info.value.parameter == parameter


def _chi_square_pvalue(lattice: DiscreteStaircase, samples: np.ndarray) -> float:
    """χ² of the sample against the exact pmf: single points while n·p >= 5, pooled tails."""
    n = samples.size
    radius = 0
    while n * math.exp(float(lattice.log_pmf(np.array([radius + 1]))[0])) >= 5:
        radius += 1
    k = np.arange(-radius, radius + 1)
    expected = n * np.exp(lattice.log_pmf(k))
    tail = n * float(lattice.cdf(np.array([-radius - 1]))[0])
    observed = np.array([np.count_nonzero(samples == v) for v in k])
    low, high = np.count_nonzero(samples < -radius), np.count_nonzero(samples > radius)
    if tail >= 5:
        observed = np.concatenate([[low], observed, [high]])
        expected = np.concatenate([[tail], expected, [tail]])
    else:
        observed[0] += low
        observed[-1] += high
        expected[0] += tail
        expected[-1] += tail
    expected *= n / expected.sum()
    return float(stats.chisquare(observed, expected).pvalue)


def test_sampler_matches_pmf() -> None:
    lattice = DiscreteStaircase(5, 2, Fraction(1))
    samples = lattice.sample(200_000)
    assert samples.dtype == np.int64 and samples.shape == (200_000,)
    assert _chi_square_pvalue(lattice, samples) > P_THRESHOLD
    assert float(np.mean(np.abs(samples))) == pytest.approx(lattice.expected_abs(), rel=0.02)


def test_sampler_matches_pmf_when_rejection_is_batched() -> None:
    # acceptance (1 + 49e^-6)/50 ≈ 0.022: many proposals per element in each round
    lattice = DiscreteStaircase(50, 1, Fraction(6))
    samples = lattice.sample(20_000)
    assert _chi_square_pvalue(lattice, samples) > P_THRESHOLD


def test_sampler_edge_cases() -> None:
    assert DiscreteStaircase(3, 3, Fraction(2)).sample(0).shape == (0,)
    flat = DiscreteStaircase(3, 3, Fraction(2)).sample(20_000)  # m = D: no rejection at all
    assert _chi_square_pvalue(DiscreteStaircase(3, 3, Fraction(2)), flat) > P_THRESHOLD
    with pytest.raises(InvalidParameterError):
        DiscreteStaircase(3, 1, Fraction(1)).sample(-1)


def test_exact_path_sampler_agrees() -> None:
    lattice = DiscreteStaircase(5, 2, Fraction(1))
    previous = exact_noise._FORCE_EXACT
    exact_noise._FORCE_EXACT = True
    try:
        samples = lattice.sample(3_000)
    finally:
        exact_noise._FORCE_EXACT = previous
    assert _chi_square_pvalue(lattice, samples) > P_THRESHOLD


# ------------------------------------------------------------------------------ mechanism
@pytest.mark.parametrize("eps", [0.1, 0.5, 1.0, 2.0, 5.0])
@pytest.mark.parametrize("delta", [1.0, 3.0, 0.25])
def test_default_grid_accuracy_approaches_continuous_optimum(eps: float, delta: float) -> None:
    m = make_staircase(delta, eps)
    assert isinstance(m.noise, GridNoise)
    bound = delta * math.exp(eps / 2) / math.expm1(eps)
    assert m.noise.expected_abs() == pytest.approx(bound, rel=1e-4)
    assert m.noise.expected_abs() >= bound * (1 - 1e-5)  # cannot beat the optimum by much


@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_l2_cost_gives_the_optimal_variance(eps: float) -> None:
    m = make_staircase(1, eps, cost="l2")
    gamma = staircase_optimal_gamma(eps, "l2")
    assert m.info.gamma == gamma
    assert m.noise.variance() == pytest.approx(staircase_variance(1, eps, gamma), rel=1e-4)
    assert m.noise.variance() < make_staircase(1, eps).noise.variance()


def test_privacy_map() -> None:
    m = make_staircase(sensitivity=1, epsilon=Fraction(1, 2))
    half = Fraction(1, 2)
    assert m.loss == PureDP(half)
    assert m.map(0) == PureDP(0)
    assert m.map(Fraction(1, 3)) == PureDP(half)
    assert m.map(1) == PureDP(half)
    assert m.map(Fraction(3, 2)) == PureDP(1)
    assert m.map(2) == PureDP(1)
    assert m.map(7) == PureDP(Fraction(7, 2))
    g = grid_spacing(m.info.grid_exponent)
    assert m.info.period * g == 1
    # a sensitivity off the grid: the period is ⌈Δ/g⌉ steps
    odd = make_staircase(sensitivity=Fraction(1, 3), epsilon=1)
    g = grid_spacing(odd.info.grid_exponent)
    assert odd.info.period == math.ceil(Fraction(1, 3) / g)
    for d in (Fraction(1, 3), Fraction(2, 3), Fraction(1), Fraction(5, 3)):
        assert odd.map(d) == PureDP(math.ceil(d / (g * odd.info.period)))


def test_privacy_map_with_changed_coordinates() -> None:
    m = make_staircase(sensitivity=2, epsilon=1, changed_coordinates=4)
    assert m.noise.lattice.epsilon == Fraction(1, 4)
    assert m.loss == PureDP(1)  # 4 coordinates each jump at most one level
    assert m.map(0) == PureDP(0)
    assert m.map(Fraction(1, 100)) == PureDP(1)  # rounding can move all four
    assert m.map(4) == PureDP(Fraction(5, 4))
    assert m.info.changed_coordinates == 4


def test_exact_privacy_of_the_lattice_on_a_coarse_grid() -> None:
    # sensitivity 1 on the grid 2^-3: D = 8 steps; check every output and every shift <= D
    m = make_staircase(1, Fraction(7, 10), grid_exponent=-3)
    lattice = m.noise.lattice
    assert (lattice.period, lattice.first_step) == (8, round(8 * m.info.gamma))
    k = np.arange(-100, 101)
    worst = max(int(np.max(np.abs(lattice.level(k + s) - lattice.level(k)))) for s in range(1, 9))
    assert m.loss == PureDP(lattice.rate * worst) == PureDP(Fraction(7, 10))


def test_shapes_and_output_grid() -> None:
    m = make_staircase(1, 1, grid_exponent=-10)
    out = m(3.3)
    assert type(out) is float
    assert math.ldexp(out, 10) == round(math.ldexp(out, 10))
    vector = make_staircase(1, 1, changed_coordinates=1)
    data = np.linspace(-5, 5, 12)
    released = vector(data)
    assert isinstance(released, np.ndarray) and released.shape == (12,)
    assert released.dtype == np.float64
    scaled = np.ldexp(released, -vector.info.grid_exponent)
    np.testing.assert_array_equal(scaled, np.round(scaled))
    matrix = vector(data.reshape(3, 4))
    assert matrix.shape == (3, 4)
    assert make_staircase(1, 1)(np.array([2.0])).shape == (1,)


def test_arrays_need_changed_coordinates() -> None:
    with pytest.raises(InvalidDataError, match="changed_coordinates"):
        make_staircase(1, 1)(np.array([1.0, 2.0]))


def test_noise_is_centred_and_accurate() -> None:
    m = make_staircase(1, 2, changed_coordinates=1)
    released = m(np.zeros(20_000))
    assert float(np.mean(np.abs(released))) == pytest.approx(m.noise.expected_abs(), rel=0.05)
    assert abs(float(np.mean(released))) < 0.05


def test_info_and_explicit_gamma() -> None:
    m = make_staircase(2, 1, gamma=0.25, grid_exponent=-4)
    assert m.info.gamma == 0.25 and m.info.cost == "l1"
    assert m.info.grid_exponent == -4
    assert (m.info.period, m.info.first_step) == (32, 8)
    assert m.info.effective_gamma == 0.25
    tiny = make_staircase(1, 40)  # γ*·D < 1/2: the first step is one grid step
    assert tiny.info.first_step == 1
    assert tiny.loss == PureDP(40)


ERROR_CASES: list[tuple[dict[str, Any], str]] = [
    ({"sensitivity": 1, "epsilon": 0}, "epsilon"),
    ({"sensitivity": 1, "epsilon": -1}, "epsilon"),
    ({"sensitivity": 1, "epsilon": float("nan")}, "epsilon"),
    ({"sensitivity": 1, "epsilon": float("inf")}, "epsilon"),
    ({"sensitivity": 0, "epsilon": 1}, "sensitivity"),
    ({"sensitivity": -2, "epsilon": 1}, "sensitivity"),
    ({"sensitivity": float("nan"), "epsilon": 1}, "sensitivity"),
    ({"sensitivity": 1, "epsilon": 1, "gamma": 0}, "gamma"),
    ({"sensitivity": 1, "epsilon": 1, "gamma": 1}, "gamma"),
    ({"sensitivity": 1, "epsilon": 1, "gamma": -0.1}, "gamma"),
    ({"sensitivity": 1, "epsilon": 1, "gamma": 1.5}, "gamma"),
    ({"sensitivity": 1, "epsilon": 1, "gamma": float("nan")}, "gamma"),
    ({"sensitivity": 1, "epsilon": 1, "gamma": True}, "gamma"),
    ({"sensitivity": 1, "epsilon": 1, "gamma": "0.3"}, "gamma"),
    ({"sensitivity": 1, "epsilon": 1, "cost": "l3"}, "cost"),
    ({"sensitivity": 1, "epsilon": 1, "cost": "L1"}, "cost"),
    ({"sensitivity": 1, "epsilon": 1, "cost": None}, "cost"),
    ({"sensitivity": 1, "epsilon": 1, "grid_exponent": 1.5}, "grid_exponent"),
    ({"sensitivity": 1, "epsilon": 1, "grid_exponent": -60}, "grid_exponent"),
    ({"sensitivity": 1, "epsilon": 1, "changed_coordinates": 0}, "changed_coordinates"),
]


@pytest.mark.parametrize(("kwargs", "parameter"), ERROR_CASES)
def test_make_staircase_rejects_bad_input(kwargs: dict[str, Any], parameter: str) -> None:
    with pytest.raises(InvalidParameterError) as info:
        make_staircase(**kwargs)
    assert info.value.parameter == parameter
    assert parameter in str(info.value)


@pytest.mark.parametrize(
    ("call", "parameter"),
    [
        (lambda: staircase_optimal_gamma(0), "epsilon"),
        (lambda: staircase_optimal_gamma(float("nan")), "epsilon"),
        (lambda: staircase_optimal_gamma(1, BAD_COST), "cost"),
        (lambda: staircase_expected_abs(0, 1, 0.5), "sensitivity"),
        (lambda: staircase_expected_abs(1, -1, 0.5), "epsilon"),
        (lambda: staircase_expected_abs(1, 1, 1.0), "gamma"),
        (lambda: staircase_variance(1, 1, 0.0), "gamma"),
        (lambda: staircase_variance(1, 1, float("nan")), "gamma"),
    ],
)
def test_analytics_reject_bad_input(call: Any, parameter: str) -> None:
    with pytest.raises(InvalidParameterError) as info:
        call()
    assert info.value.parameter == parameter


def test_docstring_examples() -> None:
    result = doctest.testmod(staircase_module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
