"""Audits of the zCDP smooth-sensitivity releases (Bun–Steinke noises) on hard neighbours.

x = (0, 0, 1, 1, 100) and y = (0, 1, 1, 1, 100): the median's local sensitivity is 1 on x and 0
on y. The broken variant computes S with β = 40 (so S ≈ LS: noise calibrated to local
sensitivity) while claiming the same ρ; the auditor must flag it.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from dpkit.core._losses import ZCDP
from dpkit.errors import InvalidParameterError
from dpkit.sensitivity._data import Bounds, make_statistic
from dpkit.sensitivity._smooth import (
    SmoothPlan,
    build_smooth_measurement,
    make_smooth_sensitivity,
    plan_zcdp,
)
from dpkit.testing import audit_samples_zcdp

X = np.array([0.0, 0.0, 1.0, 1.0, 100.0])
Y = np.array([0.0, 1.0, 1.0, 1.0, 100.0])
SAMPLES = 20_000
FAMILIES = ["laplace_log_normal", "uniform_log_normal", "student_t", "arcsinh_normal"]


def _audit(m: object, a: np.ndarray, b: np.ndarray) -> object:
    rho = m.loss.rho  # type: ignore[attr-defined]
    many = m.info.release_many  # type: ignore[attr-defined]
    return audit_samples_zcdp(many(a, SAMPLES), many(b, SAMPLES), rho)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize(
    ("a", "b"), [(X, Y), (Y, X), (np.zeros(5), np.array([0.0, 0.0, 0.0, 0.0, 100.0]))]
)
def test_zcdp_release_passes_audit(family: str, a: np.ndarray, b: np.ndarray) -> None:
    # a public grid of 2^-20: the float path decides nearly every draw (fast test)
    m = make_smooth_sensitivity(
        "median", lower=0, upper=100, n=5, rho=0.5, noise=family, grid_exponent=-20
    )
    assert m.loss <= ZCDP(Fraction(1, 2))
    assert m.output_measure == "zcdp"
    result = _audit(m, a, b)
    assert result.passed, result  # type: ignore[attr-defined]


@pytest.mark.parametrize("family", FAMILIES)
def test_local_sensitivity_calibration_is_flagged(family: str) -> None:
    good = plan_zcdp(Fraction(1, 2), family, -20)
    broken = SmoothPlan(family, 0, good.alpha, Fraction(40), good.exponent, 1, good.loss, good.zcdp)
    m = build_smooth_measurement(make_statistic("median"), Bounds.of(0, 100), 5, broken)
    result = _audit(m, X, Y)
    assert not result.passed  # type: ignore[attr-defined]


def test_other_statistic_and_group_map() -> None:
    m = make_smooth_sensitivity(
        "trimmed_mean",
        trim=0.2,
        lower=0,
        upper=100,
        n=5,
        rho=0.5,
        noise="student_t",
        grid_exponent=-20,
    )
    assert _audit(m, X, Y).passed  # type: ignore[attr-defined]
    assert m.privacy_map(2) == ZCDP(4 * m.loss.rho)  # type: ignore[attr-defined]


def test_parameters_are_checked_before_data() -> None:
    with pytest.raises(InvalidParameterError):  # t = β too large for the arcsinh-normal
        make_smooth_sensitivity(
            "median", lower=0, upper=1, n=5, rho=1, noise="arcsinh_normal", beta=2
        )
    with pytest.raises(InvalidParameterError):  # epsilon instead of rho
        make_smooth_sensitivity("median", lower=0, upper=1, n=5, epsilon=1, noise="student_t")
    with pytest.raises(InvalidParameterError):  # rho with an (ε, δ) family
        make_smooth_sensitivity("median", lower=0, upper=1, n=5, rho=1)
    with pytest.raises(InvalidParameterError):
        make_smooth_sensitivity(
            "median", lower=0, upper=1, n=5, rho=1, noise="student_t", degrees_of_freedom=0
        )
    with pytest.raises(InvalidParameterError):
        make_smooth_sensitivity(
            "median", lower=0, upper=1, n=5, rho=1, noise="laplace_log_normal", beta=5, sigma=0.5
        )
    with pytest.raises(InvalidParameterError):
        make_smooth_sensitivity(
            "median", lower=0, upper=1, n=5, rho=1, noise="uniform_log_normal", sigma=0.1
        )


@pytest.mark.parametrize("family", FAMILIES)
def test_nan_and_inf_never_raise(family: str) -> None:
    m = make_smooth_sensitivity("median", lower=-1, upper=1, n=4, rho=0.1, noise=family)
    for data in ([np.nan, np.inf, -np.inf, 1e308], [0.0, 0.0, 0.0, 0.0]):
        out = m(np.array(data))
        assert -3 <= out <= 3
