"""The ladder mechanism's public API: construction, guarantees, accuracy, verification, sums."""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from dpkit.core._losses import PureDP
from dpkit.core._spaces import SymmetricDistance
from dpkit.errors import InvalidDataError, InvalidParameterError, PrivacyCheckError
from dpkit.mechanisms._ladder_mechanism import (
    LadderLattice,
    check_ladder_privacy,
    ladder_density,
    ladder_expected_abs,
    ladder_optimal_delta,
    make_discrete_ladder,
    make_ladder,
    make_sum_in_intervals,
    normalize_neighbor_set,
)
from dpkit.mechanisms._staircase import staircase_expected_abs, staircase_optimal_gamma
from dpkit.noise._grid import grid_spacing

V1 = [(0, 1), (1000, 1001)]
V5 = [(0, 1), (100, 101)]


def _staircase_best(sensitivity: float, epsilon: float) -> float:
    return sensitivity * math.exp(epsilon / 2) / math.expm1(epsilon)


# ------------------------------------------------------------------ bad input (issue item 6)
@pytest.mark.parametrize(
    ("value", "parameter"),
    [
        ([], "neighbor_set"),
        ((), "neighbor_set"),
        ("0,1", "neighbor_set"),
        (5, "neighbor_set"),
        ([(-1, 2)], "neighbor_set[0][0]"),
        ([(0, 1), (-3, -2)], "neighbor_set[1][0]"),
        ([(0, math.inf)], "neighbor_set[0][1]"),
        ([(math.nan, 1)], "neighbor_set[0][0]"),
        ([-0.5], "neighbor_set[0]"),
        ([(2, 1)], "neighbor_set[0]"),
        ([(0, 1, 2)], "neighbor_set[0]"),
        ([("a", 1)], "neighbor_set[0][0]"),
        ([(0, 0)], "neighbor_set"),
        ([True], "neighbor_set[0]"),
    ],
)
def test_bad_neighbor_sets_are_refused(value: Any, parameter: str) -> None:
    with pytest.raises(InvalidParameterError) as info:
        normalize_neighbor_set(value)
    assert info.value.parameter == parameter
    with pytest.raises(InvalidParameterError):
        make_ladder(value, 1)


def test_negative_ends_get_an_actionable_hint() -> None:
    with pytest.raises(InvalidParameterError, match="pass magnitudes"):
        normalize_neighbor_set([(-3, -1)])


def test_unsorted_and_overlapping_intervals_are_normalised() -> None:
    got = normalize_neighbor_set([(1000, 1001), (0.5, 0.75), (0, 1), 3, (2, 3), (999, 1000)])
    expected = ((0, 1), (2, 3), (999, 1001))
    assert got == tuple((Fraction(a), Fraction(b)) for a, b in expected)
    # floats are widened outward: the low end down, the high end up
    ((lo, hi),) = normalize_neighbor_set([(0.3, 0.1 + 0.2)])
    assert lo == min(Fraction(3, 10), Fraction(0.3)) == Fraction(0.3)  # the binary value
    assert hi == max(Fraction("0.30000000000000004"), Fraction(0.1 + 0.2))
    same = make_ladder([(1000, 1001), (0, 1), (0.25, 0.5)], 1, delta=1)
    assert same.info.neighbor_set == ((0, 1), (1000, 1001))


@pytest.mark.parametrize("epsilon", [0, -1, math.inf, math.nan, 101, "x", True, None])
def test_epsilon_out_of_range_is_refused(epsilon: Any) -> None:
    with pytest.raises(InvalidParameterError) as info:
        make_ladder(V1, epsilon)
    assert info.value.parameter == "epsilon"


@pytest.mark.parametrize("delta", [-1, -0.001, math.inf, math.nan, "wide"])
def test_bad_delta_is_refused(delta: Any) -> None:
    with pytest.raises(InvalidParameterError) as info:
        make_ladder(V1, 1, delta)
    assert info.value.parameter == "delta"


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"max_levels": 0}, "max_levels"),
        ({"max_levels": 2.5}, "max_levels"),
        ({"grid_exponent": 2000}, "grid_exponent"),
        ({"grid_exponent": True}, "grid_exponent"),
        ({"grid_exponent": -40}, "grid_exponent"),  # 2^40 steps: too fine
    ],
)
def test_bad_options_are_refused(kwargs: dict[str, Any], parameter: str) -> None:
    with pytest.raises(InvalidParameterError) as info:
        make_ladder(V1, 1, **kwargs)
    assert info.value.parameter == parameter


