"""The staircase mechanism keeps its ε-DP claim, and the checks catch staircases that do not.

Three kinds of evidence, as for the additive mechanisms (tests/statistical/test_audit.py,
tests/unit/testing/test_exact.py):

* the exact check (:func:`dpkit.testing.check_measurement_exact`) proves the claim from the
  declared lattice staircase, and finds the realised loss *equal* to the claim (so the check
  is meaningful: a claim a hair smaller would fail);
* the statistical audit (:func:`dpkit.testing.audit_measurement`) passes at ~100k releases per
  side (2M behind ``slow``) and certifies most of ε, so it is not vacuous;
* broken staircases — a map claiming half the real loss, a period built for half the
  sensitivity, per-coordinate noise that ignores ``changed_coordinates`` — are flagged by both.

Audits draw releases in one vectorised call. The default staircase refuses arrays of more than
one value (without ``changed_coordinates`` its loss on vectors is not defined), which would make
``audit_measurement`` fall back to one call per release (~0.3 ms each); so the audits use the
``changed_coordinates=1`` form, which for scalar inputs has the same noise and the same map
(checked in :func:`test_vector_form_has_the_same_noise_and_map`).

Sampling runs under the ``seeded`` fixture: outcomes are reproducible.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

import dpkit as dp
from dpkit.core._framework import Measurement
from dpkit.core._losses import PureDP
from dpkit.errors import PrivacyCheckError
from dpkit.testing import audit_measurement, audit_samples, check_measurement_exact

pytestmark = pytest.mark.usefixtures("seeded")

CI_SAMPLES = 100_000
SLOW_SAMPLES = 2_000_000

# (id, make_staircase kwargs). The first two use the default grid (D ≈ 2^20 grid steps per
# sensitivity, what users get; the exact check takes ~1.5 s there); the others pick a coarser
# grid to stay fast, with a sensitivity that is not a power of two in the last one.
SETTINGS: list[tuple[str, dict[str, Any]]] = [
    ("default-grid", {"sensitivity": 1, "epsilon": 1}),
    ("l2-cost", {"sensitivity": 3, "epsilon": 0.5, "cost": "l2"}),
    ("large-eps", {"sensitivity": 0.25, "epsilon": 4, "gamma": 0.3, "grid_exponent": -10}),
    ("off-grid-sensitivity", {"sensitivity": 0.3, "epsilon": 2, "grid_exponent": -12}),
]
IDS = [name for name, _ in SETTINGS]
KWARGS = [kwargs for _, kwargs in SETTINGS]


def calibrated(measurement: Measurement[Any]) -> Fraction:
    """The distance the measurement is calibrated for (its sensitivity)."""
    assert measurement.d_in is not None
    return measurement.d_in


def epsilon_of(measurement: Measurement[Any]) -> Fraction:
    claim = measurement.map(calibrated(measurement))
    assert isinstance(claim, PureDP)
    return claim.epsilon


def claiming(measurement: Measurement[Any], epsilon: Fraction) -> Measurement[Any]:
    """The same noise with a map claiming ``epsilon`` per sensitivity (linear in the distance,
    as a careless map would)."""
    sensitivity = calibrated(measurement)
    return dataclasses.replace(
        measurement, privacy_map=lambda d: PureDP(epsilon * Fraction(d) / sensitivity)
    )


def vector_form(kwargs: dict[str, Any]) -> Measurement[Any]:
    """The staircase with ``changed_coordinates=1``: vectorised releases of independent noise."""
    return dp.make_staircase(**kwargs, changed_coordinates=1)


# ----------------------------------------------------------------------- exact check
@pytest.mark.parametrize("kwargs", KWARGS, ids=IDS)
def test_exact_check_passes_and_the_claim_is_tight(kwargs: dict[str, Any]) -> None:
    m = dp.make_staircase(**kwargs)
    result = check_measurement_exact(m).raise_if_failed()
    assert result.passed
    # a shift by one period moves the level by exactly one step: the realised ε is the claim,
    # exactly (a Fraction, no rounding)
    assert result.realised == m.loss.epsilon == Fraction(kwargs["epsilon"])  # type: ignore[union-attr]


@pytest.mark.parametrize("multiple", [Fraction(1, 2), Fraction(1), Fraction(2), Fraction(5, 2)])
def test_the_map_is_exact_at_other_distances(multiple: Fraction) -> None:
    """ε·⌈d/Δ⌉ (on the grid): within one period one level, two periods two levels, ..."""
    m = dp.make_staircase(1, Fraction(3, 4), grid_exponent=-8)  # D = 256
    result = check_measurement_exact(m, d_in=multiple).raise_if_failed()
    assert result.realised == result.claimed == Fraction(3, 4) * -(-multiple // 1)


def test_vector_form_has_the_same_noise_and_map() -> None:
    for kwargs in KWARGS:
        default, vector = dp.make_staircase(**kwargs), vector_form(kwargs)
        assert vector.noise == default.noise
        sensitivity = calibrated(default)
        for d in (sensitivity, 2 * sensitivity, sensitivity / 3):
            assert vector.map(d) == default.map(d)


# ----------------------------------------------------------------------- statistical audit
@pytest.mark.parametrize("kwargs", KWARGS, ids=IDS)
def test_audit_passes_and_is_not_vacuous(kwargs: dict[str, Any]) -> None:
    m = vector_form(kwargs)
    result = audit_measurement(m, 0.0, float(kwargs["sensitivity"]), CI_SAMPLES)
    result.raise_if_failed()
    # for inputs 0 and Δ every output below the first step has ratio exactly e^ε, an event of
    # mass ~1/2: the audit certifies most of the claim (0.91-0.97 of ε at this size)
    assert result.epsilon_lower_bound > 0.8 * kwargs["epsilon"]


@pytest.mark.slow
@pytest.mark.parametrize("kwargs", KWARGS, ids=IDS)
def test_audit_passes_at_scale(kwargs: dict[str, Any]) -> None:
    m = vector_form(kwargs)
    result = audit_measurement(m, 0.0, float(kwargs["sensitivity"]), SLOW_SAMPLES)
    result.raise_if_failed()
    assert result.epsilon_lower_bound > 0.95 * kwargs["epsilon"]


# ----------------------------------------------------------------------- broken staircases
@pytest.mark.parametrize("kwargs", [KWARGS[0], KWARGS[2]], ids=[IDS[0], IDS[2]])
def test_staircase_built_for_twice_its_claim_is_flagged_exactly(kwargs: dict[str, Any]) -> None:
    eps = Fraction(kwargs["epsilon"])
    broken = claiming(dp.make_staircase(**{**kwargs, "epsilon": 2 * eps}), eps)
    result = check_measurement_exact(broken)
    assert not result.passed
    assert result.realised == 2 * eps and result.claimed == eps
    with pytest.raises(PrivacyCheckError, match="realised ε is"):
        result.raise_if_failed()


@pytest.mark.parametrize("kwargs", KWARGS, ids=IDS)
def test_staircase_built_for_twice_its_claim_is_refuted_by_audit(kwargs: dict[str, Any]) -> None:
    eps = Fraction(kwargs["epsilon"])
    broken = claiming(vector_form({**kwargs, "epsilon": 2 * eps}), eps)
    result = audit_measurement(broken, 0.0, float(kwargs["sensitivity"]), CI_SAMPLES)
    assert not result.passed
    assert result.epsilon_lower_bound > float(eps)
    with pytest.raises(PrivacyCheckError, match="refutes the claim"):
        result.raise_if_failed()


def half_period_staircase(sensitivity: Fraction, epsilon: Fraction, **kwargs: Any) -> Any:
    """A staircase whose period is built for Δ/2 but whose map claims ε at distance Δ (an
    off-by-two in the period): inputs Δ apart are two periods apart, so the real loss is 2ε."""
    inner = dp.make_staircase(sensitivity / 2, epsilon, **kwargs)
    return dataclasses.replace(
        inner,
        d_in=sensitivity,
        privacy_map=lambda d: PureDP(epsilon * -(-Fraction(d) // sensitivity)),
    )


def test_staircase_with_half_the_period_is_flagged_by_both_checks() -> None:
    eps = Fraction(1)
    broken = half_period_staircase(Fraction(1), eps, grid_exponent=-10)
    exact = check_measurement_exact(broken)
    assert not exact.passed and exact.realised == 2 * eps and exact.claimed == eps
    with pytest.raises(PrivacyCheckError):
        exact.raise_if_failed()

    vector = half_period_staircase(Fraction(1), eps, grid_exponent=-10, changed_coordinates=1)
    audit = audit_measurement(vector, 0.0, 1.0, CI_SAMPLES)
    assert not audit.passed and audit.epsilon_lower_bound > float(eps)


@pytest.mark.slow
def test_staircase_claiming_ninety_percent_is_refuted_at_scale() -> None:
    m = vector_form({"sensitivity": 1, "epsilon": 1})
    broken = claiming(m, Fraction(9, 10))
    assert not check_measurement_exact(broken).passed
    audit = audit_measurement(broken, 0.0, 1.0, SLOW_SAMPLES)
    assert not audit.passed and audit.epsilon_lower_bound > 0.9


# ----------------------------------------------------------------------- several coordinates
def level_statistic(m: Measurement[Any], x: np.ndarray, y: np.ndarray) -> Any:
    """The release's log-likelihood ratio ln p_x(o)/p_y(o), in units of the per-coordinate rate:
    Σ_i level(o_i - y_i) - level(o_i - x_i) on the lattice (Neyman–Pearson: thresholds of it
    are the most powerful events). Any statistic gives a valid audit; this one a strong one."""
    lattice, g = m.noise.lattice, 2.0**m.noise.exponent
    x_steps, y_steps = np.rint(x / g).astype(np.int64), np.rint(y / g).astype(np.int64)

    def statistic(releases: np.ndarray) -> np.ndarray:
        steps = np.rint(releases / g).astype(np.int64)
        rise = lattice.level(steps - y_steps) - lattice.level(steps - x_steps)
        return np.asarray(rise.sum(axis=-1), dtype=np.float64)

    return statistic


def audit_two_coordinates(m: Measurement[Any], n: int) -> Any:
    """Audit the claim at d_in = Δ on x = (0, 0), y = (Δ/2, Δ/2): each coordinate moves by half
    a period, one level each at rate ε/2, so the worst output has ratio e^ε (the claim)."""
    delta = float(calibrated(m))
    x, y = np.zeros(2), np.full(2, delta / 2)
    statistic = level_statistic(m, x, y)
    a = statistic(m(np.tile(x, (n, 1))))
    b = statistic(m(np.tile(y, (n, 1))))
    return audit_samples(a, b, epsilon_of(m))


def test_two_changed_coordinates_pass_the_audit() -> None:
    m = dp.make_staircase(1, 1, changed_coordinates=2)
    with pytest.raises(NotImplementedError, match="changed_coordinates"):
        check_measurement_exact(m)  # one coordinate only: the audit is the check here
    result = audit_two_coordinates(m, CI_SAMPLES).raise_if_failed()
    assert result.epsilon_lower_bound > 0.8


def test_per_coordinate_noise_ignoring_changed_coordinates_is_refuted() -> None:
    """Each coordinate at rate ε instead of ε/2 (the map still claims ε): real loss 2ε."""
    m = dp.make_staircase(1, 2, changed_coordinates=2)  # rate 1 per coordinate
    broken = dataclasses.replace(m, privacy_map=lambda d: PureDP(Fraction(d)))
    result = audit_two_coordinates(broken, CI_SAMPLES)
    assert not result.passed and result.epsilon_lower_bound > 1
