"""dpkit.testing exact checks: the exact and numerical privacy checks, on both sides of the line.

The checks must pass every correctly calibrated additive mechanism, and must FAIL mechanisms
whose privacy map under-reports the loss (built here by swapping a real measurement's map).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

import dpkit as dp
from dpkit.core._framework import Measurement, MechanismInfo, make_postprocess
from dpkit.core._losses import ZCDP, ApproxDP, PureDP
from dpkit.core._spaces import AtomDomain, SymmetricDistance
from dpkit.errors import InvalidParameterError, PrivacyCheckError
from dpkit.noise._distributions import DiscreteGaussian, DiscreteLaplace
from dpkit.testing import (
    CheckResult,
    check_finite_approx_dp,
    check_finite_pure_dp,
    check_finite_zcdp,
    check_lattice_approx_dp,
    check_lattice_zcdp,
    check_measurement_exact,
    check_tiered_pure_dp,
)
from dpkit.testing._exact import _largest_steps, _sampled_shifts, _sliding_extremes


# ----------------------------------------------------------------------- toy tiered noise
@dataclass
class ToyTiered:
    """A tiered lattice distribution given by an arbitrary level function (tests only; only
    what the pure-DP check reads is implemented)."""

    level_of: Callable[[np.ndarray], np.ndarray]
    rate: Fraction
    tail_start: int
    period: int
    level_step: int
    pmf_offset: Callable[[np.ndarray], np.ndarray] | None = None  # to make the pmf lie

    def level(self, k: np.ndarray) -> np.ndarray:
        return self.level_of(np.asarray(k, dtype=np.int64))

    def log_pmf(self, k: np.ndarray) -> np.ndarray:
        k = np.asarray(k, dtype=np.int64)
        out = -float(self.rate) * self.level(k).astype(np.float64)
        if self.pmf_offset is not None:
            out = out + self.pmf_offset(k)
        return out

    def sample(self, size: int) -> np.ndarray:
        raise NotImplementedError

    def cdf(self, k: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def expected_abs(self) -> float:
        raise NotImplementedError

    def variance(self) -> float:
        raise NotImplementedError

    def tail_bound(self, alpha: float) -> int:
        raise NotImplementedError

    def support_radius(self, mass: float) -> int:
        raise NotImplementedError


def brute_force_epsilon(lattice: ToyTiered, max_shift: int, half: int) -> Fraction:
    k = np.arange(-half, half + 1)
    levels = lattice.level(k).astype(np.int64)
    best = 0
    for s in range(1, max_shift + 1):
        best = max(best, int(np.max(np.abs(levels[s:] - levels[:-s]))))
    return lattice.rate * best


def staircase_levels(k: np.ndarray) -> np.ndarray:
    return np.asarray(np.abs(k) // 3)  # flat steps of width 3: period 3, step 1


def bumpy_levels(k: np.ndarray) -> np.ndarray:
    a = np.abs(k)
    return np.asarray(np.where(a == 1, 5, np.where(a == 0, 0, a)))  # a spike at ±1, then |k|


def ladder_levels(k: np.ndarray) -> np.ndarray:
    a = np.abs(k)
    head = np.array([0, 0, 2, 2, 3, 7, 7, 7])  # arbitrary head, then period 4 / step 3
    tail = 7 + 3 * ((a - 8) // 4) + np.array([0, 1, 1, 2])[(a - 8) % 4]
    return np.asarray(np.where(a < 8, head[np.minimum(a, 7)], tail))


TOYS = {
    "staircase": ToyTiered(staircase_levels, Fraction(2, 3), 0, 3, 1),
    "bumpy": ToyTiered(bumpy_levels, Fraction(1, 2), 2, 1, 1),
    "ladder": ToyTiered(ladder_levels, Fraction(3, 7), 8, 4, 3),
}


# ----------------------------------------------------------------------- tiered pure DP
@pytest.mark.parametrize("width", [1, 2, 3, 4, 7, 8])
def test_sliding_extremes_match_brute_force(width: int) -> None:
    levels = np.random.default_rng(width).integers(-50, 50, size=40)
    maxima, minima = _sliding_extremes(levels, width)
    for i in range(levels.size - 1):
        ahead = levels[i + 1 : i + 1 + width]
        assert maxima[i] == ahead.max()
        assert minima[i] == ahead.min()
    assert maxima[-1] <= levels[-1] <= minima[-1]  # the empty last window is inert
    rise, i_rise, fall, i_fall = _largest_steps(levels, width)
    rises = [levels[i + 1 : i + 1 + width].max() - levels[i] for i in range(levels.size - 1)]
    falls = [levels[i] - levels[i + 1 : i + 1 + width].min() for i in range(levels.size - 1)]
    assert (rise, fall) == (max(rises), max(falls))
    assert rises[i_rise] == rise and falls[i_fall] == fall


@pytest.mark.parametrize("name", sorted(TOYS))
@pytest.mark.parametrize("max_shift", [1, 2, 3, 5, 11])
def test_tiered_check_equals_brute_force_over_a_wide_window(name: str, max_shift: int) -> None:
    toy = TOYS[name]
    result = check_tiered_pure_dp(toy, max_shift, claimed_epsilon=100)
    assert result.realised == brute_force_epsilon(toy, max_shift, half=200)
    assert isinstance(result.realised, Fraction)
    k, s = result.witness
    assert 1 <= s <= max_shift
    gap = abs(int(toy.level(np.array([k + s]))[0]) - int(toy.level(np.array([k]))[0]))
    assert toy.rate * gap == result.realised


def test_bumpy_levels_peak_at_a_small_shift() -> None:
    """The worst shift need not be the largest: a spike of 5 at ±1 beats shift 3 on |k|."""
    result = check_tiered_pure_dp(TOYS["bumpy"], 3, claimed_epsilon=2.5)
    assert result.realised == Fraction(5, 2)
    assert result.passed
    assert not check_tiered_pure_dp(TOYS["bumpy"], 3, claimed_epsilon=2.4).passed


@pytest.mark.parametrize(
    ("scale", "max_shift"), [(Fraction(1), 1), (Fraction(7, 3), 5), (Fraction(2**20), 2**21)]
)
def test_discrete_laplace_realises_exactly_shift_over_scale(
    scale: Fraction, max_shift: int
) -> None:
    result = check_tiered_pure_dp(DiscreteLaplace(scale), max_shift, max_shift / scale)
    assert result.realised == max_shift / scale
    assert result.passed
    assert result.raise_if_failed() is result
    tighter = check_tiered_pure_dp(
        DiscreteLaplace(scale), max_shift, max_shift / scale * (1 - Fraction(1, 10**12))
    )
    assert not tighter.passed


def test_false_periodicity_declaration_is_refused() -> None:
    lying = dataclasses.replace(TOYS["staircase"], level_step=2)
    with pytest.raises(PrivacyCheckError, match="declaration is false"):
        check_tiered_pure_dp(lying, 4, 1)
    wrong_period = dataclasses.replace(TOYS["ladder"], period=3)
    with pytest.raises(PrivacyCheckError, match="periodic"):
        check_tiered_pure_dp(wrong_period, 4, 1)


def test_left_tail_is_verified_too() -> None:
    def lopsided(k: np.ndarray) -> np.ndarray:
        return np.where(k >= 0, k, 2 * np.abs(k))

    toy = ToyTiered(lopsided, Fraction(1), 0, 1, 1)
    with pytest.raises(PrivacyCheckError, match="left"):
        check_tiered_pure_dp(toy, 2, 10)


def test_levels_that_do_not_match_the_pmf_are_refused() -> None:
    def offset(k: np.ndarray) -> np.ndarray:
        return np.where(np.abs(k) == 3, -0.5, 0.0)

    toy = dataclasses.replace(TOYS["staircase"], pmf_offset=offset)
    with pytest.raises(PrivacyCheckError, match="declares log pmf"):
        check_tiered_pure_dp(toy, 2, 10)


def test_non_integer_levels_are_refused() -> None:
    toy = ToyTiered(lambda k: np.abs(k) / 2, Fraction(1), 0, 2, 1)
    with pytest.raises(PrivacyCheckError, match="integer levels"):
        check_tiered_pure_dp(toy, 2, 10)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_max_shift_must_be_a_positive_integer(bad: Any) -> None:
    with pytest.raises(InvalidParameterError) as info:
        check_tiered_pure_dp(DiscreteLaplace(Fraction(1)), bad, 1)
    assert info.value.parameter == "max_shift"


def test_failed_result_raises_a_readable_error() -> None:
    result = check_tiered_pure_dp(DiscreteLaplace(Fraction(1)), 2, 1)
    assert not result.passed
    assert result.realised == 2
    with pytest.raises(PrivacyCheckError, match=r"realised ε is 2 but ε=1 was claimed"):
        result.raise_if_failed()
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.passed = True  # type: ignore[misc]


# ----------------------------------------------------------------------- mechanisms: passing
@pytest.mark.parametrize(
    ("sensitivity", "epsilon"), [(1, 1), (1, 0.1), (3, 0.5), (0.25, 2), (1e-3, 1), ("1/3", 0.7)]
)
def test_laplace_passes_with_realised_loss_exactly_the_claim(
    sensitivity: Any, epsilon: Any
) -> None:
    m = dp.make_laplace(sensitivity, epsilon)
    result = check_measurement_exact(m).raise_if_failed()
    assert isinstance(m.loss, PureDP)
    assert result.realised == m.loss.epsilon  # calibrated exactly, not just within


def test_laplace_given_a_scale_and_grid_passes() -> None:
    m = dp.make_laplace(1, scale=0.7, grid_exponent=-10)
    check_measurement_exact(m).raise_if_failed()
    check_measurement_exact(m, d_in=5).raise_if_failed()  # the map at another distance too


@pytest.mark.parametrize(("sensitivity", "epsilon"), [(1, 1), (1, 0.05), (3, 0.5), (2.5, 2)])
def test_geometric_passes(sensitivity: Any, epsilon: Any) -> None:
    m = dp.make_geometric(sensitivity, epsilon)
    assert check_measurement_exact(m).raise_if_failed().realised == m.loss.epsilon  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"sensitivity": 1, "epsilon": 1, "delta": 1e-6},
        {"sensitivity": 2, "epsilon": 0.5, "delta": 1e-9, "calibration": "classic"},
        {"sensitivity": 1, "rho": 0.5},
        {"sensitivity": 3, "rho": 0.02},
    ],
)
def test_gaussian_passes(kwargs: dict[str, Any]) -> None:
    m = dp.make_gaussian(**kwargs)
    result = check_measurement_exact(m).raise_if_failed()
    assert result.realised <= result.claimed * (1 + 1e-9)
    assert result.realised >= result.claimed * (1 - 1e-3)  # and the claim is tight


@pytest.mark.parametrize(
    "kwargs",
    [
        {"sensitivity": 1, "epsilon": 1, "delta": 1e-6},
        {"sensitivity": 4, "epsilon": 0.3, "delta": 1e-7},
        {"sensitivity": 1, "rho": Fraction(1, 8)},
        {"sensitivity": 3, "rho": 2},
    ],
)
def test_discrete_gaussian_passes(kwargs: dict[str, Any]) -> None:
    m = dp.make_discrete_gaussian(**kwargs)
    check_measurement_exact(m, shift_samples=None).raise_if_failed()


# ----------------------------------------------------------------------- mechanisms: failing
def claiming(measurement: Measurement[Any], loss: Callable[[Fraction], Any]) -> Measurement[Any]:
    """The same noise, with a privacy map that claims ``loss(d_in)``."""
    return dataclasses.replace(measurement, privacy_map=loss)


def test_laplace_with_half_the_noise_is_flagged() -> None:
    # real noise calibrated for ε = 2 (scale Δ/2), map claiming ε = 1
    broken = claiming(dp.make_laplace(1, 2), lambda d: PureDP(d))
    result = check_measurement_exact(broken)
    assert not result.passed
    assert result.realised == 2 and result.claimed == 1
    with pytest.raises(PrivacyCheckError, match="realised ε is 2"):
        result.raise_if_failed()


def test_geometric_realising_twice_the_claim_is_flagged() -> None:
    broken = claiming(dp.make_geometric(1, Fraction(3, 5)), lambda d: PureDP(d * Fraction(3, 10)))
    result = check_measurement_exact(broken)
    assert not result.passed
    assert result.realised == Fraction(3, 5)


def test_laplace_claim_a_hair_too_small_is_flagged() -> None:
    m = dp.make_laplace(1, 1)
    broken = claiming(m, lambda d: PureDP(d * (1 - Fraction(1, 10**15))))
    assert not check_measurement_exact(broken).passed


def test_discrete_gaussian_delta_ten_times_too_small_is_flagged() -> None:
    m = dp.make_discrete_gaussian(1, epsilon=1, delta=1e-6)
    true = m.loss
    assert isinstance(true, ApproxDP)
    lattice = m.noise.lattice
    assert check_lattice_approx_dp(lattice, [1], true.epsilon, true.delta).passed
    result = check_lattice_approx_dp(lattice, [1], true.epsilon, true.delta / 10)
    assert not result.passed
    assert math.isclose(result.realised, float(true.delta), rel_tol=1e-6)
    with pytest.raises(PrivacyCheckError, match="realised δ"):
        result.raise_if_failed()
    broken = claiming(m, lambda d: ApproxDP(true.epsilon, true.delta / 10))
    assert not check_measurement_exact(broken).passed


def test_zcdp_claim_of_half_rho_is_flagged() -> None:
    m = dp.make_discrete_gaussian(1, rho=Fraction(1, 2))
    lattice = m.noise.lattice
    assert check_lattice_zcdp(lattice, [1], Fraction(1, 2)).passed
    result = check_lattice_zcdp(lattice, [1], Fraction(1, 4))
    assert not result.passed
    assert math.isclose(result.realised, 0.5, rel_tol=1e-9)
    broken = claiming(dp.make_gaussian(1, rho=0.5), lambda d: ZCDP(d * d / 4))
    assert not check_measurement_exact(broken).passed


def test_gaussian_approx_claim_at_a_smaller_epsilon_is_flagged() -> None:
    m = dp.make_gaussian(1, epsilon=1, delta=1e-6)
    true = m.loss
    assert isinstance(true, ApproxDP)
    broken = claiming(m, lambda d: ApproxDP(Fraction(9, 10), true.delta))
    assert not check_measurement_exact(broken).passed


# ----------------------------------------------------------------------- lattice checks directly
def test_discrete_gaussian_renyi_is_exact_at_integer_orders() -> None:
    lattice = DiscreteGaussian(Fraction(9, 4))
    result = check_lattice_zcdp(lattice, [1, 2, 3], claimed_rho=2, alphas=[2.0, 3.0, 7.0])
    assert math.isclose(result.realised, 9 / (2 * 9 / 4), rel_tol=1e-12)  # s²/(2σ²) at s = 3
    assert result.witness[1] == 3


def test_laplace_delta_is_zero_at_its_epsilon_and_positive_below() -> None:
    lattice = DiscreteLaplace(Fraction(4))
    assert check_lattice_approx_dp(lattice, [1, 2, 4], Fraction(1), 0).realised < 1e-15
    result = check_lattice_approx_dp(lattice, [4], Fraction(1, 2), 0)
    assert not result.passed
    # hockey stick of the discrete Laplace at shift s: 1 - e^{ε} p^{s}... checked numerically
    k = np.arange(-400, 401)
    p = np.exp(lattice.log_pmf(k))
    q = np.exp(lattice.log_pmf(k + 4))
    assert math.isclose(
        result.realised, float(np.sum(np.maximum(0, p - math.exp(0.5) * q))), rel_tol=1e-9
    )


def test_lattice_checks_validate_their_arguments() -> None:
    lattice = DiscreteLaplace(Fraction(1))
    with pytest.raises(InvalidParameterError):
        check_lattice_approx_dp(lattice, [], 1, 0)
    with pytest.raises(InvalidParameterError):
        check_lattice_zcdp(lattice, [0], 1)
    with pytest.raises(InvalidParameterError):
        check_lattice_zcdp(lattice, [1], 1, alphas=[1.0])


def test_asymmetric_noise_is_refused_by_the_lattice_checks() -> None:
    @dataclass(frozen=True)
    class Lopsided:
        def log_pmf(self, k: np.ndarray) -> np.ndarray:
            k = np.asarray(k, dtype=np.float64)
            return np.where(k >= 0, -k, 2 * k) - 1.0

        def cdf(self, k: np.ndarray) -> np.ndarray:
            return np.exp(2 * np.minimum(np.asarray(k, dtype=np.float64), 0) - 1.0)

        def support_radius(self, mass: float) -> int:
            return 800

        def variance(self) -> float:
            return 2.0

    with pytest.raises(PrivacyCheckError, match="symmetric"):
        check_lattice_approx_dp(Lopsided(), [1], 1, 0.1)  # type: ignore[arg-type]


def test_sampled_shifts_cover_the_ends() -> None:
    assert _sampled_shifts(5, 16) == [1, 2, 3, 4, 5]
    shifts = _sampled_shifts(4096, 16)
    assert shifts[0] == 1 and shifts[-1] == 4096 and len(shifts) <= 20
    assert _sampled_shifts(40, None) == list(range(1, 41))


# ----------------------------------------------------------------------- finite outputs
def rr_pmf(epsilon: float) -> Callable[[int], np.ndarray]:
    keep = math.exp(epsilon) / (1 + math.exp(epsilon))

    def pmf(x: int) -> np.ndarray:
        return np.array([keep, 1 - keep]) if x == 0 else np.array([1 - keep, keep])

    return pmf


def test_finite_pure_dp_randomized_response() -> None:
    assert check_finite_pure_dp(rr_pmf(1.0), [(0, 1)], 1).passed
    result = check_finite_pure_dp(rr_pmf(1.0), [(0, 1)], 0.5)
    assert not result.passed
    assert math.isclose(result.realised, 1.0, rel_tol=1e-12)
    assert result.witness[:2] == (0, 1)


def test_finite_pure_dp_exact_fractions() -> None:
    def pmf(x: int) -> list[Fraction]:
        return [Fraction(3, 4), Fraction(1, 4)] if x else [Fraction(1, 4), Fraction(3, 4)]

    ln3 = math.log(3)
    result = check_finite_pure_dp(pmf, [(0, 1)], Fraction(ln3) * (1 + Fraction(1, 10**14)))
    assert result.passed
    assert isinstance(result.realised, Fraction)
    assert not check_finite_pure_dp(pmf, [(0, 1)], Fraction(ln3) * (1 - Fraction(1, 10**14))).passed


def test_finite_pure_dp_infinite_loss() -> None:
    def pmf(x: int) -> np.ndarray:
        return np.array([0.5, 0.5, 0.0]) if x == 0 else np.array([0.5, 0.25, 0.25])

    result = check_finite_pure_dp(pmf, [(0, 1)], 100)
    assert not result.passed and result.realised == math.inf
    assert result.witness == (0, 1, 2)
    approx = check_finite_approx_dp(pmf, [(0, 1)], 0, 0.25)
    assert approx.passed and math.isclose(approx.realised, 0.25)
    assert not check_finite_approx_dp(pmf, [(0, 1)], 0, 0.2).passed
    assert not check_finite_zcdp(pmf, [(0, 1)], 100).passed


def test_finite_zcdp_of_randomized_response() -> None:
    # ε-DP implies ε²/2-zCDP (Bun & Steinke 2016, Prop. 1.4): the check must agree
    assert check_finite_zcdp(rr_pmf(1.0), [(0, 1)], 0.5).passed
    assert not check_finite_zcdp(rr_pmf(1.0), [(0, 1)], 0.05).passed


def test_finite_checks_refuse_non_distributions() -> None:
    with pytest.raises(PrivacyCheckError, match="not a probability vector"):
        check_finite_pure_dp(lambda x: np.array([0.5, 0.6]), [(0, 1)], 1)
    with pytest.raises(PrivacyCheckError, match="outputs"):
        check_finite_pure_dp(lambda x: np.ones(x + 1) / (x + 1), [(0, 1)], 1)


def finite_measurement(epsilon: float, claim: Any) -> Measurement[Any]:
    pmf = rr_pmf(epsilon)
    return Measurement(
        AtomDomain("int"),
        SymmetricDistance(),
        "pure",
        lambda x: x,
        lambda d: claim,
        name="toy_rr",
        d_in=Fraction(1),
        info=MechanismInfo(output_pmf=pmf),
    )


def test_measurement_exact_dispatches_finite_output_mechanisms() -> None:
    assert check_measurement_exact(
        finite_measurement(1.0, PureDP(1)), neighbour_pairs=[(0, 1)]
    ).passed
    assert not check_measurement_exact(
        finite_measurement(1.0, PureDP(0.9)), neighbour_pairs=[(0, 1)]
    ).passed
    assert check_measurement_exact(
        finite_measurement(1.0, ApproxDP(1, 0)), neighbour_pairs=[(0, 1)]
    ).passed
    assert check_measurement_exact(
        finite_measurement(1.0, ZCDP(0.5)), neighbour_pairs=[(0, 1)]
    ).passed
    with pytest.raises(InvalidParameterError) as info:
        check_measurement_exact(finite_measurement(1.0, PureDP(1)))
    assert info.value.parameter == "neighbour_pairs"


def test_measurement_exact_refuses_what_it_cannot_check() -> None:
    laplace = dp.make_laplace(1, 1)
    with pytest.raises(NotImplementedError, match="audit"):
        check_measurement_exact(make_postprocess(laplace, lambda v: v))
    several = dataclasses.replace(
        laplace, info=dataclasses.replace(laplace.info, changed_coordinates=3)
    )
    with pytest.raises(NotImplementedError, match="changed_coordinates"):
        check_measurement_exact(several)
    chained = dataclasses.replace(laplace, input_metric=SymmetricDistance())
    with pytest.raises(NotImplementedError, match="inner measurement"):
        check_measurement_exact(chained)


def test_distance_zero_costs_nothing() -> None:
    result = check_measurement_exact(dp.make_laplace(1, 1), d_in=0)
    assert result.passed and result.realised == 0


def test_check_result_is_a_frozen_value() -> None:
    result = CheckResult("pure", Fraction(1), Fraction(1), True, (0, 1), "detail")
    assert result.raise_if_failed() is result
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.realised = Fraction(2)  # type: ignore[misc]