def test_discrete_ladder_needs_integers() -> None:
    with pytest.raises(InvalidParameterError):
        make_discrete_ladder([(0, 1.5)], 1)
    with pytest.raises(InvalidParameterError):
        make_discrete_ladder([0, 3], 1, delta=Fraction(1, 2))  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError):
        make_discrete_ladder([0, 3], 1, delta=-1)


# ------------------------------------------------------------------ the mechanism
def test_make_ladder_is_a_measurement_with_the_claimed_loss() -> None:
    m = make_ladder(V1, 2)
    assert m.loss == PureDP(2)
    assert m.map(3) == PureDP(6)  # three records: group privacy
    assert m.input_metric == SymmetricDistance()
    assert m.name == "ladder"
    assert m.info.grid_exact is True
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.name = "x"  # type: ignore[misc]


def test_releases_are_on_the_grid_and_keep_the_shape() -> None:
    m = make_ladder(V1, 2)
    g = float(grid_spacing(m.info.grid_exponent))
    out = m(123.456789)
    assert isinstance(out, float)
    assert (out / g) == round(out / g)
    array = m(np.array([5.0]))
    assert isinstance(array, np.ndarray) and array.shape == (1,)
    with pytest.raises(InvalidDataError):
        m(np.array([1.0, 2.0]))
    with pytest.raises(InvalidDataError):
        m(math.nan)


def test_explicit_delta_is_rounded_to_the_grid() -> None:
    m = make_ladder(V1, 1, delta=10.3, grid_exponent=-2)
    assert m.info.delta == Fraction(41, 4)  # nearest multiple of 1/4
    assert m.info.delta_units == 41


def test_non_dyadic_ends_are_widened_to_the_grid() -> None:
    m = make_ladder([(0, 0.1), (1, 1.1)], 1, grid_exponent=-4)
    assert m.info.grid_exact is False
    assert m.info.neighbor_set_units == ((0, 2), (16, 18))
    check_ladder_privacy(m).raise_if_failed()


def test_staircase_is_the_special_case_v_equal_zero_to_delta() -> None:
    """Issue item 5: for V = [0, Δ] the ladder at its optimal δ is the staircase (rate 1)."""
    for sensitivity in (1, 7, 1001):
        for eps in (0.1, 0.5, 1.0, 2.0, 4.0, 8.0):
            delta, value = ladder_optimal_delta([(0, sensitivity)], eps)
            gamma = staircase_optimal_gamma(eps)
            assert delta == pytest.approx(gamma * sensitivity, rel=1e-6)
            assert value == pytest.approx(_staircase_best(sensitivity, eps), rel=1e-10)
            # the whole (δ, E|X|) curve coincides with the staircase's (γ = δ/Δ)
            for g in (0.05, 0.3, 0.5):
                got = ladder_expected_abs([(0, sensitivity)], [eps], [g * sensitivity])[0, 0]
                assert got == pytest.approx(staircase_expected_abs(sensitivity, eps, g), rel=1e-10)


def test_staircase_special_case_density_and_mechanism() -> None:
    eps = 1.0
    gamma = staircase_optimal_gamma(eps)
    density = ladder_density([(0, 1)], eps, Fraction(gamma).limit_denominator(2**20))
    assert density.levels.converged_at is not None and density.levels.converged_at <= 1
    x = np.linspace(-5.3, 5.3, 1001)
    y = np.abs(x)
    level = np.floor(y) + ((y % 1.0) >= density.levels.radius / 2 * float(density.unit))
    rho = math.exp(-eps)
    g = density.levels.radius / 2 * float(density.unit)
    staircase_pdf = (1 - rho) / (2 * (g + (1 - g) * rho)) * rho**level
    np.testing.assert_allclose(density.pdf(x), staircase_pdf, rtol=1e-12)
    # the released (grid) mechanism: exactly converged, and rate 1 up to the grid
    m = make_ladder([(0, 1)], eps)
    assert m.info.converged_at is not None
    assert m.info.rate == pytest.approx(1.0, abs=1e-5)


def test_the_ladder_beats_the_staircase_on_polarised_sets() -> None:
    m = make_ladder(V1, 4)
    assert m.info.rate == pytest.approx(0.3086, abs=2e-3)
    assert m.info.expected_abs < m.info.staircase_expected_abs < m.info.laplace_expected_abs


def test_chosen_delta_minimises_expected_abs() -> None:
    m = make_ladder(V5, 2)
    best = m.info.expected_abs
    g = float(grid_spacing(m.info.grid_exponent))
    for factor in (0.5, 0.9, 0.99, 1.01, 1.1, 2.0):
        other = make_ladder(V5, 2, delta=float(m.info.delta) * factor + g)
        assert other.info.expected_abs >= best * (1 - 1e-9)


def test_noise_summaries_are_consistent() -> None:
    m = make_ladder(V5, 1, grid_exponent=-2)
    noise = m.noise
    lattice = noise.lattice
    assert isinstance(lattice, LadderLattice)
    k = np.arange(-30_000, 30_001)  # 75 periods: the rest has mass below e^-70
    pmf = lattice.pmf(k)
    assert pmf.sum() == pytest.approx(1.0, abs=1e-12)
    assert float((np.abs(k) * pmf).sum()) == pytest.approx(lattice.expected_abs(), rel=1e-6)
    assert float((k.astype(float) ** 2 * pmf).sum()) == pytest.approx(lattice.variance(), rel=1e-4)
    cdf = lattice.cdf(k)
    np.testing.assert_allclose(np.diff(cdf), pmf[1:], atol=1e-13)
    h = lattice.tail_bound(0.05)
    assert 1 - (lattice.cdf(np.array([h]))[0] - lattice.cdf(np.array([-h - 1]))[0]) <= 0.05
    assert 1 - (lattice.cdf(np.array([h - 1]))[0] - lattice.cdf(np.array([-h]))[0]) > 0.05
    low, high = noise.confidence_interval(0.0, 0.05)
    assert high == pytest.approx(h * 0.25) and low == -high
    assert noise.expected_abs() == pytest.approx(m.info.expected_abs)


def test_declared_periodic_tail_holds() -> None:
    m = make_ladder(V5, 1, grid_exponent=-1, max_levels=10**5)
    lattice = m.noise.lattice
    start, period = lattice.tail_start, lattice.period
    k = np.arange(start, start + 3 * period)
    assert np.array_equal(lattice.level(k + period), lattice.level(k) + 1)
    assert np.array_equal(lattice.level(-k - period), lattice.level(-k) + 1)


def test_capped_construction_reports_its_distance_to_the_exact_ladder() -> None:
    exact = make_ladder(V1, 1, delta=48, grid_exponent=0, max_levels=10**5)
    capped = make_ladder(V1, 1, delta=48, grid_exponent=0)
    assert exact.info.converged_at is not None and exact.info.capped_at is None
    assert capped.info.capped_at is not None and capped.info.tv_to_uncapped < 2**-80
    assert capped.info.expected_abs == pytest.approx(exact.info.expected_abs, rel=1e-12)
    check_ladder_privacy(capped).raise_if_failed()


# ------------------------------------------------------------------ exact verification
def test_verification_proves_the_claim_for_every_shift() -> None:
    for m in (
        make_ladder(V1, 1, grid_exponent=-1),
        make_ladder(V5, 2, max_levels=10**5),
        make_discrete_ladder([0, 3, 5], 1, delta=1, max_levels=10**5),
        make_discrete_ladder([0, 5, 10], Fraction(1, 2)),
    ):
        result = check_ladder_privacy(m).raise_if_failed()
        assert result.realised == m.loss.epsilon  # type: ignore[union-attr]


def test_verification_fails_when_epsilon_is_understated() -> None:
    m = make_discrete_ladder([(0, 1), (10, 11)], 1, delta=1, max_levels=10**5)
    lattice = m.info.ladder_noise
    units = m.info.neighbor_set_units
    assert check_ladder_privacy(lattice, shifts=units, claimed_epsilon=1).passed
    result = check_ladder_privacy(lattice, shifts=units, claimed_epsilon=Fraction(9, 10))
    assert not result.passed and result.realised == 1
    with pytest.raises(PrivacyCheckError):
        result.raise_if_failed()


def _without_level(lattice: LadderLattice, t: int, *, demote: bool) -> LadderLattice:
    levels = lattice.levels
    a, b, c = (int(levels.offsets[i]) for i in (t, t + 1, t + 2))
    lo, hi, offsets = levels.lo.copy(), levels.hi.copy(), levels.offsets.copy()
    if demote:  # the points of level t are put one level lower (probability e^-ε smaller)
        order = np.argsort(lo[a:c])
        lo[a:c], hi[a:c] = lo[a:c][order], hi[a:c][order]
        offsets[t + 1] = a
    else:  # level t is dropped: its points get probability 0
        keep = np.ones(lo.size, dtype=bool)
        keep[a:b] = False
        lo, hi = lo[keep], hi[keep]
        offsets[t + 1 :] -= b - a
    broken = dataclasses.replace(levels, lo=lo, hi=hi, offsets=offsets)
    # a level left empty cannot be sampled, but the checker only reads the level sets
    obj = object.__new__(LadderLattice)
    object.__setattr__(obj, "levels", broken)
    object.__setattr__(obj, "epsilon", lattice.epsilon)
    object.__setattr__(obj, "scale", lattice.scale)
    return obj


@pytest.mark.parametrize("demote", [False, True])
def test_verification_fails_when_a_level_is_dropped(demote: bool) -> None:
    m = make_discrete_ladder([(0, 1), (10, 11)], 1, delta=1, max_levels=10**5)
    lattice = m.info.ladder_noise
    units = m.info.neighbor_set_units
    for t in (1, 4):
        broken = _without_level(lattice, t, demote=demote)
        result = check_ladder_privacy(broken, shifts=units, claimed_epsilon=1)
        assert not result.passed
        assert result.realised == (2 if demote else math.inf)


def test_verification_fails_for_shifts_outside_the_declared_set() -> None:
    m = make_discrete_ladder([(0, 1), (10, 11)], 1, delta=1, max_levels=10**5)
    result = check_ladder_privacy(m.info.ladder_noise, shifts=[(0, 1), (5, 5)], claimed_epsilon=1)
    assert not result.passed  # a shift of 5 is many ladder steps


# ------------------------------------------------------------------ discrete version
def test_discrete_ladder_releases_integers() -> None:
    m = make_discrete_ladder([0, (2, 3)], 1)
    out = m(10)
    assert isinstance(out, int)
    assert m(np.array([10])).dtype == np.int64
    # a non-integer is rounded half-up, never refused by value: round(a + v) = round(a) + v for
    # every integer shift v, so the neighbour set is preserved
    assert isinstance(m(1.5), int)
    assert m.loss == PureDP(1)


def test_discrete_ladder_on_a_multiple_lattice() -> None:
    """V = {0, 5, 10}: every neighbour differs by a multiple of 5, and so does every release."""
    m = make_discrete_ladder([0, 5, 10], 1)
    assert m.info.scale == 5 and m.info.delta_units == 0
    noise = m.info.ladder_noise
    draws = noise.sample(2000)
    assert np.all(draws % 5 == 0)
    # levels are ⌈|k|/10⌉ on 5·Z: P(Z = 5j) ∝ e^{-⌈|j|/2⌉}
    k = np.array([0, 5, 10, 15, 20, 3])
    assert noise.level(k).tolist()[:5] == [0, 1, 1, 2, 2]
    assert noise.pmf(np.array([3]))[0] == 0.0


# ------------------------------------------------------------------ sums over a union of intervals
def test_sum_in_intervals_picks_the_best_mechanism_and_says_so() -> None:
    m = make_sum_in_intervals(V1, 2)
    assert m.info.chosen == "ladder" and m.name == "sum_in_intervals[ladder]"
    expected = m.info.expected_abs
    assert set(expected) == {"laplace", "staircase", "ladder"}
    assert expected["ladder"] == min(expected.values())
    assert m.noise.expected_abs() == pytest.approx(expected["ladder"])
    assert m.loss == PureDP(2) and m.map(2) == PureDP(4)
    check_ladder_privacy(m).raise_if_failed()
    # a set without gaps: the ladder is the staircase, so the staircase is picked
    plain = make_sum_in_intervals([(0, 1001)], 1)
    assert plain.info.chosen in ("staircase", "ladder")
    assert plain.info.expected_abs[plain.info.chosen] == min(plain.info.expected_abs.values())


def test_sum_in_intervals_can_be_forced_and_refuses_unknown_choices() -> None:
    m = make_sum_in_intervals(V1, 1, mechanism="laplace")
    assert m.info.chosen == "laplace" and m.loss == PureDP(1)
    assert m.map(3) == PureDP(3)
    with pytest.raises(InvalidParameterError, match="laplace noise"):
        check_ladder_privacy(m)
    with pytest.raises(InvalidParameterError):
        make_sum_in_intervals(V1, 1, mechanism="gaussian")  # type: ignore[arg-type]


def test_sum_in_intervals_projects_records_into_the_declared_set(seeded: None) -> None:
    pay = [(20_000, 25_000), (200_000, 210_000)]
    m = make_sum_in_intervals(pay, 50, grid_exponent=0)
    noise = m.info.ladder.ladder_noise
    spread = noise.tail_bound(1e-9)
    data = np.array([21_000.0, 190_000.0, 500_000.0, -7.0, 100_000.0])
    # projected: 21000, 200000, 210000, 20000, 25000 (100000 is nearer 25000)
    total = 21_000 + 200_000 + 210_000 + 20_000 + 25_000
    for _ in range(5):
        assert abs(m(data) - total) <= spread
    with pytest.raises(InvalidDataError):
        m(np.array([[1.0]]))


def test_continuous_density_summaries() -> None:
    d = ladder_density(V5, 1.0)
    x = np.linspace(-400, 400, 40_001)
    mass = float(np.sum(d.pdf(x)) * (x[1] - x[0]))
    tail = 1 - (d.cdf(np.array([400.0]))[0] - d.cdf(np.array([-400.0]))[0])
    assert mass == pytest.approx(1 - tail, abs=2e-3)
    h = d.interval_halfwidth(0.1)
    assert 1 - (d.cdf(np.array([h]))[0] - d.cdf(np.array([-h]))[0]) == pytest.approx(0.1, abs=1e-7)
    assert d.expected_abs() == pytest.approx(ladder_optimal_delta(V5, 1.0)[1], rel=1e-6)


# ------------------------------------------------------------------ batches of queries (k = 2)
def test_vector_ladder_splits_the_budget_and_composes() -> None:
    from dpkit.mechanisms._ladder_mechanism import make_ladder_vector

    m = make_ladder_vector([V1, [(0, 10)]], 2)
    assert m.loss == PureDP(2) and m.map(2) == PureDP(4)
    assert sum(m.info.epsilons) == 2 and sum(m.info.split) == 1
    # the chosen split is the best of the ones tried
    for j in (1, 5, 9):
        w = Fraction(j, 10)
        fixed = make_ladder_vector([V1, [(0, 10)]], 2, split=[w, 1 - w])
        assert fixed.info.expected_l1 >= m.info.expected_l1 * (1 - 1e-12)
    out = m([3.0, 4.0])
    assert out.shape == (2,)
    with pytest.raises(InvalidDataError):
        m([1.0, 2.0, 3.0])
    for part in m.info.parts:
        assert part.ladder_noise.epsilon in m.info.epsilons


@pytest.mark.parametrize(
    "kwargs",
    [
        {"neighbor_sets": []},
        {"neighbor_sets": "V1"},
        {"neighbor_sets": [V1, V5], "split": [0.5, 0.6]},
        {"neighbor_sets": [V1, V5], "split": [1.0, 0.0]},
        {"neighbor_sets": [V1, V5], "split": [1.0]},
    ],
)
def test_vector_ladder_refuses_bad_input(kwargs: dict[str, Any]) -> None:
    from dpkit.mechanisms._ladder_mechanism import make_ladder_vector

    with pytest.raises(InvalidParameterError):
        make_ladder_vector(epsilon=1, **kwargs)
